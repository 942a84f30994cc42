/** @type {import('jest').Config} */
const base = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  moduleNameMapper: {
    '^nestjs-outbox$': '<rootDir>/lib/index.ts',
    '^nestjs-outbox/microservices$': '<rootDir>/lib/publishers/microservices/index.ts',
    '^nestjs-outbox/kafka$': '<rootDir>/lib/publishers/kafka/index.ts',
    '^nestjs-outbox/rabbitmq$': '<rootDir>/lib/publishers/rabbitmq/index.ts',
    '^nestjs-outbox/prometheus$': '<rootDir>/lib/integrations/prometheus/index.ts',
    '^nestjs-outbox/terminus$': '<rootDir>/lib/integrations/terminus/index.ts',
    '^nestjs-outbox/opentelemetry$': '<rootDir>/lib/integrations/opentelemetry/index.ts',
    '^nestjs-outbox/testing$': '<rootDir>/lib/testing/index.ts',
    '^nestjs-outbox/inbox$': '<rootDir>/lib/inbox/index.ts',
    '^nestjs-outbox/console$': '<rootDir>/lib/operations/console/index.ts',
    '^nestjs-outbox/pg$': '<rootDir>/lib/orm/pg/index.ts',
    '^nestjs-outbox/mysql2$': '<rootDir>/lib/orm/mysql2/index.ts',
    '^nestjs-outbox/better-sqlite3$': '<rootDir>/lib/orm/better-sqlite3/index.ts',
    '^nestjs-outbox/kysely$': '<rootDir>/lib/orm/kysely/index.ts',
    '^nestjs-outbox/drizzle$': '<rootDir>/lib/orm/drizzle/index.ts',
    '^nestjs-outbox/mikro-orm$': '<rootDir>/lib/orm/mikro-orm/index.ts',
    '^nestjs-outbox/prisma$': '<rootDir>/lib/orm/prisma/index.ts',
  },
};

// Per project, not global: jest runs a project's global setup only when the run selects one of
// its specs, so a unit-only run probes no service and starts no broker.
const services = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
};

module.exports = {
  // Records the selected specs for the global setup (it starts Kafka only when one needs it).
  testSequencer: '<rootDir>/test/support/selected-specs-sequencer.js',
  testTimeout: 60_000,
  projects: [
    { ...base, displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.spec.ts'] },
    {
      ...base,
      ...services,
      displayName: 'integration',
      // Every promise folder (dispatch, publishers, operations, integrations, module, inbox,
      // store, and any new one): a new folder cannot be left out of the run by accident.
      testMatch: ['<rootDir>/test/**/*.spec.ts'],
      testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/unit/'],
    },
    {
      ...base,
      ...services,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/e2e/**/*.e2e-spec.ts'],
    },
  ],
};
