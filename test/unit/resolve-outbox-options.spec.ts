import { Test } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import {
  OutboxModule,
  OutboxOptionsError,
  resolveOutboxOptions,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';

const publisher: OutboxPublisher = {
  publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
};
const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const valid: OutboxModuleOptions = { dataSource, publisher };

function errorOf(options: unknown, workers = true): OutboxOptionsError {
  try {
    resolveOutboxOptions(options as OutboxModuleOptions, workers);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('resolveOutboxOptions', () => {
  it('applies documented defaults', () => {
    const resolved = resolveOutboxOptions(valid);
    expect(resolved).toMatchObject({
      tableName: 'outbox',
      schema: null,
      maxPayloadBytes: 262_144,
      autoStart: true,
      ordering: { enabled: true, onDeadLetter: 'block' },
      dispatcher: {
        batchSize: 200,
        pollIntervalMs: 1_000,
        leaseMs: 30_000,
        publishTimeoutMs: 10_000,
        listen: true,
      },
      retry: {
        maxAttempts: 10,
        initialDelayMs: 1_000,
        maxDelayMs: 300_000,
        factor: 2,
        jitter: 0.2,
        maxAgeMs: 0,
      },
      cleaner: { deliveredRetentionMs: 86_400_000, deadRetentionMs: null, batchSize: 1_000 },
    });
    expect(resolved.instanceId).toMatch(/:\d+:[0-9a-f]{6}$/);
  });

  it.each([
    ['outbox"; drop table x;--', 'tableName'],
    ['', 'tableName'],
    ['1outbox', 'tableName'],
    ['a'.repeat(49), 'tableName'],
    ['public.outbox', 'tableName'],
  ])('rejects the table name %j', (tableName, option) => {
    const error = errorOf({ ...valid, tableName });
    expect(error.option).toBe(option);
    expect(error.message).toMatch(/letters, digits or underscores|shorter name/);
  });

  it('rejects an unsafe schema name', () => {
    expect(errorOf({ ...valid, schema: 'x; drop' }).option).toBe('schema');
  });

  it.each([
    ['dispatcher', 'batchSize', NaN],
    ['dispatcher', 'batchSize', -1],
    ['dispatcher', 'batchSize', 0],
    ['dispatcher', 'batchSize', 1e9],
    ['dispatcher', 'batchSize', 1.5],
    ['dispatcher', 'pollIntervalMs', Infinity],
    ['dispatcher', 'leaseMs', '30000'],
    ['retry', 'maxAttempts', 0],
    ['retry', 'factor', 0.5],
    ['retry', 'jitter', 2],
    ['cleaner', 'deliveredRetentionMs', -5],
  ])(
    'rejects %s.%s = %p with a message that names the option and the range',
    (section, key, value) => {
      const error = errorOf({ ...valid, [section]: { [key]: value } });
      expect(error.option).toBe(`${section}.${key}`);
      expect(error.message).toContain(`"${section}.${key}"`);
      expect(error.message).toMatch(/from .* to /);
    },
  );

  it('rejects a publish timeout that is not below the lease', () => {
    const error = errorOf({ ...valid, dispatcher: { leaseMs: 5_000, publishTimeoutMs: 5_000 } });
    expect(error.option).toBe('dispatcher.publishTimeoutMs');
    expect(error.message).toMatch(/lease/);
  });

  it('rejects a missing data source and a missing publisher when workers run', () => {
    expect(errorOf({ publisher }).option).toBe('dataSource');
    expect(errorOf({ dataSource }).message).toMatch(/workers: false/);
    expect(() => resolveOutboxOptions({ dataSource }, false)).not.toThrow();
  });

  it('rejects an unknown dead-letter policy', () => {
    expect(errorOf({ ...valid, ordering: { onDeadLetter: 'drop' } }).option).toBe(
      'ordering.onDeadLetter',
    );
  });

  it('fails the Nest bootstrap with the typed error', async () => {
    const moduleRef = Test.createTestingModule({
      imports: [OutboxModule.forRoot({ dataSource, publisher, tableName: 'bad name' })],
    });
    await expect(moduleRef.compile()).rejects.toBeInstanceOf(OutboxOptionsError);
  });

  it('fails forRootAsync bootstrap with the typed error too', async () => {
    const moduleRef = Test.createTestingModule({
      imports: [
        OutboxModule.forRootAsync({
          useFactory: () => ({ dataSource, publisher, dispatcher: { batchSize: -3 } }),
        }),
      ],
    });
    await expect(moduleRef.compile()).rejects.toThrow(/dispatcher\.batchSize/);
  });
});
