import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { OutboxObserver } from '../observers/outbox-observer.interface';
import { DEFAULT_OUTBOX_NAME } from '../outbox.constants';
import { DEFAULT_MAX_RUN } from './queue-policy';
import type {
  OutboxClaimCheckOptions,
  OutboxErasureOptions,
  OutboxCleanerOptions,
  OutboxPartitioningOptions,
  OutboxDispatcherOptions,
  OutboxModuleExtras,
  OutboxModuleOptions,
  OutboxOrderingOptions,
  OutboxRetryOptions,
  OutboxTenantsOptions,
  OutboxUnlockerOptions,
} from './outbox.options';

/**
 * The default of one option, in one of three forms:
 * - `{ value }`: this value;
 * - `{ computed, rule }`: computed from other options by `rule`, which `computed` states in the
 *   words the docs use (`min(10000, floor(leaseMs / 2))`);
 * - `{ described }`: no single value; the docs say what happens instead (`required`, `none`, the
 *   host name…), and `make`, if given, produces it.
 */
export type OptionDefault =
  | { readonly value: number | string | boolean | null }
  | { readonly computed: string; readonly rule: (inputs: never) => number }
  | { readonly described: string; readonly make?: () => unknown };

type Defaults<T> = Readonly<Record<keyof T, OptionDefault>>;

// Half the lease at most: the other half is left for the settle (see dbTimeoutMs).
function defaultPublishTimeoutMs({ leaseMs }: { leaseMs: number }): number {
  return Math.min(10_000, Math.floor(leaseMs / 2));
}

// Half of what the lease leaves after the publish: the settle must land, watchdog margin included,
// before the lease expires, or the batch is fenced off and published again.
function defaultDbTimeoutMs(o: { leaseMs: number; publishTimeoutMs: number }): number {
  return Math.max(100, Math.min(10_000, Math.floor((o.leaseMs - o.publishTimeoutMs) / 2)));
}

// An outage pause is never shorter than an idle poll.
function defaultMaxOutagePauseMs({ pollIntervalMs }: { pollIntervalMs: number }): number {
  return Math.max(30_000, pollIntervalMs);
}

// The cap is never below the first delay, which `retry.maxDelayMs` would reject.
function defaultMaxDelayMs({ initialDelayMs }: { initialDelayMs: number }): number {
  return Math.max(300_000, initialDelayMs);
}

function defaultInstanceId(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`.slice(0, 128);
}

function deepFreeze<T extends object>(value: T): T {
  for (const inner of Object.values(value)) {
    if (typeof inner === 'object' && inner !== null) deepFreeze(inner as object);
  }
  return Object.freeze(value);
}

/**
 * The default of every option of `OutboxModule`, by group as in `OUTBOX_OPTION_KEYS` (`''` is
 * the top level; a group's own key, `dispatcher`, has its keys' defaults). The resolver takes
 * every default from here; `test/options/option-defaults.unit.spec.ts` holds the `@default`s of
 * `outbox.options.ts` and the docs' Options table to it.
 */
export const OUTBOX_DEFAULTS = deepFreeze({
  '': {
    dataSource: { described: 'required unless connection is given' },
    connection: { described: 'required unless dataSource is given' },
    publisher: { described: "required unless workers is false or delivery is 'external'" },
    delivery: { value: 'poll' },
    tableName: { value: 'outbox' },
    schema: { described: "the connection's search path" },
    maxPayloadBytes: { value: 262_144 },
    preparedStatements: { value: true },
    ambientTransaction: { described: 'none' },
    instanceId: { described: 'host name, pid and a random suffix', make: defaultInstanceId },
    autoStart: { value: true },
    ordering: { described: 'the defaults of its keys' },
    dispatcher: { described: 'the defaults of its keys' },
    retry: { described: 'the defaults of its keys' },
    unlocker: { described: 'the defaults of its keys' },
    cleaner: { described: 'the defaults of its keys' },
    partitioning: { described: 'the defaults of its keys' },
    observer: { described: 'none', make: (): OutboxObserver => ({}) },
    headersProvider: { described: 'none' },
    events: { described: 'none' },
    policies: { described: 'none' },
    tenants: { described: 'the defaults of its keys' },
    claimCheck: { described: 'the defaults of its keys' },
    erasure: { described: 'the defaults of its keys' },
  } satisfies Defaults<OutboxModuleOptions>,
  ordering: {
    enabled: { value: true },
    onDeadLetter: { value: 'block' },
    maxRun: { value: DEFAULT_MAX_RUN },
    sequence: { value: false },
  } satisfies Defaults<OutboxOrderingOptions>,
  dispatcher: {
    batchSize: { value: 500 },
    batchesInFlight: { value: 2 },
    pollIntervalMs: { value: 1_000 },
    leaseMs: { value: 30_000 },
    publishTimeoutMs: { computed: 'min(10000, floor(leaseMs / 2))', rule: defaultPublishTimeoutMs },
    dbTimeoutMs: {
      computed: 'max(100, min(10000, floor((leaseMs - publishTimeoutMs) / 2)))',
      rule: defaultDbTimeoutMs,
    },
    listen: { value: true },
    ownerLock: { value: true },
    shutdownTimeoutMs: { value: 10_000 },
    maxOutagePauseMs: { computed: 'max(30000, pollIntervalMs)', rule: defaultMaxOutagePauseMs },
    observe: { described: 'none' },
    leaseRenewal: { value: true },
    claims: {
      described: "'partitions' on PostgreSQL with schema step 9 and no tenants.fair, else 'leases'",
    },
    partitionTimeoutMs: { value: 5_000 },
    publishWindow: { described: 'none' },
  } satisfies Defaults<OutboxDispatcherOptions>,
  retry: {
    maxAttempts: { value: 10 },
    initialDelayMs: { value: 1_000 },
    maxDelayMs: { computed: 'max(300000, initialDelayMs)', rule: defaultMaxDelayMs },
    factor: { value: 2 },
    jitter: { value: 0.2 },
    maxAgeMs: { value: 0 },
    retryIf: { described: 'every failure but PermanentPublishError is retried' },
  } satisfies Defaults<OutboxRetryOptions>,
  unlocker: {
    intervalMs: { value: 30_000 },
  } satisfies Defaults<OutboxUnlockerOptions>,
  cleaner: {
    intervalMs: { value: 60_000 },
    deliveredRetentionMs: { value: 86_400_000 },
    deadRetentionMs: { value: null },
    batchSize: { value: 1_000 },
    archive: { value: false },
  } satisfies Defaults<OutboxCleanerOptions>,
  partitioning: {
    interval: { described: 'required' },
    retention: { value: '7d' },
    premake: { value: 3 },
    maintainIntervalMs: { value: 3_600_000 },
  } satisfies Defaults<OutboxPartitioningOptions>,
  tenants: {
    resolve: { described: 'none' },
    fair: { value: false },
  } satisfies Defaults<OutboxTenantsOptions>,
  claimCheck: {
    store: { described: 'required' },
    thresholdBytes: { value: 65_536 },
  } satisfies Defaults<OutboxClaimCheckOptions>,
  erasure: {
    masterKey: { described: 'none' },
    keyWrapper: { described: 'none' },
  } satisfies Defaults<OutboxErasureOptions>,
} as const);

/** The defaults of the module's extras (`forRoot()`'s options that decide which providers exist). */
export const OUTBOX_EXTRA_DEFAULTS = deepFreeze({
  name: { value: DEFAULT_OUTBOX_NAME },
  isGlobal: { value: true },
  workers: { value: true },
} as const satisfies Defaults<OutboxModuleExtras>);
