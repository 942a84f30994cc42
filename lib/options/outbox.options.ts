import type { DataSource } from 'typeorm';
import type { OutboxKeyWrapper } from '../message/erasure/key-wrapper';
import type { AmbientTransaction } from './ambient-transaction.interface';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { ClaimCheckStore } from '../publishers/claim-check/claim-check-store.interface';
import type { OutboxRecord } from '../message/outbox-record.interface';
import type { OutboxLogObserver } from '../store/ports/outbox-log-source.port';
import type { OutboxEventPolicy } from '../message/outbox-event-policy';

export interface OutboxDispatcherOptions {
  /** Most messages claimed and published in one batch. @default 500 */
  batchSize?: number;
  /**
   * Batches publishing at once: the next claim overlaps the current publish. Per-key order is
   * unaffected (a key has at most one message in flight). @default 2
   */
  batchesInFlight?: number;
  /** Time between polls when the table has no due work. @default 1000 */
  pollIntervalMs?: number;
  /** How long a claim is owned before another dispatcher may take it over. @default 30000 */
  leaseMs?: number;
  /**
   * How long one publish may wait for the broker; must be below `leaseMs` unless
   * `leaseRenewal` is on.
   * @default min(10000, floor(leaseMs / 2))
   */
  publishTimeoutMs?: number;
  /**
   * Longest time one dispatcher database call (claim, settle, park) may take: enforced by the
   * server where it can (PostgreSQL `statement_timeout`) and by a watchdog that logs, gives up
   * on the call `min(1000, dbTimeoutMs)` later and pauses. `publishTimeoutMs + dbTimeoutMs` plus
   * that margin must not exceed `leaseMs` (without `leaseRenewal`).
   * @default max(100, min(10000, floor((leaseMs - publishTimeoutMs) / 2)))
   */
  dbTimeoutMs?: number;
  /** Wake up on PostgreSQL NOTIFY from other instances (ignored on other databases). @default true */
  listen?: boolean;
  /**
   * PostgreSQL and MySQL/MariaDB: hold an owner lock on one connection of the pool, so that
   * another instance gives a crashed one's leases back within about two seconds instead of
   * after `leaseMs` (docs/delivery.md, "Takeover after a crash"). `false` leaves that
   * connection to the pool (a pool of one or two). @default true
   */
  ownerLock?: boolean;
  /**
   * On shutdown, how long in-flight publishes may finish before they are aborted (what the
   * publisher answers the abort is then recorded; docs/delivery.md). @default 10000
   */
  shutdownTimeoutMs?: number;
  /**
   * Longest pause after a broker outage; pauses double from `pollIntervalMs` up to this.
   * @default max(30000, pollIntervalMs)
   */
  maxOutagePauseMs?: number;
  /**
   * @deprecated Say it with the top-level `delivery` instead: `delivery: logTailing()` for
   * `dispatcher: { observe: logTailing() }`, and nothing (`'poll'` is the default) for
   * `observe: 'poll'`. Still read in 0.3, with a warning at bootstrap; removed in 0.4.
   * @default none
   */
  observe?: 'poll' | OutboxLogObserver;
  /**
   * Renew the lease of a batch still publishing every `intervalMs` (one fenced statement per
   * batch, on the database clock), so a publish may outlast `leaseMs`; a batch settled before
   * the first renewal writes nothing more. With it, `publishTimeoutMs` may exceed `leaseMs`
   * (docs/delivery.md, "Lease renewal"). `true`: every `floor(leaseMs / 3)` ms. @default true
   */
  leaseRenewal?:
    | boolean
    | {
        /**
         * How often a batch still publishing renews its lease; `intervalMs + dbTimeoutMs` plus
         * the watchdog's margin must stay below `leaseMs` where renewals are relied on (a
         * publish that may outlast the lease) or this is set. Default: `floor(leaseMs / 3)`.
         */
        intervalMs?: number;
      };
  /**
   * How dispatchers share the table. `'leases'`: each claim leases the rows it takes (a write per
   * row) and works out per-key order in SQL. `'partitions'` (PostgreSQL, polling or log tailing): the key space
   * is cut into 256 partitions that live dispatchers divide among themselves; an owner reads its
   * partitions' due rows without locking or writing them, keeps per-key order in memory, and
   * writes each message once, at its settle (docs/delivery.md, "Partitions"; needs schema step 9,
   * and every dispatcher of the table in the same mode).
   * @default 'partitions' on PostgreSQL with schema step 9 and no tenants.fair, else 'leases'
   */
  claims?: 'leases' | 'partitions';
  /**
   * With `claims: 'partitions'`: how long each heartbeat holds. A dispatcher whose last heartbeat
   * is older than its own setting is gone, and its partitions are taken over; it beats every
   * fifth of it, and one whose heartbeat could not land in time (a stalled event loop or
   * database) stops publishing until it lands. Takeover after a crash takes about this long plus
   * one beat. @default 5000
   */
  partitionTimeoutMs?: number;
  /**
   * With `claims: 'partitions'`: publish as a stream. Up to this many messages are unconfirmed at
   * once across batches, handed to the publisher in slices of `publishWindow / 4` (at most
   * `batchSize`) as confirms free room, and the settles of the slices answered meanwhile are
   * written together, in one statement fenced by every partition they touch. A key still has at
   * most one message in flight. Unset: batches of `batchSize`, `batchesInFlight` at once, each
   * settled on its own (docs/delivery.md, "Publishing as a stream"). 1 to 10 000.
   * @default none
   */
  publishWindow?: number;
}

