import type { DataSource } from 'typeorm';
import type { AmbientTransaction } from './ambient-transaction.interface';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { KnownOptionKeys } from './option-checks';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';
import type {
  OutboxClaimCheckOptions,
  OutboxErasureOptions,
  OutboxCleanerOptions,
  OutboxDispatcherOptions,
  OutboxModuleExtras,
  OutboxModuleOptions,
  OutboxOrderingOptions,
  OutboxPartitioningOptions,
  OutboxRetryOptions,
  OutboxTenantsOptions,
  OutboxUnlockerOptions,
} from './outbox.options';
import { resolveTenantsOptions, type ResolvedTenantsOptions } from './resolve-tenants-options';
import {
  resolveClaimCheckOptions,
  type ResolvedClaimCheckOptions,
} from './resolve-claim-check-options';
import { resolveDelivery, type ResolvedDelivery } from './resolve-delivery';
import { OUTBOX_DEFAULTS, OUTBOX_EXTRA_DEFAULTS } from './outbox-defaults';
import { resolveErasureOptions, type ResolvedErasureOptions } from './resolve-erasure-options';
import { checks, fail } from './outbox-option-checks';
import {
  resolveDispatcherOptions,
  type ResolvedDispatcherOptions,
} from './resolve-dispatcher-options';
import {
  resolveCleanerOptions,
  resolveOrderingOptions,
  resolveRetryOptions,
  resolveUnlockerOptions,
  withDeadLetterExceptions,
  type ResolvedCleanerOptions,
  type ResolvedOrderingOptions,
  type ResolvedRetryOptions,
  type ResolvedUnlockerOptions,
} from './resolve-group-options';
import {
  deadLetterExceptions,
  resolveEventPolicies,
  type ResolvedEventPolicies,
} from './resolve-event-policies';
import {
  resolvePartitioningOptions,
  type ResolvedPartitioningOptions,
} from './resolve-partitioning-options';
import {
  resolveAmbientTransaction,
  resolveDatabase,
  resolveHeadersProvider,
  resolveInstanceId,
  resolveObserver,
  resolvePublisher,
  resolveTable,
} from './resolve-top-level-options';

/** Options with every default applied and every value checked. */
export interface ResolvedOutboxOptions {
  /** The module instance's name (`'default'` unless it was given one). */
  readonly name: string;
  /** Exactly one of `dataSource` and `connection` is set. */
  readonly dataSource: DataSource | string | undefined;
  readonly connection: OutboxConnection<unknown> | undefined;
  readonly publisher: OutboxPublisher | undefined;
  /**
   * The delivery mode: `'poll'`, the log observer of `logTailing()`, or `'external'` (messages
   * are only written; an engine outside the app delivers them). Read by `planDelivery` alone.
   */
  readonly delivery: ResolvedDelivery;
  /** What to write instead of the 0.2 delivery options used, said at bootstrap; null if none. */
  readonly deprecation: string | null;
  readonly tableName: string;
  readonly schema: string | null;
  readonly maxPayloadBytes: number;
  readonly preparedStatements: boolean;
  readonly ambientTransaction: AmbientTransaction<unknown> | undefined;
  readonly instanceId: string;
  readonly autoStart: boolean;
  readonly ordering: ResolvedOrderingOptions;
  readonly dispatcher: ResolvedDispatcherOptions;
  readonly retry: ResolvedRetryOptions;
  readonly unlocker: ResolvedUnlockerOptions;
  readonly cleaner: ResolvedCleanerOptions;
  /** null: a plain (unpartitioned) table. */
  readonly partitioning: ResolvedPartitioningOptions | null;
  readonly observer: OutboxObserver;
  readonly headersProvider: (() => Readonly<Record<string, string>> | undefined) | undefined;
  /** The per-event-type policies (`events`, `policies`) over the module's defaults. */
  readonly policies: ResolvedEventPolicies;
  /** null: tenant ids are off. */
  readonly tenants: ResolvedTenantsOptions | null;
  /** null: every payload travels in its message. */
  readonly claimCheck: ResolvedClaimCheckOptions | null;
  /** null: personal data is refused at enqueue. */
  readonly erasure: ResolvedErasureOptions | null;
}

/**
 * Every option key, by group. Any other key fails at bootstrap, naming the option it most likely
 * meant: a misspelt option would otherwise be ignored and silently keep its default. To add an
 * option, add it to its interface in `outbox.options.ts` and here (`satisfies` fails the build
 * until both agree), then give its default in `outbox-defaults.ts` and resolve and check its value in
 * its group's resolver.
 */
