import { tableClaimCheckStore } from '../../lib/claim-check';
import { Test } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import {
  OutboxDispatcher,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';
import {
  resolveKafkaPublisherOptions,
  type KafkaPublisherOptions,
} from '../../lib/publishers/kafka';
import {
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
} from '../../lib/publishers/rabbitmq';
import { OUTBOX_OPTION_KEYS } from '../../lib/options/resolve-outbox-options';

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
        batchSize: 500,
        pollIntervalMs: 1_000,
        leaseMs: 30_000,
        publishTimeoutMs: 10_000,
        listen: true,
        ownerLock: true,
      },
      retry: {
        maxAttempts: 10,
        initialDelayMs: 1_000,
        maxDelayMs: 300_000,
        factor: 2,
        jitter: 0.2,
        maxAgeMs: 0,
      },
      cleaner: {
        deliveredRetentionMs: 86_400_000,
        deadRetentionMs: null,
        batchSize: 1_000,
        archive: false,
      },
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
    // The limit a user reads is the one enforced: 48, so that derived index names fit in 63.
    expect(error.message).toContain('48');
    expect(error.message).not.toContain('63');
  });

  it('accepts a 48-character table name and states the 63-character limit for schemas', () => {
    expect(resolveOutboxOptions({ ...valid, tableName: 'a'.repeat(48) }).tableName).toHaveLength(
      48,
    );
    expect(errorOf({ ...valid, schema: 'bad schema' }).message).toContain('1 to 63');
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
    ['retry', 'maxAttempts', -Infinity],
    ['retry', 'maxAttempts', 1_001],
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

  it('takes retry.maxAttempts Infinity as retries without a limit, and names it in the fix', () => {
    expect(
      resolveOutboxOptions({ ...valid, retry: { maxAttempts: Infinity } }).retry.maxAttempts,
    ).toBe(Infinity);
    expect(errorOf({ ...valid, retry: { maxAttempts: 2.5 } }).message).toContain(
      'Infinity retries without a limit',
    );
  });

  it('rejects a publish timeout that is not below the lease without lease renewal', () => {
    const error = errorOf({
      ...valid,
      dispatcher: { leaseMs: 5_000, publishTimeoutMs: 5_000, leaseRenewal: false },
    });
    expect(error.option).toBe('dispatcher.publishTimeoutMs');
    expect(error.message).toMatch(/lease/);
    expect(error.message).toMatch(/leaseRenewal on/);
  });

  it('takes a publish timeout longer than the lease with lease renewal (on by default)', () => {
    const { dispatcher } = resolveOutboxOptions({
      ...valid,
      dispatcher: { leaseMs: 3_000, publishTimeoutMs: 9_000, dbTimeoutMs: 500 },
    });
    expect(dispatcher.publishTimeoutMs).toBe(9_000);
    expect(dispatcher.leaseRenewal).toEqual({ intervalMs: 1_000 });
    expect(
      resolveOutboxOptions({ ...valid, dispatcher: { leaseRenewal: { intervalMs: 2_000 } } })
        .dispatcher.leaseRenewal,
    ).toEqual({ intervalMs: 2_000 });
    expect(
      resolveOutboxOptions({ ...valid, dispatcher: { leaseRenewal: false } }).dispatcher
        .leaseRenewal,
    ).toBe(false);
  });

  it('takes, with renewal on by default, every lease that holds the publish and the settle as before', () => {
    // The default interval (666 ms) and one database call do not fit in this lease; renewals
    // are not needed either: the publish and the settle fit in the lease without them.
    const { dispatcher } = resolveOutboxOptions({
      ...valid,
      dispatcher: { leaseMs: 2_000, publishTimeoutMs: 150 },
    });
    expect(dispatcher.dbTimeoutMs).toBe(925);
    expect(dispatcher.leaseRenewal).toEqual({ intervalMs: 666 });
  });

  it('asks for dbTimeoutMs when the publish outlasts the lease and its default would be 100 ms', () => {
    const error = errorOf({ ...valid, dispatcher: { leaseMs: 3_000, publishTimeoutMs: 9_000 } });
    expect(error.option).toBe('dispatcher.dbTimeoutMs');
    expect(error.message).toMatch(/Set dbTimeoutMs/);
  });

  it('rejects a renewal interval that leaves no room for the renewal and the settle', () => {
    const error = errorOf({
      ...valid,
      dispatcher: { leaseMs: 3_000, dbTimeoutMs: 1_000, leaseRenewal: { intervalMs: 1_000 } },
    });
    expect(error.option).toBe('dispatcher.leaseRenewal.intervalMs');
    expect(error.message).toMatch(/lower leaseRenewal.intervalMs/);
    expect(errorOf({ ...valid, dispatcher: { leaseRenewal: 'yes' as never } }).option).toBe(
      'dispatcher.leaseRenewal',
    );
    expect(errorOf({ ...valid, dispatcher: { leaseRenewal: { intervalMs: 50 } } }).option).toBe(
      'dispatcher.leaseRenewal.intervalMs',
    );
  });

  it('rejects a lease that cannot hold a publish plus one settle the watchdog may wait for', () => {
    // The watchdog waits dbTimeoutMs + min(1 s, dbTimeoutMs) before giving up on a call.
    const error = errorOf({
      ...valid,
      dispatcher: { leaseMs: 1_000, publishTimeoutMs: 500, dbTimeoutMs: 500, leaseRenewal: false },
    });
    expect(error.option).toBe('dispatcher.dbTimeoutMs');
    expect(error.message).toMatch(/watchdog's margin \(500 ms/);
  });

  it.each([1_000, 1_500, 4_000, 30_000])(
    'derives default timeouts that fit a lease of %p ms with the watchdog margin',
    (leaseMs) => {
      const { dispatcher } = resolveOutboxOptions({ ...valid, dispatcher: { leaseMs } });
      const margin = Math.min(1_000, dispatcher.dbTimeoutMs);
      expect(dispatcher.publishTimeoutMs + dispatcher.dbTimeoutMs + margin).toBeLessThanOrEqual(
        leaseMs,
      );
    },
  );

  it('rejects a missing data source and a missing publisher when workers run', () => {
    expect(errorOf({ publisher }).option).toBe('dataSource');
    expect(errorOf({ dataSource }).message).toMatch(/workers: false/);
    expect(() => resolveOutboxOptions({ dataSource }, false)).not.toThrow();
  });

  it('names the real default of a nullable option in its fix (dead letters kept, not 0)', () => {
    const error = errorOf({ ...valid, cleaner: { deadRetentionMs: 5 } });
    expect(error.option).toBe('cleaner.deadRetentionMs');
    expect(error.message).toContain(
      'leave it out for the default (null: dead letters are kept until purged)',
    );
    expect(error.message).not.toContain('default (0)');
  });

  it('rejects an archive that delivered rows would never reach (retention 0 deletes them at settle)', () => {
    const error = errorOf({ ...valid, cleaner: { archive: true, deliveredRetentionMs: 0 } });
    expect(error.option).toBe('cleaner.archive');
    expect(error.message).toContain('Give cleaner.deliveredRetentionMs a retention above 0');
    expect(
      resolveOutboxOptions({ ...valid, cleaner: { archive: true, deliveredRetentionMs: 1 } })
        .cleaner.archive,
    ).toBe(true);
    expect(errorOf({ ...valid, cleaner: { archive: 'yes' } }).option).toBe('cleaner.archive');
    const partitioned = errorOf({
      ...valid,
      cleaner: { archive: true },
      partitioning: { interval: 'day' },
    });
    expect(partitioned.option).toBe('cleaner.archive');
    expect(partitioned.message).toContain('cannot be combined with partitioning');
  });

  it('rejects an unknown dead-letter policy', () => {
    expect(errorOf({ ...valid, ordering: { onDeadLetter: 'drop' } }).option).toBe(
      'ordering.onDeadLetter',
    );
  });

  describe('unknown and misplaced keys', () => {
    it('names a misspelt key, its path and the option it most likely meant', () => {
      const error = errorOf({ ...valid, retry: { maxAttemps: 3 } });
      expect(error.option).toBe('retry.maxAttemps');
      expect(error.message).toContain(
        'retry.maxAttemps is not an option; did you mean retry.maxAttempts?',
      );
    });

    it.each([
      [{ tablename: 'x' }, 'tablename', 'tableName'],
      [{ dispatcher: { leasMs: 5_000 } }, 'dispatcher.leasMs', 'dispatcher.leaseMs'],
      [{ dispatcher: { batchsize: 5 } }, 'dispatcher.batchsize', 'dispatcher.batchSize'],
      [{ retry: { maxAtetmpts: 3 } }, 'retry.maxAtetmpts', 'retry.maxAttempts'],
      [{ ordering: { enable: false } }, 'ordering.enable', 'ordering.enabled'],
      [
        { cleaner: { deliveredRetention: 0 } },
        'cleaner.deliveredRetention',
        'cleaner.deliveredRetentionMs',
      ],
      [{ cleaner: { purgeAfter: 0 } }, 'cleaner.purgeAfter', null],
      [{ unlocker: { every: 100 } }, 'unlocker.every', null],
      // Given at the wrong level: the same name in the group where it belongs.
      [{ batchSize: 10 }, 'batchSize', 'dispatcher.batchSize'],
      [{ maxAttempts: 3 }, 'maxAttempts', 'retry.maxAttempts'],
      [{ retry: { leaseMs: 5_000 } }, 'retry.leaseMs', 'dispatcher.leaseMs'],
      [{ retyr: { maxAttempts: 3 } }, 'retyr', 'retry'],
    ])('rejects %j as %s, suggesting %s', (extra, path, suggestion) => {
      const error = errorOf({ ...valid, ...extra });
      expect(error.option).toBe(path);
      if (suggestion === null) {
        expect(error.message).toContain(`${path} is not an option. Known options here:`);
      } else {
        expect(error.message).toContain(`${path} is not an option; did you mean ${suggestion}?`);
      }
    });

    it('checks every group of options, and accepts every documented key', () => {
      for (const [group, keys] of Object.entries(OUTBOX_OPTION_KEYS)) {
        const where = (value: object) => (group === '' ? value : { [group]: value });
        expect(errorOf({ ...valid, ...where({ zzzUnknown: 1 }) }).option).toBe(
          group === '' ? 'zzzUnknown' : `${group}.zzzUnknown`,
        );
        // Every listed key passes the key check (undefined values take the defaults).
        const all: Record<string, unknown> = Object.fromEntries(
          Object.keys(keys).map((k) => [k, undefined]),
        );
        // The one required key of a group: partitioning names its interval.
        if (group === 'partitioning') all.interval = 'day';
        // The claim check names its store.
        if (group === 'claimCheck') all.store = tableClaimCheckStore();
        // The erasure names its master key.
        if (group === 'erasure') all.masterKey = Buffer.alloc(32, 1);
        if (group !== '')
          expect(() => resolveOutboxOptions({ ...valid, ...where(all) })).not.toThrow();
      }
    });

    it.each(['workers', 'isGlobal'])(
      'refuses %s in the options a factory returns, telling to pass it next to useFactory',
      (extra) => {
        const error = errorOf({ ...valid, [extra]: false });
        expect(error.option).toBe(extra);
        expect(error.message).toContain(`OutboxModule.forRootAsync({ ${extra}: ..., useFactory`);
      },
    );

    it('the native publishers refuse unknown keys the same way', () => {
      const kafka = () =>
        resolveKafkaPublisherOptions({
          brokers: ['127.0.0.1:9092'],
          retry: { retires: 2 },
        } as unknown as KafkaPublisherOptions);
      expect(kafka).toThrow(OutboxOptionsError);
      expect(kafka).toThrow('retry.retires is not an option; did you mean retry.retries?');
      const rabbit = () =>
        resolveRabbitMqPublisherOptions({
          url: 'amqp://127.0.0.1',
          publishTimeout: 1_000,
        } as unknown as RabbitMqPublisherOptions);
      expect(rabbit).toThrow('publishTimeout is not an option; did you mean publishTimeoutMs?');
    });
  });

  describe('forRootAsync', () => {
    const factory = () => ({ dataSource, publisher, autoStart: false });

    it('fails bootstrap when the factory returns workers: false, instead of ignoring it', async () => {
      const moduleRef = Test.createTestingModule({
        imports: [
          OutboxModule.forRootAsync({
            useFactory: () => ({ ...factory(), workers: false }) as OutboxModuleOptions,
          }),
        ],
      });
      await expect(moduleRef.compile()).rejects.toThrow(/pass it next to useFactory/i);
    });

    it('honours workers: false given next to useFactory: no dispatcher', async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [OutboxModule.forRootAsync({ workers: false, useFactory: factory })],
      }).compile();
      try {
        expect(moduleRef.get(OutboxService)).toBeInstanceOf(OutboxService);
        expect(() => moduleRef.get(OutboxDispatcher)).toThrow();
      } finally {
        await moduleRef.close();
      }
    });

    it('refuses a module option or a misspelt key beside the factory when the module is defined', () => {
      const define = (options: object) => () =>
        OutboxModule.forRootAsync({ useFactory: factory, ...options });
      expect(define({ dataSource })).toThrow(OutboxOptionsError);
      expect(define({ dataSource })).toThrow(/belongs in the object that useFactory returns/);
      expect(define({ worker: false })).toThrow('worker is not an option; did you mean workers?');
    });
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
