import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort } from './sql-port';

/** How often a dispatcher that tails the log still sweeps the table, unless told otherwise. */
export const DEFAULT_LOG_SWEEP_INTERVAL_MS = 5_000;

/**
 * One committed insert into the outbox table, as the database's log carried it: enough to find
 * the row in the table and to keep a key's order, never the message itself (the table is the
 * record; the row is read from it when it is leased).
 */
export interface LoggedInsert {
  /** The row's primary key (`id`), as decimal text. */
  readonly id: string;
  /** The message key, or null. */
  readonly key: string | null;
  /**
   * How long after its commit the row falls due (its `available_at`, a delayed message), in
   * milliseconds on the database's clock; 0 or less when due at once. Left out where the log
   * does not carry the column (a publication made by an earlier release).
   */
  readonly dueInMs?: number;
}

/**
 * The inserts of one or more committed transactions, in commit order, and the log position just
 * after the last of them. Acknowledging `position` tells the source that every insert up to it
 * has its outcome recorded in the table (or was handed to the table's own path).
 */
export interface LoggedBatch {
  readonly inserts: readonly LoggedInsert[];
  /** Opaque to the dispatcher: an LSN on PostgreSQL, a binlog file and offset on MySQL. */
  readonly position: string;
  /**
   * Inserts of these transactions not in `inserts`: a transaction past the source's bound
   * (`maxTransactionInserts`) is left whole to the table's sweep. @default 0
   */
  readonly leftToTable?: number;
}

/** How far the source's durable position is behind the database's log. */
export interface OutboxLogLag {
  /** Bytes of log kept for this outbox and not yet acknowledged; null when unknown. */
  readonly retainedBytes: number | null;
  /** Whether this process is the one active reader now. */
  readonly active: boolean;
  /**
   * How often this process found the log's durable position gone and made a new one
   * (PostgreSQL: the slot dropped, or invalidated past `max_slot_wal_keep_size`). Messages
   * committed while it was gone are pending in the table and go out through the sweep.
   * Left out by a source that cannot lose its position.
   */
  readonly positionLosses?: number;
  /**
   * Why the log cannot be read now (the slot is missing or invalidated and could not be made
   * again yet); null or left out when nothing stands in the way.
   */
  readonly problem?: string | null;
}

/**
 * A reader of the database's transaction log for one outbox table: PostgreSQL logical
 * replication (pgoutput), the MySQL/MariaDB binlog. One process reads at a time; the others
 * stand by and take over when it stops or dies.
 */
export interface OutboxLogSource {
  /**
   * Checks the server settings and grants the source needs; throws `OutboxOptionsError` naming
   * the missing setting and how to change it. Run at bootstrap, before the first read.
   */
  check(): Promise<void>;
  /**
   * Becomes the one active reader (retrying while another process holds the log), then hands
   * each run of committed inserts to `onBatch`, one call at a time and awaited, in commit order,
   * starting after the last acknowledged position. Resolves once `signal` aborts and the read
   * has stopped; a lost connection is retried, never thrown.
   */
  run(onBatch: (batch: LoggedBatch) => Promise<void>, signal: AbortSignal): Promise<void>;
  /** Durably records that everything up to `position` is handled; a restart resumes after it. */
  acknowledge(position: string): Promise<void>;
  lag(): Promise<OutboxLogLag>;
}

/**
 * How the instance's own connection reaches the server, where the module can tell (a TypeORM
 * DataSource's options): a log source opens its replication connection the same way unless
 * told otherwise. May hold a password: never log it.
 */
export interface OutboxLogConnectionSettings {
  readonly connectionString?: string;
  readonly host?: string;
  readonly port?: number;
  readonly user?: string;
  readonly password?: string;
  readonly database?: string;
  /** As the driver takes it (`true`, or TLS options). */
  readonly ssl?: boolean | object;
}

/** What a log source is built from, given by the module at bootstrap. */
export interface OutboxLogSourceContext {
  /** The dialect (`OutboxDialect`, written out: the options, below the store, use this port). */
  readonly database: 'postgres' | 'mysql' | 'sqlite';
  readonly names: OutboxTableNames;
  /** The instance's SQL port (for checks, the position table, the lock). */
  readonly sql: SqlPort;
  /** A name for this process in locks and logs (the dispatcher's `locked_by`). */
  readonly owner: string;
  /** The instance's connection settings, when the module can tell them (see there). */
  readonly connection?: OutboxLogConnectionSettings;
  /** The dispatcher's log, for a source's own lines (standby, reconnects). */
  readonly log?: (level: 'log' | 'warn', message: string) => void;
  /**
   * Told when this process becomes the log's one reader (it holds the slot or the binlog lock)
   * and when it stops being it: a reader that owns delivery takes the table then, and gives it
   * back.
   */
  readonly reading?: (reading: boolean) => void;
}

/** The wait for a fuller batch of an observer that does not say (`OutboxLogObserver.lingerMs`). */
export const DEFAULT_LOG_LINGER_MS = 1;

/** What `delivery` takes besides `'poll'` and `'external'` (`logTailing()` makes it): builds the source for the instance's database. */
export interface OutboxLogObserver {
  readonly kind: 'log';
  /**
   * How often the dispatcher still polls the table while it observes the log: the path of
   * retries, promotions and rows the log's reader left to the table.
   * @default 5000 (`DEFAULT_LOG_SWEEP_INTERVAL_MS`)
   */
  readonly sweepIntervalMs?: number;
  /**
   * How long the ids at hand wait for more before a batch smaller than `batchSize` is leased,
   * while another batch is in flight (with none in flight they go at once). @default 1
   */
  readonly lingerMs?: number;
  create(context: OutboxLogSourceContext): OutboxLogSource;
}
