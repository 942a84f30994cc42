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
  },
};

module.exports = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60_000,
  projects: [
    { ...base, displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.spec.ts'] },
    {
      ...base,
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.spec.ts', '<rootDir>/test/store/**/*.spec.ts'],
    },
    { ...base, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.e2e-spec.ts'] },
  ],
};
