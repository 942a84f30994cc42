// The `partitions` project's setup file (jest.config.js): its specs run their dispatch suites
// with `dispatcher.claims: 'partitions'` (test/support/outbox-harness.ts), on PostgreSQL, the
// database that has it.
process.env.OUTBOX_TEST_CLAIMS = 'partitions';
process.env.OUTBOX_TEST_DATABASES = 'postgres';
