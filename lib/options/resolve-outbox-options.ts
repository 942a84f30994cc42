import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import type { AmbientTransaction } from './ambient-transaction.interface';
import type { OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { OutboxRecord } from '../message/outbox-record.interface';
import { OptionChecks, type KnownOptionKeys, type OptionFailure } from './option-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { DEFAULT_OUTBOX_NAME } from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';
import type {
  OutboxCleanerOptions,
  OutboxDispatcherOptions,
  OutboxModuleExtras,
  OutboxModuleOptions,
  OutboxOrderingOptions,
  OutboxRetryOptions,
  OutboxUnlockerOptions,
} from './outbox.options';
import { assertIdentifier, MAX_TABLE_NAME_LENGTH } from '../store/sql-identifier';
import { watchdogMarginMs } from '../dispatch/database-watchdog';

/** Options with every default applied and every value checked. */
export interface ResolvedOutboxOptions {
  /** The module instance's name (`'default'` unless it was given one). */
  readonly name: string;
  readonly dataSource: DataSource | string;
  readonly publisher: OutboxPublisher | undefined;
  readonly tableName: string;
  readonly schema: string | null;
  readonly maxPayloadBytes: number;
  readonly ambientTransaction: AmbientTransaction | undefined;
  readonly instanceId: string;
  readonly autoStart: boolean;
  readonly ordering: { readonly enabled: boolean; readonly onDeadLetter: 'block' | 'skip' };
  readonly dispatcher: {
    readonly batchSize: number;
    readonly batchesInFlight: number;
    readonly pollIntervalMs: number;
    readonly leaseMs: number;
    readonly publishTimeoutMs: number;
    readonly dbTimeoutMs: number;
    readonly listen: boolean;
    readonly shutdownTimeoutMs: number;
    readonly maxOutagePauseMs: number;
  };
  readonly retry: {
    readonly maxAttempts: number;
    readonly initialDelayMs: number;
    readonly maxDelayMs: number;
    readonly factor: number;
    readonly jitter: number;
    readonly maxAgeMs: number;
    readonly retryIf: ((error: unknown, record: OutboxRecord) => boolean) | undefined;
  };
  readonly unlocker: { readonly intervalMs: number };
  readonly cleaner: {
    readonly intervalMs: number;
    readonly deliveredRetentionMs: number;
    readonly deadRetentionMs: number | null;
    readonly batchSize: number;
  };
  readonly observer: OutboxObserver;
  readonly headersProvider: (() => Readonly<Record<string, string>> | undefined) | undefined;
}

/**
 * Every option key, by group. Any other key fails at bootstrap, naming the option it most likely
 * meant: a misspelt option would otherwise be ignored and silently keep its default. To add an
 * option, add it to its interface in `outbox.options.ts` and here (`satisfies` fails the build
 * until both agree), then resolve and check its value below.
 */
export const OUTBOX_OPTION_KEYS = {
  '': {
    dataSource: true,
    publisher: true,
    tableName: true,
    schema: true,
    maxPayloadBytes: true,
    ambientTransaction: true,
    instanceId: true,
    autoStart: true,
    ordering: true,
    dispatcher: true,
    retry: true,
    unlocker: true,
    cleaner: true,
    observer: true,
    headersProvider: true,
  } satisfies Record<keyof OutboxModuleOptions, true>,
  dispatcher: {
    batchSize: true,
    batchesInFlight: true,
    pollIntervalMs: true,
    leaseMs: true,
    publishTimeoutMs: true,
    dbTimeoutMs: true,
    listen: true,
    shutdownTimeoutMs: true,
    maxOutagePauseMs: true,
  } satisfies Record<keyof OutboxDispatcherOptions, true>,
  retry: {
    maxAttempts: true,
    initialDelayMs: true,
    maxDelayMs: true,
    factor: true,
    jitter: true,
    maxAgeMs: true,
    retryIf: true,
  } satisfies Record<keyof OutboxRetryOptions, true>,
  ordering: { enabled: true, onDeadLetter: true } satisfies Record<
    keyof OutboxOrderingOptions,
    true
  >,
  unlocker: { intervalMs: true } satisfies Record<keyof OutboxUnlockerOptions, true>,
  cleaner: {
    intervalMs: true,
    deliveredRetentionMs: true,
    deadRetentionMs: true,
    batchSize: true,
  } satisfies Record<keyof OutboxCleanerOptions, true>,
} satisfies KnownOptionKeys;

// `forRoot()` strips these before the options reach the resolver; found here, they came from a
// `forRootAsync()` factory, too late to decide which providers exist.
const MODULE_EXTRAS = { isGlobal: true, workers: true, name: true } satisfies Record<
  keyof OutboxModuleExtras,
  true
>;

const DAY = 86_400_000;

const checks = new OptionChecks('OutboxModule');
const fail: OptionFailure = checks.fail;
const { show: describe, integer, real, bool } = checks;

function section<T extends object>(value: T | undefined, option: string): Partial<T> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    fail(
      option,
      `${describe(value)} is not an object`,
      'Pass an object or leave it out for the defaults.',
    );
  }
  return value;
}

