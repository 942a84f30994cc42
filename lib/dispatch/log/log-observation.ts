import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { outboxTableNames } from '../../internal/sql-identifier';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { outboxDatabaseOf } from '../../store/outbox-databases';
import type {
  OutboxLogConnectionSettings,
  OutboxLogLag,
  OutboxLogObserver,
  OutboxLogSource,
} from '../../store/ports/outbox-log-source.port';
import type { OutboxStore } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import type { LeasedBatch } from '../poll/claimer';
import type { DatabaseWatchdog } from '../health/database-watchdog';
import type { DispatcherLog } from '../dispatcher-log';
import { LogTailer } from './log-tailer';
import type { OwnerLease } from '../health/owner-liveness';

/** How often a dispatcher that observes the log polls the table, unless its observer says. */
const DEFAULT_SWEEP_INTERVAL_MS = 5_000;

/** What the log's side of the dispatcher needs from the rest of it. */
export interface LogObservationHooks {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxStore;
  /** The instance's SQL port, which the source checks the server through. */
  readonly sql: SqlPort | undefined;
  readonly watchdog: DatabaseWatchdog;
  readonly log: DispatcherLog;
  /** Shutting down or paused by an outage: lease nothing more. */
  readonly holdsOff: () => boolean;
  readonly deliver: (batch: LeasedBatch, started: number) => Promise<OutboxBatchReport>;
  /** Asks the table's claim loop for a sweep now. */
  readonly wake: () => void;
  readonly pause: (error: unknown, what: string) => void;
  /** The lease token to write (the dispatcher's OwnerLiveness). */
  readonly lease: () => OwnerLease;
  /** A lease by id whose answer was lost: given back with the claim loop's lost claims. */
  readonly lostLease: (token: string, call: Promise<unknown> | undefined) => void;
}

/**
 * The dispatcher with `dispatcher.observe` a log observer (`logTailing()`): the source, checked
 * at module init, the `LogTailer` that leases what it brings, and the sweeps of the table it
 * asks for. States: no source (`'poll'`, or before init), checked, reading, stopped.
 */
export class LogObservation {
  private source: OutboxLogSource | undefined;
  private database: 'postgres' | 'mysql' | undefined;
  private tailer: LogTailer | undefined;
  /** The next sweep a retry asked for, and when it fires. */
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweepTimerAt = 0;

  constructor(
    private readonly observer: OutboxLogObserver,
    private readonly hooks: LogObservationHooks,
  ) {}

  /** How often the table is still polled: retries, promotions and rows the reader left. */
  get sweepIntervalMs(): number {
    return this.observer.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS;
  }

  /** Which log is read, for the start's line: known once the source is made (`prepare`). */
  get reader(): string {
    if (this.database === 'postgres') return 'PostgreSQL logical replication';
    if (this.database === 'mysql') return 'MySQL/MariaDB binlog';
    return 'database log';
  }

  /**
   * Makes the source and checks the server (settings, grants, publication or position table):
   * a missing setting fails the app's start, naming it.
   */
  async prepare(): Promise<void> {
    this.source ??= await this.makeSource();
  }

  /** Starts reading the log: what it brings is leased by id and delivered (see LogTailer). */
  async start(): Promise<void> {
    await this.prepare();
    const source = this.source;
    const claimIds = this.hooks.store.claimIds?.bind(this.hooks.store);
    if (this.tailer !== undefined || source === undefined || claimIds === undefined) return;
    const { options, watchdog, log } = this.hooks;
    const { instanceId, dispatcher, ordering } = options;
    this.tailer = new LogTailer({
      source,
      store: { claimIds },
      watchdog,
      log,
      owner: instanceId,
      leaseMs: dispatcher.leaseMs,
      batchSize: dispatcher.batchSize,
      ordered: ordering.enabled,
      maxRun: ordering.maxRun,
      holdsOff: this.hooks.holdsOff,
      deliver: this.hooks.deliver,
      handOff: this.hooks.wake,
      sweepAfter: (delayMs) => this.retriesDue([delayMs]),
      pause: this.hooks.pause,
      lease: this.hooks.lease,
      lostLease: this.hooks.lostLease,
    });
    this.tailer.start();
  }

  /** How far the log's durable position is behind; null before the source is made. */
  async lag(): Promise<OutboxLogLag | null> {
    return this.source === undefined ? null : this.source.lag();
  }

  /**
   * Retries go out through the table's sweep; without LISTEN and commit nudges, it would find
   * them up to a sweep interval late. Sweeps when the first of `delaysMs` is due.
   */
  retriesDue(delaysMs: readonly number[]): void {
    if (delaysMs.length === 0) return;
    const delayMs = Math.min(...delaysMs);
    const at = Date.now() + delayMs;
    if (this.sweepTimer !== undefined && this.sweepTimerAt <= at) return;
    clearTimeout(this.sweepTimer);
    this.sweepTimerAt = at;
    // A little past the due time: the database clock decides, and a wake-up early finds nothing.
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      this.hooks.wake();
    }, delayMs + 20);
    this.sweepTimer.unref();
  }

  /**
   * Stops the reader first: the batch it is handing over finishes (settled) or stays
   * unacknowledged. Resolves when it has stopped.
   */
  stop(): Promise<void> {
    const tailer = this.tailer;
    this.tailer = undefined;
    clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    return tailer?.stop() ?? Promise.resolve();
  }

  private async makeSource(): Promise<OutboxLogSource> {
    const { sql, store, options, log } = this.hooks;
    const database = sql === undefined ? undefined : outboxDatabaseOf(sql.databaseType);
    if (sql === undefined || database === undefined) {
      throw new OutboxOptionsError(
        "dispatcher.observe: the instance's database is unknown to log tailing; use 'poll'.",
        'dispatcher.observe',
      );
    }
    const dialect = database.dialect;
    if (dialect === 'sqlite' || store.claimIds === undefined) {
      throw new OutboxOptionsError(
        `dispatcher.observe: log tailing needs PostgreSQL or MySQL/MariaDB, and this instance runs on ${dialect === 'sqlite' ? 'SQLite, which has no replication log' : dialect + ', whose store cannot lease by id yet'}. Use dispatcher.observe: 'poll' (the default).`,
        'dispatcher.observe',
      );
    }
    const { tableName, schema, instanceId } = options;
    this.database = dialect as 'postgres' | 'mysql';
    const source = this.observer.create({
      database: this.database,
      names: outboxTableNames(tableName, schema, database.quoting),
      sql,
      owner: instanceId,
      connection: connectionSettings(options.dataSource),
      log: (level, message) => (level === 'warn' ? log.warn(message) : log.log(message)),
    });
    await source.check();
    return source;
  }
}

/**
 * The connection settings of a TypeORM DataSource given as `dataSource`, for the log's
 * replication connection; undefined for anything else (a connection of another library, a
 * DataSource named by string), where `logTailing({ connectionString })` says how.
 */
function connectionSettings(
  dataSource: ResolvedOutboxOptions['dataSource'],
): OutboxLogConnectionSettings | undefined {
  if (typeof dataSource !== 'object') return undefined;
  const o = dataSource.options as {
    url?: string;
    host?: string;
    port?: number;
    username?: string;
    password?: unknown;
    database?: unknown;
    ssl?: boolean | object;
  };
  return {
    connectionString: o.url,
    host: o.host,
    port: o.port,
    user: o.username,
    // A password given as a function (rotating credentials) is left to connectionString.
    password: typeof o.password === 'string' ? o.password : undefined,
    database: typeof o.database === 'string' ? o.database : undefined,
    ssl: o.ssl,
  };
}