export interface OutboxRetryOptions {
  /**
   * Failed attempts after which a message is dead-lettered: 1 to 1000, or `Infinity` to retry
   * until it is delivered (a message that always fails then holds its key for good). @default 10
   */
  maxAttempts?: number;
  /** Delay before the first retry. @default 1000 */
  initialDelayMs?: number;
  /** Upper bound of one retry delay; at least `initialDelayMs`. @default max(300000, initialDelayMs) */
  maxDelayMs?: number;
  /** Growth of the delay per attempt. @default 2 */
  factor?: number;
  /** Fraction of each delay that is randomised (0 = none, 1 = full jitter). @default 0.2 */
  jitter?: number;
  /** Dead-letter a failing message older than this (ms since enqueue); 0 = no limit. @default 0 */
  maxAgeMs?: number;
  /** Return false to dead-letter a failure at once. @default every failure but PermanentPublishError is retried */
  retryIf?: (error: unknown, record: OutboxRecord) => boolean;
}

export interface OutboxOrderingOptions {
  /** Publish the messages of one key in commit order, one at a time. @default true */
  enabled?: boolean;
  /** What a dead-lettered message does to the later messages of its key. @default 'block' */
  onDeadLetter?: 'block' | 'skip';
  /**
   * The most consecutive messages of one key a batch may carry (a run), from 1 to 1000. A run is
   * published in order, each message after the broker acknowledged the one before, and stops at
   * the key's first failure (the rest go back unpublished): hot keys drain many messages per
   * batch instead of one. 1 sends one message per key per batch. @default 50
   */
  maxRun?: number;
  /**
   * Number each keyed message 1, 2, 3… per key at enqueue, in commit order, sent as the
   * `x-outbox-sequence` header so consumers can detect gaps (needs schema step 6). @default false
   */
  sequence?: boolean;
}

export interface OutboxCleanerOptions {
  /** How often the cleaner runs. @default 60000 */
  intervalMs?: number;
  /**
   * Keep delivered rows this long; 0 deletes them when they are settled. With `delivery:
   * 'external'`, every row is deleted this long after it was written. @default 86400000 (1 day)
   */
  deliveredRetentionMs?: number;
  /** Delete dead rows after this long; null keeps them until an operator acts. @default null */
  deadRetentionMs?: number | null;
  /** Most rows deleted per statement. @default 1000 */
  batchSize?: number;
  /**
   * Move rows past their retention into `<table>_archive` instead of deleting them, for audits
   * and replays (create it with `ensureOutboxArchiveTable` or `outbox schema migrate --archive`).
   * Needs `deliveredRetentionMs` above 0: rows deleted at settle never reach the cleaner.
   * @default false
   */
  archive?: boolean;
}

/**
 * A time-partitioned outbox table (PostgreSQL and MySQL/MariaDB; SQLite keeps its plain table):
 * rows are partitioned by `created_at`, and retention drops whole partitions instead of deleting
 * rows. See docs/partitioning.md.
 */