function isDataSourceLike(value: unknown): value is DataSource {
  return (
    typeof value === 'object' &&
    value !== null &&
    'options' in value &&
    'createQueryRunner' in value &&
    typeof (value as { createQueryRunner: unknown }).createQueryRunner === 'function'
  );
}

function defaultInstanceId(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`.slice(0, 128);
}

const MINUTE = 60_000;
const HOUR = 3_600_000;

/**
 * Merges the defaults into the user's options and rejects invalid values with a message that
 * names the option and says how to fix it. Pure: no I/O, no clock.
 */
export function resolveOutboxOptions(
  options: OutboxModuleOptions,
  workers = true,
  name = DEFAULT_OUTBOX_NAME,
): ResolvedOutboxOptions {
  if (options === null || typeof options !== 'object') {
    fail(
      'options',
      `${describe(options)} is not an object`,
      'Pass { dataSource, publisher, ... }.',
    );
  }
  for (const extra of Object.keys(MODULE_EXTRAS)) {
    if (Object.hasOwn(options, extra)) {
      throw new OutboxOptionsError(OutboxMessages.extraInFactoryResult(extra), extra);
    }
  }
  checks.knownKeys(options, OUTBOX_OPTION_KEYS);
  const { dataSource } = options;
  if (typeof dataSource === 'string') {
    if (dataSource.trim() === '') {
      fail(
        'dataSource',
        'the name is empty',
        'Pass the DataSource instance or the name it was registered under.',
      );
    }
  } else if (!isDataSourceLike(dataSource)) {
    fail(
      'dataSource',
      'it is missing or not a TypeORM DataSource',
      'Pass the DataSource (inject it in forRootAsync) or its registered name.',
    );
  }

  const publisher = options.publisher;
  if (
    publisher !== undefined &&
    (typeof publisher !== 'object' || publisher === null || typeof publisher.publish !== 'function')
  ) {
    fail(
      'publisher',
      'it has no publish(messages) method',
      'Pass an OutboxPublisher such as new ClientProxyPublisher(client).',
    );
  }
  if (workers && publisher === undefined) {
    fail(
      'publisher',
      'it is required when the workers are enabled',
      'Pass a publisher, or register the module with { workers: false } for an enqueue-only app.',
    );
  }

  const tableName = options.tableName ?? 'outbox';
  if (typeof tableName === 'string' && tableName.length > MAX_TABLE_NAME_LENGTH) {
    fail(
      'tableName',
      `"${tableName}" is longer than ${MAX_TABLE_NAME_LENGTH} characters`,
      'Use a shorter name: index and lock-table names are derived from it.',
    );
  }
  assertIdentifier(tableName, 'tableName');
  const schema = options.schema ?? null;
  if (schema !== null) assertIdentifier(schema, 'schema');

  const ambient = options.ambientTransaction;
  if (
    ambient !== undefined &&
    (typeof ambient !== 'object' ||
      ambient === null ||
      typeof ambient.currentManager !== 'function')
  ) {
    fail(
      'ambientTransaction',
      'it has no currentManager() method',
      'Use fromClsTransactionHost(txHost) or implement AmbientTransaction.',
    );
  }

  const instanceId = options.instanceId ?? defaultInstanceId();
  if (typeof instanceId !== 'string' || instanceId.trim() === '' || instanceId.length > 128) {
    fail(
      'instanceId',
      `${describe(instanceId)} is not a string of 1 to 128 characters`,
      'Leave it out to use host name and pid.',
    );
  }

  const ordering = section(options.ordering, 'ordering');
  const onDeadLetter = ordering.onDeadLetter ?? 'block';
  if (onDeadLetter !== 'block' && onDeadLetter !== 'skip') {
    fail(
      'ordering.onDeadLetter',
      `${describe(onDeadLetter)} is not a policy`,
      "Use 'block' (hold the key until an operator acts) or 'skip'.",
    );
  }

  const d = section(options.dispatcher, 'dispatcher');
  const leaseMs = integer(d.leaseMs, 30_000, 'dispatcher.leaseMs', 1_000, DAY, ' ms');
  const publishTimeoutMs = integer(
    d.publishTimeoutMs,
    Math.min(10_000, Math.floor(leaseMs / 2)),
    'dispatcher.publishTimeoutMs',
    100,
    DAY,
    ' ms',
  );
  if (publishTimeoutMs >= leaseMs) {
    fail(
      'dispatcher.publishTimeoutMs',
      `${publishTimeoutMs} ms is not below dispatcher.leaseMs (${leaseMs} ms)`,
      'A publish must time out before its lease expires, or two dispatchers could publish the same message: lower publishTimeoutMs or raise leaseMs.',
    );
  }
  // The settle must fit in the lease after the publish, including the watchdog's margin past
  // dbTimeoutMs: a settle that lands after the lease expired is fenced off and the batch is
  // published again.
  const dbTimeoutMs = integer(
    d.dbTimeoutMs,
    Math.max(100, Math.min(10_000, Math.floor((leaseMs - publishTimeoutMs) / 2))),
    'dispatcher.dbTimeoutMs',
    100,
    10 * MINUTE,
    ' ms',
  );
  const margin = watchdogMarginMs(dbTimeoutMs);
  if (publishTimeoutMs + dbTimeoutMs + margin > leaseMs) {
    fail(
      'dispatcher.dbTimeoutMs',
      `publishTimeoutMs (${publishTimeoutMs} ms) + dbTimeoutMs (${dbTimeoutMs} ms) + the database watchdog's margin (${margin} ms, min(1 s, dbTimeoutMs)) exceed dispatcher.leaseMs (${leaseMs} ms)`,
      'A batch must be published and settled within its lease, or another dispatcher may publish it again: raise leaseMs or lower publishTimeoutMs/dbTimeoutMs.',
    );
  }
  const pollIntervalMs = integer(
    d.pollIntervalMs,
    1_000,
    'dispatcher.pollIntervalMs',
    10,
    HOUR,
    ' ms',
  );

  const r = section(options.retry, 'retry');
  const initialDelayMs = integer(r.initialDelayMs, 1_000, 'retry.initialDelayMs', 0, DAY, ' ms');
  const maxDelayMs = integer(
    r.maxDelayMs,
    Math.max(300_000, initialDelayMs),
    'retry.maxDelayMs',
    0,
    30 * DAY,
    ' ms',
  );
  if (maxDelayMs < initialDelayMs) {
    fail(
      'retry.maxDelayMs',
      `${maxDelayMs} ms is below retry.initialDelayMs (${initialDelayMs} ms)`,
      'Raise maxDelayMs or lower initialDelayMs.',
    );
  }
  if (r.retryIf !== undefined && typeof r.retryIf !== 'function') {
    fail('retry.retryIf', 'it is not a function', 'Pass (error, record) => boolean.');
  }

  const c = section(options.cleaner, 'cleaner');
  const deadRetentionMs =
    c.deadRetentionMs === undefined || c.deadRetentionMs === null
      ? null
      : integer(c.deadRetentionMs, 0, 'cleaner.deadRetentionMs', MINUTE, 3650 * DAY, ' ms');

  const observer = options.observer ?? {};
  if (typeof observer !== 'object' || observer === null) {
    fail(
      'observer',
      `${describe(observer)} is not an object`,
      'Pass an object with optional hooks such as onBatch(report).',
    );
  }

  if (options.headersProvider !== undefined && typeof options.headersProvider !== 'function') {
    fail(
      'headersProvider',
      'it is not a function',
      'Pass () => ({ header: value }), e.g. traceContextHeaders from nestjs-outbox/opentelemetry.',
    );
  }

  return {
    name,
    dataSource,
    publisher,
    tableName,
    schema,
    maxPayloadBytes: integer(
      options.maxPayloadBytes,
      262_144,
      'maxPayloadBytes',
      1,
      64 * 1024 * 1024,
      ' bytes',
    ),
    ambientTransaction: ambient,
    instanceId,
    autoStart: bool(options.autoStart, true, 'autoStart'),
    ordering: { enabled: bool(ordering.enabled, true, 'ordering.enabled'), onDeadLetter },
    dispatcher: {
      batchSize: integer(d.batchSize, 200, 'dispatcher.batchSize', 1, 10_000),
      batchesInFlight: integer(d.batchesInFlight, 2, 'dispatcher.batchesInFlight', 1, 8),
      pollIntervalMs,
      leaseMs,
      publishTimeoutMs,
      dbTimeoutMs,
      listen: bool(d.listen, true, 'dispatcher.listen'),
      shutdownTimeoutMs: integer(
        d.shutdownTimeoutMs,
        10_000,
        'dispatcher.shutdownTimeoutMs',
        0,
        10 * MINUTE,
        ' ms',
      ),
      maxOutagePauseMs: integer(
        d.maxOutagePauseMs,
        Math.max(30_000, pollIntervalMs),
        'dispatcher.maxOutagePauseMs',
        pollIntervalMs,
        HOUR,
        ' ms',
      ),
    },
    retry: {
      maxAttempts: integer(r.maxAttempts, 10, 'retry.maxAttempts', 1, 1_000),
      initialDelayMs,
      maxDelayMs,
      factor: real(r.factor, 2, 'retry.factor', 1, 100),
      jitter: real(r.jitter, 0.2, 'retry.jitter', 0, 1),
      maxAgeMs: integer(r.maxAgeMs, 0, 'retry.maxAgeMs', 0, 3650 * DAY, ' ms'),
      retryIf: r.retryIf,
    },
    unlocker: {
      intervalMs: integer(
        section(options.unlocker, 'unlocker').intervalMs,
        30_000,
        'unlocker.intervalMs',
        100,
        DAY,
        ' ms',
      ),
    },
    cleaner: {
      intervalMs: integer(c.intervalMs, 60_000, 'cleaner.intervalMs', 100, DAY, ' ms'),
      deliveredRetentionMs: integer(
        c.deliveredRetentionMs,
        DAY,
        'cleaner.deliveredRetentionMs',
        0,
        3650 * DAY,
        ' ms',
      ),
      deadRetentionMs,
      batchSize: integer(c.batchSize, 1_000, 'cleaner.batchSize', 1, 100_000),
    },
    observer,
    headersProvider: options.headersProvider,
  };
}
