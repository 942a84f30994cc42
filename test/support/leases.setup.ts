// The `leases` project's setup file (jest.config.js): its specs run their dispatch suites with
// `dispatcher.claims: 'leases'` (test/support/outbox-harness.ts) on PostgreSQL, where a mode left
// out is 'partitions'; MariaDB and SQLite lease rows in the default run already.
process.env.OUTBOX_TEST_CLAIMS = 'leases';
process.env.OUTBOX_TEST_DATABASES = 'postgres';