export const OUTBOX_OPTION_KEYS = {
  '': {
    dataSource: true,
    connection: true,
    publisher: true,
    delivery: true,
    tableName: true,
    schema: true,
    maxPayloadBytes: true,
    preparedStatements: true,
    ambientTransaction: true,
    instanceId: true,
    autoStart: true,
    ordering: true,
    dispatcher: true,
    retry: true,
    unlocker: true,
    cleaner: true,
    partitioning: true,
    observer: true,
    headersProvider: true,
    events: true,
    policies: true,
    tenants: true,
    claimCheck: true,
    erasure: true,
  } satisfies Record<keyof OutboxModuleOptions, true>,
  dispatcher: {
    batchSize: true,
    batchesInFlight: true,
    pollIntervalMs: true,
    leaseMs: true,
    publishTimeoutMs: true,
    dbTimeoutMs: true,
    listen: true,
    ownerLock: true,
    shutdownTimeoutMs: true,
    maxOutagePauseMs: true,
    observe: true,
    leaseRenewal: true,
    claims: true,
    partitionTimeoutMs: true,
    publishWindow: true,
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
  ordering: { enabled: true, onDeadLetter: true, maxRun: true, sequence: true } satisfies Record<
    keyof OutboxOrderingOptions,
    true
  >,
  unlocker: { intervalMs: true } satisfies Record<keyof OutboxUnlockerOptions, true>,
  cleaner: {
    intervalMs: true,
    deliveredRetentionMs: true,
    deadRetentionMs: true,
    batchSize: true,
    archive: true,
  } satisfies Record<keyof OutboxCleanerOptions, true>,
  partitioning: {
    interval: true,
    retention: true,
    premake: true,
    maintainIntervalMs: true,
  } satisfies Record<keyof OutboxPartitioningOptions, true>,
  tenants: { resolve: true, fair: true } satisfies Record<keyof OutboxTenantsOptions, true>,
  claimCheck: { store: true, thresholdBytes: true } satisfies Record<
    keyof OutboxClaimCheckOptions,
    true
  >,
  erasure: { masterKey: true, keyWrapper: true } satisfies Record<keyof OutboxErasureOptions, true>,
} satisfies KnownOptionKeys;

// `forRoot()` strips these before the options reach the resolver; found here, they came from a
// `forRootAsync()` factory, too late to decide which providers exist.
const MODULE_EXTRAS = { isGlobal: true, workers: true, name: true } satisfies Record<
  keyof OutboxModuleExtras,
  true
>;

// Rejects what is not an options object, extras returned by a factory, and unknown keys.
function checkShape(options: OutboxModuleOptions): void {
  if (options === null || typeof options !== 'object') {
    fail(
      'options',
      `${checks.show(options)} is not an object`,
      'Pass { dataSource, publisher, ... } or { connection, publisher, ... }.',
    );
  }
  for (const extra of Object.keys(MODULE_EXTRAS)) {
    if (Object.hasOwn(options, extra)) {
      throw new OutboxOptionsError(OutboxMessages.extraInFactoryResult(extra), extra);
    }
  }
  checks.knownKeys(options, OUTBOX_OPTION_KEYS);
}

// What has no meaning when an engine outside the app delivers: refused rather than ignored.
function checkExternalDelivery(
  options: OutboxModuleOptions,
  partitioning: ResolvedPartitioningOptions | null,
  cleaner: ResolvedCleanerOptions,
): void {
  if (options.publisher !== undefined) {
    fail(
      'publisher',
      "it is given with delivery 'external', where no dispatcher runs to use it",
      "Leave the publisher out (Debezium or the engine reading the log publishes), or write delivery: 'poll' to deliver with the module.",
    );
  }
  if (partitioning !== null) {
    fail(
      'partitioning',
      "it cannot be combined with delivery 'external': a partition is dropped only once its rows are delivered, which an external engine never records",
      "Leave partitioning out; with delivery 'external' the cleaner deletes rows by age (cleaner.deliveredRetentionMs).",
    );
  }
  if (cleaner.archive) {
    fail(
      'cleaner.archive',
      "true cannot be combined with delivery 'external': the rows were never delivered by the module, and the log already holds them",
      'Leave cleaner.archive off; keep rows longer with cleaner.deliveredRetentionMs.',
    );
  }
  if (options.ordering?.sequence === true) {
    fail(
      'ordering.sequence',
      "true cannot be combined with delivery 'external': the number is written just after the row's insert, and an engine reading inserts from the log would not see it",
      "Leave ordering.sequence off with delivery 'external', or write delivery: 'poll' to deliver with the module.",
    );
  }
}

/**
 * Merges the defaults (`OUTBOX_DEFAULTS`) into the user's options and rejects invalid values with
 * a message that names the option and says how to fix it. Pure: no I/O, no clock.
 */
export function resolveOutboxOptions(
  options: OutboxModuleOptions,
  workers: boolean = OUTBOX_EXTRA_DEFAULTS.workers.value,
  name: string = OUTBOX_EXTRA_DEFAULTS.name.value,
): ResolvedOutboxOptions {
  checkShape(options);
  const defaults = OUTBOX_DEFAULTS[''];
  const { dataSource, connection } = resolveDatabase(options);
  const { delivery, deprecation } = resolveDelivery(options.delivery, options.dispatcher, name);
  const external = delivery === 'external';
  const publisher = resolvePublisher(options.publisher, workers && !external);
  const { tableName, schema } = resolveTable(options);
  const ambientTransaction = resolveAmbientTransaction(options.ambientTransaction);
  const instanceId = resolveInstanceId(options.instanceId);
  const dispatcher = resolveDispatcherOptions(options.dispatcher);
  const baseOrdering = resolveOrderingOptions(options.ordering, dispatcher.batchSize);
  const retry = resolveRetryOptions(options.retry);
  const cleaner = resolveCleanerOptions(options.cleaner);
  const partitioning = resolvePartitioningOptions(options.partitioning, dispatcher.leaseMs);
  if (partitioning !== null && cleaner.archive) {
    // The maintainer drops a partition whole: its delivered rows would never pass the cleaner,
    // so an archive would silently miss them.
    fail(
      'cleaner.archive',
      'true cannot be combined with partitioning: delivered rows leave with their dropped partition and never reach the archive',
      'Leave cleaner.archive off on a partitioned table (keep old partitions longer with partitioning.retention), or use a plain table to archive.',
    );
  }
  if (external) checkExternalDelivery(options, partitioning, cleaner);
  const policies = resolveEventPolicies(options, {
    retry,
    onDeadLetter: baseOrdering.onDeadLetter,
    cleaner,
    noRetention:
      partitioning !== null
        ? 'a partitioned table drops delivered rows with their partition (partitioning.retention), not by type'
        : external
          ? "with delivery 'external' the cleaner deletes rows by age whatever their type"
          : undefined,
  });
  const ordering = withDeadLetterExceptions(
    baseOrdering,
    deadLetterExceptions(policies),
    dispatcher.batchSize,
  );
  const tenants = resolveTenantsOptions(options.tenants);
  if (dispatcher.claims === 'partitions' && (tenants?.fair ?? null) !== null) {
    fail(
      'dispatcher.claims',
      "'partitions' does not share reads fairly between tenants yet (tenants.fair)",
      "Keep dispatcher.claims at 'leases' with tenants.fair, or turn tenants.fair off.",
    );
  }
  const claimCheck = resolveClaimCheckOptions(options.claimCheck, cleaner, policies, external);
  const erasure = resolveErasureOptions(options.erasure);
  const observer = resolveObserver(options.observer);
  const headersProvider = resolveHeadersProvider(options.headersProvider);
  return {
    name,
    dataSource,
    connection,
    publisher,
    delivery,
    deprecation,
    tableName,
    schema,
    maxPayloadBytes: checks.integer(
      options.maxPayloadBytes,
      defaults.maxPayloadBytes.value,
      'maxPayloadBytes',
      1,
      64 * 1024 * 1024,
      ' bytes',
    ),
    preparedStatements: checks.bool(
      options.preparedStatements,
      defaults.preparedStatements.value,
      'preparedStatements',
    ),
    ambientTransaction,
    instanceId,
    autoStart: checks.bool(options.autoStart, defaults.autoStart.value, 'autoStart'),
    ordering,
    dispatcher,
    retry,
    unlocker: resolveUnlockerOptions(options.unlocker),
    cleaner,
    partitioning,
    observer,
    headersProvider,
    policies,
    tenants,
    claimCheck,
    erasure,
  };
}