export interface OutboxPartitioningOptions {
  /** The span of time one partition holds (UTC; weeks start on Monday). */
  interval: 'day' | 'week' | 'month';
  /**
   * How long delivered rows are kept: a partition is dropped once its whole range is older than
   * this and every row in it is final (delivered this long ago, or dead past
   * `cleaner.deadRetentionMs`). Milliseconds, or a count of `m`, `h`, `d` or `w` (`'30d'`).
   * At least `dispatcher.leaseMs`. @default '7d'
   */
  retention?: number | string;
  /** Partitions kept created ahead of the current one, from 1 to 1000. @default 3 */
  premake?: number;
  /** How often the partition maintainer runs. @default 3600000 (1 hour) */
  maintainIntervalMs?: number;
}

export interface OutboxUnlockerOptions {
  /** How often expired leases are cleared. @default 30000 */
  intervalMs?: number;
}

/**
 * How the app's messages are delivered, in one option:
 * - `'poll'` (the default): the module's dispatcher claims due messages from the table;
 * - `logTailing()` of `nestjs-outbox/log-tailing`: the dispatcher learns of new messages from the
 *   database's log (PostgreSQL logical replication, MySQL/MariaDB binlog), the table still the
 *   record (docs/log-tailing.md);
 * - `'external'`: an engine outside the app reads the table from the database's log and
 *   delivers (Debezium's outbox event router on Kafka Connect, docs/debezium.md).
 *
 * `'dispatcher'` is the 0.2 spelling of `'poll'`: still read in 0.3, with a warning at
 * bootstrap; removed in 0.4.
 */
export type OutboxDelivery = 'poll' | OutboxLogObserver | 'external' | 'dispatcher';

/** Options of `OutboxModule.forRoot()` / the object `forRootAsync()`'s factory returns. */
export interface OutboxModuleOptions {
  /**
   * The TypeORM DataSource holding the outbox table, or the name it was registered under.
   * Give this or `connection`, not both.
   */
  dataSource?: DataSource | string;
  /**
   * The outbox on another library than TypeORM: `pgOutbox(pool)` of `nestjs-outbox/pg`,
   * `mysql2Outbox(pool)`, `betterSqlite3Outbox(db)` or `kyselyOutbox(db)` of their subpaths.
   * Give this or `dataSource`, not both.
   */
  connection?: OutboxConnection<unknown>;
  /**
   * Where the dispatcher sends messages. Required unless `workers` is false or `delivery` is
   * `'external'`.
   */
  publisher?: OutboxPublisher;
  /**
   * Who delivers, and how: `'poll'` (the dispatcher claims messages from the table),
   * `logTailing()` (it reads them from the database's log), or `'external'` (an engine reading
   * the log, such as Debezium, delivers; the module only writes messages, runs no dispatcher or
   * unlocker, and its cleaner deletes every row older than `cleaner.deliveredRetentionMs`,
   * whatever its status). See {@link OutboxDelivery}. @default 'poll'
   */
  delivery?: OutboxDelivery;
  /** Outbox table name: letters, digits and underscores. @default 'outbox' */
  tableName?: string;
  /** Schema of the table (PostgreSQL only). @default the connection's search path */
  schema?: string;
  /** Largest serialised payload accepted by `enqueue()`, in bytes. @default 262144 */
  maxPayloadBytes?: number;
  /**
   * Run the enqueue statements as named prepared statements on PostgreSQL, parsed and planned
   * once per connection instead of on every call; the dispatcher's claim and settle too. Set
   * false when the app's connections go through a pooler that cannot keep them, such as
   * PgBouncer in transaction mode before 1.21 or with `max_prepared_statements = 0` (the
   * enqueue would fail with "prepared statement … does not exist"). On MySQL and MariaDB
   * (mysql2), the one-message enqueue runs as a server-side prepared statement: set false
   * behind a proxy that multiplexes connections (ProxySQL).
   * SQLite ignores it. @default true
   */
  preparedStatements?: boolean;
  /** Supplies the caller's transaction when `enqueue()` gets no manager. @default none */
  ambientTransaction?: AmbientTransaction<unknown>;
  /** Name written to `locked_by` on claims. @default host name, pid and a random suffix */
  instanceId?: string;
  /** Start the workers' schedules at bootstrap; false leaves them to `runOnce()` / `start()`. @default true */
  autoStart?: boolean;
  ordering?: OutboxOrderingOptions;
  dispatcher?: OutboxDispatcherOptions;
  retry?: OutboxRetryOptions;
  unlocker?: OutboxUnlockerOptions;
  cleaner?: OutboxCleanerOptions;
  /**
   * Time-partition the outbox table and drop old partitions instead of deleting rows; the
   * table must have been made partitioned (`outbox schema migrate --partition-by <interval>`).
   * Left out, the table is plain (the default).
   */
  partitioning?: OutboxPartitioningOptions;
  /** Metrics and tracing hooks. @default none */
  observer?: OutboxObserver;
  /**
   * Called once per `enqueue()` call, synchronously in the caller's context; the headers it
   * returns are added to every message of the call, under the message's own headers (which win
   * on a clash). For context propagation, e.g. `traceContextHeaders` of
   * `nestjs-outbox/opentelemetry`. @default none
   */
  headersProvider?: () => Readonly<Record<string, string>> | undefined;
  /**
   * Event classes whose `@OutboxEvent({ policy })` this instance's dispatcher applies to their
   * type (the dispatcher never sees classes otherwise). @default none
   */
  events?: readonly OutboxEventClass[];
  /**
   * Policies by event type, for plain messages and types enqueued elsewhere; a type may not
   * also get one from a class in `events`. @default none
   */
  policies?: Readonly<Record<string, OutboxEventPolicy>>;
  /**
   * Turns on tenant ids: each message may carry one (`tenant`), stored in the table's
   * `tenant_id` column and sent as the `x-outbox-tenant` header (docs/tenants.md). Left out,
   * messages carry none and a message given one is refused.
   */
  tenants?: OutboxTenantsOptions;
  /**
   * The claim check: a message whose payload is over `thresholdBytes` has the payload written
   * to `store` by the publisher, which sends a reference instead (docs/claim-check.md). Left
   * out, every payload travels in its message.
   */
  claimCheck?: OutboxClaimCheckOptions;
  /**
   * Per-subject erasure by crypto-shredding: the personal data a message marks (`personal`) is
   * sealed at enqueue under its subject's data key, and `OutboxAdmin.erase(subject)` destroys
   * that key (docs/erasure.md). Left out, a message with personal data is refused.
   */
  erasure?: OutboxErasureOptions;
}

