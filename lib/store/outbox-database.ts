import type { PartitionInterval } from '../options/resolve-partitioning-options';
import type { OutboxPartitionsPort, OutboxTableLayout } from './ports/outbox-partitions.port';
import type { PartitionRange } from './partitions/partition-range';
import type { InboxTableNames } from '../internal/sql-identifier';
import type { AdminDialect } from './shared-sql/admin-dialect';
import type { AuditSql } from './shared-sql/audit-sql';
import type { ClaimCheckSql } from './shared-sql/claim-check-sql';
import type { SubjectKeySql } from './shared-sql/subject-keys-sql';
import type { OutboxQueuePolicy, OutboxStore } from './ports/outbox-store.port';
import type { IdentifierQuoting, OutboxTableNames } from '../internal/sql-identifier';
import type { SqlPort, SqlRunner } from './ports/sql-port';
import type { MessageIdCodec, MessageIdLayout } from './rows/message-id-codec';

/** Runs one statement on whatever connection the caller holds (the port, a migration's runner). */
export type StatementRunner = (sql: string, params?: unknown[]) => Promise<unknown>;

/** What `createOutboxStore` knows when it builds a database's store. */
export interface OutboxStoreContext {
  readonly names: OutboxTableNames;
  readonly policy: OutboxQueuePolicy;
  /** The dispatcher's database timeout (`dispatcher.dbTimeoutMs`). */
  readonly timeoutMs: number;
  /** The table as the options named it, for messages and lock namespaces. */
  readonly table: { readonly tableName: string; readonly schema: string | null };
  readonly dispatch: {
    readonly enabled: boolean;
    /** Whether the enqueue wakes the LISTENing dispatchers (PostgreSQL NOTIFY). */
    readonly notify: boolean;
    /**
     * Whether the connection reports its commits (`OutboxConnection.afterCommit`): the wake-up
     * is then sent after the commit (`OutboxStore.wakeListeners`), not inside the transaction.
     */
    readonly afterCommit?: boolean;
  };
  /** Whether the table is time-partitioned (`OutboxDatabase.partitioned`). */
  readonly partitioned: boolean;
  /**
   * Whether the store may name its statements for the port to prepare (`preparedStatements`):
   * off behind a pooler that cannot keep prepared statements (PgBouncer's transaction mode
   * before 1.21).
   */
  readonly preparedStatements: boolean;
  /**
   * How to bind the table's message ids, read from the catalog at bootstrap; undefined when the
   * connection was not open yet (the store then reads it on first use).
   */
  readonly messageIds: MessageIdCodec | undefined;
  /**
   * Whether the attempt history takes `fallback` rows (schema step 8), read at bootstrap; false
   * when the table lacks the step or the connection was not open yet: a settling fallback then
   * leaves no history row rather than failing its settle.
   */
  readonly fallbackHistory?: boolean;
}

/**
 * How the outbox table and the tables beside it (attempt history, archive, the partitioned
 * layout's guard) store message ids, where a database has more than one way (MySQL/MariaDB).
 */
export interface MessageIdLayoutReport {
  /** The outbox table's own layout: null when it is missing or its column is another type. */
  readonly table: MessageIdLayout | null;
  /**
   * Why the tables cannot be used as they are: a column of another type (`unsupported`, `table`
   * the one that has it, `detail` its type), or two layouts (`mixed`, an interrupted
   * conversion); null when they can.
   */
  readonly problem: {
    readonly kind: 'mixed' | 'unsupported';
    readonly table: string;
    readonly detail: string;
  } | null;
}

/** What a conversion of the message ids did. */
export interface MessageIdConversion {
  /** The layout the tables have now. */
  readonly layout: MessageIdLayout;
  /** The tables rewritten (quoted), in order; empty when every one had the layout already. */
  readonly converted: readonly string[];
}

/**
 * The time-partitioned layout of the outbox table on one database (docs/partitioning.md): the
 * same columns as the plain table, partitioned by RANGE on `created_at`, with the
 * `<table>_ids` guard in place of UNIQUE (message_id).
 */
