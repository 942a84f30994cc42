// The `sources` project's setup file (jest.config.js): its specs run their source-parameterised
// suites on the database's log instead of the table's poll (test/support/sources.ts). Jest gives
// each spec file its own process.env, so the integration project's run of the same file polls.
process.env.OUTBOX_TEST_SOURCE = 'log';
