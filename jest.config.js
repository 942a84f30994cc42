const { entryPoints } = require('./entry-points.json');

/** @type {import('jest').Config} */
const base = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  // Each entry point to its source, from the one list (entry-points.json).
  moduleNameMapper: Object.fromEntries(
    Object.entries(entryPoints).map(([name, { source }]) => [`^${name}$`, `<rootDir>/${source}`]),
  ),
};

// Per project, not global: jest runs a project's global setup only when the run selects one of
// its specs, so a unit-only run probes no service and starts no broker.
const services = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
};

// Specs that need a Kafka Connect worker (npm run connect:start), whose start-up alone takes longer
// than most suites, and the fault kit's (dispatcher processes booted and broken, minutes on a
// busy machine): a project only when asked for (npm run test:slow sets OUTBOX_TEST_SLOW=1), so
// that `npm test` and `npm test -- <path> -t <name>` leave it out without a project filter (jest's
// --selectProjects would take the path that follows it for a project name).
const slow =
  process.env.OUTBOX_TEST_SLOW === '1'
    ? [
        {
          ...base,
          ...services,
          displayName: 'slow',
          testMatch: ['<rootDir>/test/slow/**/*.spec.ts'],
        },
      ]
    : [];

// The longest suites of the default run (over a minute each on the two-core CI machine: processes
// forked and killed, the CLI run as a child per command, every connection's conformance suite):
// their own project, run when asked for (npm run test:heavy sets OUTBOX_TEST_HEAVY=1; CI runs it
// right after npm test), so that npm test stays well under its time.
const HEAVY_SPECS = [
  'test/dispatch/dispatcher-faults.spec.ts',
  'test/operations/outbox-cli.spec.ts',
  'test/log-tailing/log-tailing.spec.ts',
  'test/connections/drizzle.conformance.spec.ts',
  'test/connections/connection.conformance.spec.ts',
  'test/connections/mikro-orm-own-transactions.spec.ts',
  'test/store/mariadb.store.spec.ts',
  'test/publishers/rabbitmq.publisher.spec.ts',
];
const heavy =
  process.env.OUTBOX_TEST_HEAVY === '1'
    ? [
        {
          ...base,
          ...services,
          displayName: 'heavy',
          testMatch: HEAVY_SPECS.map((spec) => `<rootDir>/${spec}`),
        },
      ]
    : [];

// The specs whose promises are parameterised by the source of new messages
// (test/support/sources.ts): the integration project runs them on the table's poll; the
// `sources` project runs them again on the database's log (PostgreSQL logical replication,
// the MariaDB binlog). That second run is a project only when asked for (npm run test:sources
// sets OUTBOX_TEST_SOURCES=1), like `slow`, so that `npm test` keeps its time.
const SOURCE_SPECS = [
  'test/dispatch/delivery.spec.ts',
  'test/dispatch/ordering.spec.ts',
  'test/dispatch/retries.spec.ts',
  'test/dispatch/dispatcher-faults.spec.ts',
  'test/dispatch/shutdown.spec.ts',
  'test/dispatch/database-outage.spec.ts',
  'test/dispatch/tenants.spec.ts',
  'test/local/local-rabbitmq.spec.ts',
  'test/dispatch/redrive-delivery.spec.ts',
  'test/dispatch/key-sequence.spec.ts',
  'test/dispatch/lease-renewal.spec.ts',
  'test/dispatch/event-policies.spec.ts',
  'test/dispatch/claim-check.spec.ts',
  'test/dispatch/gap-repair-delivery.spec.ts',
  'test/dispatch/erasure.spec.ts',
];
const sources =
  process.env.OUTBOX_TEST_SOURCES === '1'
    ? [
        {
          ...base,
          ...services,
          displayName: 'sources',
          setupFiles: ['<rootDir>/test/support/log-source.setup.ts'],
          testMatch: SOURCE_SPECS.map((spec) => `<rootDir>/${spec}`),
        },
      ]
    : [];

// The same promises once more with `dispatcher.claims: 'leases'` on PostgreSQL, where a mode left
// out is 'partitions' (MariaDB and SQLite lease rows in the default run already): a project only
// when asked for (npm run test:leases sets OUTBOX_TEST_LEASES=1), like `sources`.
const LEASES_OWN = [
  'test/dispatch/lease-renewal.spec.ts',
  'test/dispatch/tenants.spec.ts',
  'test/dispatch/dispatcher-faults.spec.ts',
];
const leases =
  process.env.OUTBOX_TEST_LEASES === '1'
    ? [
        {
          ...base,
          ...services,
          displayName: 'leases',
          setupFiles: ['<rootDir>/test/support/leases.setup.ts'],
          // The promise suites but those that are the 'leases' mode's own (lease renewal,
          // tenant-fair claims, the lease faults), which pin 'leases' and run in the default run.
          testMatch: SOURCE_SPECS.filter((spec) => !LEASES_OWN.includes(spec)).map(
            (spec) => `<rootDir>/${spec}`,
          ),
        },
      ]
    : [];

// The same promises once more publishing as a stream (`dispatcher.publishWindow`, a window of 40
// in slices of 10, on 'partitions'), fed by the log (`delivery: logTailing()`: the reader owns
// every partition): slices across batches, settles written together and the log's wake-ups must
// keep every one. The feed and the publishing are independent parts, so one project runs both
// (the default run polls PostgreSQL by partitions, batch by batch). Only when asked for (npm run
// test:stream sets OUTBOX_TEST_STREAM=1).
const stream =
  process.env.OUTBOX_TEST_STREAM === '1'
    ? [
        {
          ...base,
          ...services,
          displayName: 'stream',
          setupFiles: ['<rootDir>/test/support/stream.setup.ts'],
          testMatch: SOURCE_SPECS.filter((spec) => !LEASES_OWN.includes(spec)).map(
            (spec) => `<rootDir>/${spec}`,
          ),
        },
      ]
    : [];

module.exports = {
  // Records the selected specs for the global setup (it starts Kafka only when one needs it).
  testSequencer: '<rootDir>/test/support/selected-specs-sequencer.js',
  // Each spec's time per project, when scripts/test.sh records them (OUTBOX_TEST_RECORD_TIMES=1).
  reporters: process.env.OUTBOX_TEST_TIMES_OUT
    ? ['default', '<rootDir>/test/support/spec-times-reporter.js']
    : ['default'],
  testTimeout: 60_000,
  projects: [
    // Pure code, no services: `<name>.unit.spec.ts` beside the other tests of its subject, in
    // the folder of test/ named like the subject's folder of lib/.
    { ...base, displayName: 'unit', testMatch: ['<rootDir>/test/**/*.unit.spec.ts'] },
    {
      ...base,
      ...services,
      displayName: 'integration',
      // Every promise folder (dispatch, publishers, operations, integrations, module, inbox,
      // store, and any new one): a new folder cannot be left out of the run by accident.
      testMatch: ['<rootDir>/test/**/*.spec.ts'],
      testPathIgnorePatterns: [
        '/node_modules/',
        '\\.unit\\.spec\\.ts$',
        '<rootDir>/test/slow/',
        ...HEAVY_SPECS.map((spec) => `<rootDir>/${spec}`),
      ],
    },
    ...slow,
    ...heavy,
    ...sources,
    ...leases,
    ...stream,
    {
      ...base,
      ...services,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/e2e/**/*.e2e-spec.ts'],
    },
  ],
};