export interface PartitionedTables {
  /** The partitioned table, its guard and catch-all, and partitions for `ranges`. */
  createTable(
    n: OutboxTableNames,
    interval: PartitionInterval,
    ranges: readonly PartitionRange[],
    ids?: MessageIdLayout,
  ): string[];
  /** Drops what the layout adds beside the table (the guard); the table's own drop does the rest. */
  dropTable(n: OutboxTableNames): string[];
  /** How the existing table is laid out (read only). */
  layout(run: StatementRunner, n: OutboxTableNames): Promise<OutboxTableLayout>;
  /** Its partitions: status and maintenance. */
  partitions(sql: SqlPort, n: OutboxTableNames): OutboxPartitionsPort;
  /**
   * The statements that convert a plain table by hand (the outbox refuses to: see
   * `OutboxMessages.partitionConversionRefused`), after `createTable`'s own.
   */
  conversionSteps(
    n: OutboxTableNames,
    interval: PartitionInterval,
    ranges: readonly PartitionRange[],
  ): string[];
}

/**
 * One part a later schema step adds to the outbox table on one database
 * (`lib/store/schema/schema-steps.ts` runs them in order).
 */
/** How an online step runs: the size of its batches, and a look between them (tests, progress). */
export interface SchemaOnline {
  /** Rows per backfill batch, each its own short transaction. @default 10000 */
  readonly batchRows?: number;
  /** Called after each batch with the last id it covered and the last id to cover. */
  readonly afterBatch?: (done: string, last: string) => Promise<void> | void;
}

export interface SchemaPartSql {
  /** Adds it to a table made before it; does nothing where it is there. */
  ensure(run: StatementRunner, n: OutboxTableNames): Promise<void>;
  /**
   * Where `ensure` blocks writes on a table with rows (a rewrite, a locking index build): how,
   * in words. Left out: it does not.
   */
  readonly rewrites?: string;
  /**
   * `ensure` in a form that lets writes go on while it runs, for a runner outside a
   * transaction (each statement commits on its own). Left out: `ensure` blocks nothing.
   */
  ensureOnline?(run: StatementRunner, n: OutboxTableNames, online: SchemaOnline): Promise<void>;
  /** Whether the table has it (read only). */
  has(run: StatementRunner, n: OutboxTableNames): Promise<boolean>;
  /** Removes it (the step's down migration). */
  drop(run: StatementRunner, n: OutboxTableNames): Promise<void>;
}

/**
 * The DDL of the outbox's tables on one database: the table, its attempt history and archive,
 * the parts later schema steps add, and the message-id layouts.
 */