/** Per-subject erasure (docs/erasure.md): how the data keys in the key table are wrapped. */
export interface OutboxErasureOptions {
  /**
   * The master key (32 bytes: a Buffer, or its base64 text) the data keys are wrapped with,
   * AES-256-GCM. Exclusive with `keyWrapper`. @default none
   */
  masterKey?: Buffer | string;
  /**
   * Wraps the data keys with an external KMS instead (`wrap`/`unwrap`). Exclusive with
   * `masterKey`. @default none
   */
  keyWrapper?: OutboxKeyWrapper;
}

/** The claim check (docs/claim-check.md). */
export interface OutboxClaimCheckOptions {
  /**
   * Where payloads go: `s3ClaimCheckStore()` of `nestjs-outbox/s3`, or `tableClaimCheckStore()`
   * of `nestjs-outbox/claim-check` (the outbox's own database). Required.
   */
  store: ClaimCheckStore;
  /**
   * Payloads larger than this (bytes of the JSON text, or of a binary payload) are sent by
   * reference; a type's policy may give its own (`claimCheckThresholdBytes`). @default 65536
   */
  thresholdBytes?: number;
}

/** Tenant ids on messages, and tenant-fair claiming (docs/tenants.md). */
export interface OutboxTenantsOptions {
  /**
   * Called once per `enqueue()` call, synchronously in the caller's context (like
   * `headersProvider`), for the tenant of messages that name none, e.g.
   * `() => cls.get('tenantId')`. @default none
   */
  resolve?: () => string | undefined;
  /**
   * Shares each claimed batch between the tenants with due messages, so that one tenant's
   * backlog does not hold up another's messages: `true` in equal shares, or `{ weights }` with a
   * share per tenant (1 for those not named). @default false
   */
  fair?: boolean | { weights?: Readonly<Record<string, number>> };
}

/** A class decorated with `@OutboxEvent()`. */
export type OutboxEventClass = abstract new (...args: never[]) => object;

/** Options that decide which providers exist, so they are given outside the async factory. */
export interface OutboxModuleExtras {
  /**
   * Name of this instance, in an app with several outboxes (each with its own table, publisher
   * and dispatcher). Inject a named instance with `@InjectOutbox(name)`. @default 'default'
   */
  name?: string;
  /** Register the module globally. @default true */
  isGlobal?: boolean;
  /** Provide the dispatcher, unlocker and cleaner; false for enqueue-only apps. @default true */
  workers?: boolean;
}
