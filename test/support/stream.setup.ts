// The `stream` project's setup file (jest.config.js): its specs run their dispatch suites with
// `dispatcher.claims: 'partitions'` publishing as a stream of 40 unanswered messages
// (test/support/outbox-harness.ts), fed by the database's log (test/support/sources.ts), on
// PostgreSQL, the database that has both.
process.env.OUTBOX_TEST_CLAIMS = 'partitions';
process.env.OUTBOX_TEST_PUBLISH_WINDOW = '40';
process.env.OUTBOX_TEST_DATABASES = 'postgres';
process.env.OUTBOX_TEST_SOURCE = 'log';