export interface OutboxSchemaSql {
  /**
   * The outbox table (and its lock table). `ids`: how the message ids are stored where the
   * database has more than one way (MySQL/MariaDB; default binary, as new tables are); the
   * tables beside an existing one take its layout.
   */
  createTable(n: OutboxTableNames, ids?: MessageIdLayout): string[];
  /**
   * Statements that finish a table made by `createTable` in a migration written ahead of time,
   * where what it needs depends on the server (MySQL/MariaDB: their NO PAD collation's name).
   * The app's own setup (`createOutboxTable`, migrate) does this with the server at hand.
   */
  finishTableDdl?(n: OutboxTableNames): string[];
  dropTable(n: OutboxTableNames): string[];
  /** The attempt history `<table>_attempts` (added after 0.3: a migration step of its own). */
  createHistoryTable(n: OutboxTableNames, ids?: MessageIdLayout): string[];
  dropHistoryTable(n: OutboxTableNames): string[];
  /** The archive `<table>_archive`, made only for apps that turn on `cleaner.archive`. */
  createArchiveTable(n: OutboxTableNames, ids?: MessageIdLayout): string[];
  /**
   * How the tables store message ids (read only); absent where the database has one way (a
   * uuid type, or text), which the store binds as text.
   */
  messageIdLayout?(run: StatementRunner, n: OutboxTableNames): Promise<MessageIdLayoutReport>;
  /**
   * Converts the stored message ids of the table and those beside it to `to`, in place, every
   * row kept (MySQL/MariaDB: CHAR(36) and BINARY(16)).
   */
  convertMessageIds?(
    run: StatementRunner,
    n: OutboxTableNames,
    to: MessageIdLayout,
  ): Promise<MessageIdConversion>;
  /**
   * What keeps an existing table from being current beyond its columns (e.g. MySQL's PAD SPACE
   * collations), in words that say how migrate fixes it; undefined when nothing does.
   */
  tableProblem?(run: StatementRunner, n: OutboxTableNames): Promise<string | undefined>;
  /** Brings a table that already existed up to date after `createTable` ran. */
  afterCreateTable?(run: StatementRunner, n: OutboxTableNames): Promise<void>;
  /** Schema step 3: the cleaner's cut-off indexes (step 1 makes them on a new table). */
  readonly cleanerIndexes: SchemaPartSql;
  /**
   * Schema step 4: the binary-payload and broker-attribute columns, added to an older table
   * without a rewrite, rows kept (its `drop` loses binary rows and attributes).
   */
  readonly payloadColumns: SchemaPartSql;
  /**
   * Schema step 5: the index of waiting messages by key, which settles read to skip the keys
   * that have none. Absent where the database needs none: MySQL/MariaDB's key index holds the
   * status already, and SQLite's single writer has no settle to spare the probes.
   */
  readonly waitingIndex?: SchemaPartSql;
  /**
   * Schema step 6: the `key_seq` column and the per-key counter table `<table>_key_seq` of
   * `ordering.sequence`.
   */
  readonly keySequence?: SchemaPartSql;
  /**
   * Schema step 7: `tenant_id`, generated from the `x-outbox-tenant` header, and its index of
   * pending rows by tenant (docs/tenants.md). Needed only with the `tenants` option.
   */
  readonly tenantColumn?: SchemaPartSql;
  /**
   * Schema step 8: the attempt history's outcome check admits `fallback`, the row a settling
   * `@OnOutboxDeadLetter` fallback leaves.
   */
  readonly fallbackOutcome?: SchemaPartSql;
  /**
   * Schema step 9: each row's partition of the key space (`delivery_partition`), the index of
   * pending rows an owner reads, and the dispatchers' and owners' tables of partitioned
   * delivery (`dispatcher.claims: 'partitions'`).
   */
  readonly deliveryPartitions?: SchemaPartSql;
  /**
   * Schema step 10: the claim-check table `<table>_claim_checks` of the `claimCheck` option
   * (payloads sent by reference, docs/claim-check.md).
   */
  readonly claimCheckTable?: SchemaPartSql;
  /**
   * Schema step 11: the erasure's tables `<table>_subject_keys` and `<table>_subject_uses` of
   * the `erasure` option (per-subject data keys, docs/erasure.md).
   */
  readonly subjectKeysTables?: SchemaPartSql;
}

/**
 * Everything the outbox needs to know about one database, kept in that database's folder
 * (`lib/store/<database>/`): its outbox, admin, inbox and audit SQL, its table DDL and its store.
 * The registry in `outbox-databases.ts` maps TypeORM driver types to these.
 */
export interface OutboxDatabase<D extends string = string> {
  /** The dialect name the public API reports (`OutboxDialect`). */
  readonly dialect: D;
  /** The DATABASE_URL schemes that name it (also accepted by the CLI's --dialect). */
  readonly urlSchemes: readonly string[];
  readonly quoting: IdentifierQuoting;
  /** Whether a schema (PostgreSQL) or database (MySQL) may qualify table names. */
  readonly schemas: boolean;
  /** Whether the outbox table comes with a key-lock table (named in setup messages). */
  readonly keyLockTable: boolean;
  /** How the outbox's statements mark their parameters: `$1` (numbered) or `?` (question). */
  readonly placeholders: 'numbered' | 'question';
  /**
   * Whether every transaction is serializable and the drivers refuse any other level (SQLite):
   * a port's own transactions then ask for none; elsewhere they ask for READ COMMITTED.
   */
  readonly serializableOnly: boolean;
  /**
   * Whether a second writing transaction waits for the first to end before it can begin (SQLite's
   * one writer), rather than running beside it until they touch the same row.
   */
  readonly singleWriter: boolean;
  /**
   * Whether the idempotent insert says that it wrote its row only by its insert id (MySQL's
   * ON DUPLICATE KEY UPDATE counts a row left alone as found): a port reports `insertId`.
   */
  readonly insertIdReportsWrite: boolean;
  /**
   * Whether the database is a file the dispatcher opens a connection of its own to (SQLite,
   * whose ORMs share one connection): a port reports `databaseFile`.
   */
  readonly file: boolean;
  /**
   * Whether apps may deliver by partitions here (`dispatcher.claims: 'partitions'`): the
   * migrations then make schema step 9 (`schema.deliveryPartitions`) when asked, and bootstrap
   * accepts the option. False where that SQL and the store's side exist ahead of the
   * dispatcher's (MySQL/MariaDB, until their binlog reader owns the partitions): then no
   * migration makes the step and bootstrap refuses the option, as where there is no SQL.
   */
  readonly deliveryPartitionsOffered: boolean;
  /** The DDL of its tables (schema steps, migrations, `outbox schema migrate`). */
  readonly schema: OutboxSchemaSql;
  /** Bootstrap checks beyond the column probe every database gets; throws to refuse to start. */
  checkTable?(sql: SqlPort, context: OutboxStoreContext): Promise<void>;
  createStore(sql: SqlPort, context: OutboxStoreContext): Promise<OutboxStore>;
  /** The partitioned layout; absent where the database has none (SQLite). */
  readonly partitioned?: PartitionedTables;
  readonly admin: AdminDialect;
  readonly inbox: InboxSql;
  /** The console's audit table (re-drives, the console's actions). */
  readonly audit: AuditSql;
  /** The claim check's statements (`claimCheck`, docs/claim-check.md). */
  readonly claimChecks: ClaimCheckSql;
  /** The erasure's statements (`erasure`, docs/erasure.md). */
  readonly subjectKeys: SubjectKeySql;
}

/**
 * What recording an id in the caller's transaction did: wrote it, found it there already, or
 * wrote nothing because the transaction had ended.
 */
export type InboxRecordOutcome = 'written' | 'present' | 'ended';

export type InboxRecorder = (
  tx: SqlRunner,
  consumer: string,
  messageId: string,
) => Promise<InboxRecordOutcome>;

/** The inbox table's statements on one database. */
/**
 * The inbox's gap guard: the last sequence number of each (consumer, key). Parameters: consumer,
 * key, then the number for `write`.
 */
export interface InboxSequenceSql {
  createTable(n: InboxTableNames): string[];
  dropTable(n: InboxTableNames): string[];
  /**
   * Inserts the key's row with last number 0 unless it is there, waiting for a transaction that
   * inserted it and has not ended, so that `read` always finds a row to lock: a locking read of
   * a missing row locks nothing on PostgreSQL, and on InnoDB only a gap, which two first
   * deliveries both hold before each waits for the other's insert. Run before `read`; absent
   * where the inbox's first write already took the database's one write lock (SQLite).
   */
  seed?(n: InboxTableNames): string;
  /** The last number, its row locked until the transaction ends (where the database locks rows). */
  read(n: InboxTableNames): string;
  /** The last number, read without a lock (the hold's look outside the transaction). */
  peek(n: InboxTableNames): string;
  /** Records the number, never lowering the one there. */
  write(n: InboxTableNames): string;
}

export interface InboxSql {
  createTable(n: InboxTableNames): string[];
  dropTable(n: InboxTableNames): string[];
  /** The insert of the inbox's own transaction (`handleOnce`): nothing else runs in it. */
  insert(n: InboxTableNames): string;
  /**
   * Records an id in the caller's transaction (`recordOnce`), where the check that it is open and
   * the write are one statement: no statement of the app (a ROLLBACK sent before a `recordOnce`
   * that was not awaited) can come between them.
   */
  recorder(n: InboxTableNames): InboxRecorder;
  purge(n: InboxTableNames): string;
  /** The gap guard's table of last sequence numbers (`<inbox>_seq`). */
  readonly sequence: InboxSequenceSql;
  /**
   * TypeORM runs every transaction of the DataSource on one shared connection, so the inbox
   * must run its own transactions one after another.
   */
  readonly sharedConnection: boolean;
}
