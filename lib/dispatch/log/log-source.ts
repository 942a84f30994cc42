import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { outboxTableNames } from '../../internal/sql-identifier';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { outboxDatabaseOf } from '../../store/outbox-databases';
import {
  DEFAULT_LOG_LINGER_MS,
  DEFAULT_LOG_SWEEP_INTERVAL_MS,
  type OutboxLogConnectionSettings,
  type OutboxLogLag,
  type OutboxLogObserver,
  type OutboxLogSource,
  type OutboxLogSourceContext,
} from '../../store/ports/outbox-log-source.port';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { RowLeases } from '../leases/row-leases';
import { LogTailer } from './log-tailer';
import { RetrySweeps } from './retry-sweeps';

/** The log each dialect's reader reads, for the start line; null where a dispatcher can read none. */
const LOG_READERS = {
  postgres: 'PostgreSQL logical replication',
  mysql: 'MySQL/MariaDB binlog',
  sqlite: null,
} as const satisfies Record<OutboxLogSourceContext['database'], string | null>;

/** Each dialect's name, for the refusal. */
const DIALECT_NAMES = {
  postgres: 'PostgreSQL',
  mysql: 'MySQL/MariaDB',
  sqlite: 'SQLite',
} as const satisfies Record<OutboxLogSourceContext['database'], string>;

/** The dialects with a log to read. */
type LogDialect = {
  [D in keyof typeof LOG_READERS]: (typeof LOG_READERS)[D] extends null ? never : D;
}[keyof typeof LOG_READERS];

/** How often the table is swept beside `observer`'s log. */
export function logSweepIntervalMs(observer: OutboxLogObserver): number {
  return observer.sweepIntervalMs ?? DEFAULT_LOG_SWEEP_INTERVAL_MS;
}

/**
 * The log's source (`delivery: logTailing()`): the database's log
 * reader, checked at module init; the `LogTailer` that leases what it brings and hands it to the
 * pipeline; and the table's sweep (a `PollSource` on a slow timer, without LISTEN or commit
 * nudges), which takes retries, promotions and what the tailer left to the table, and is asked
 * to look when a retry falls due. States: not made (before init), checked, reading, stopped.
 */
export class LogSource implements DeliverySource {
  readonly delivers = true;
  readonly unsettled = 'the messages of a batch not settled are claimed again once its lease ends';
  private source: OutboxLogSource | undefined;
  private database: LogDialect | undefined;
  private tailer: LogTailer | undefined;
  /** The sweeps retries ask for. */
  private readonly retrySweeps: RetrySweeps;

  /**
   * `sweep` is the table's source on the sweep's timer (see `chooseDeliverySource`): the log
   * source wakes it for what it leaves to the table and for retries falling due.
   */
  constructor(
    private readonly observer: OutboxLogObserver,
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
    private readonly leases: RowLeases,
    private readonly sweep: DeliverySource,
  ) {
    this.retrySweeps = new RetrySweeps(() => this.sweep.wake());
    pipeline.onRetries((delaysMs) => this.retrySweeps.due(delaysMs));
  }

  /** How often the table is still polled: retries, promotions and rows the reader left. */
  get sweepIntervalMs(): number {
    return logSweepIntervalMs(this.observer);
  }

  /** Which log is read, for the start's line: known once the source is made (`prepare`). */
  get reader(): string {
    return this.database === undefined ? 'database log' : LOG_READERS[this.database];
  }

  get description(): string {
    return `log tailing (${this.reader}), table swept every ${this.sweepIntervalMs} ms`;
  }

  get drainTimes(): DrainTimes {
    return this.sweep.drainTimes;
  }

  /**
   * Makes the source and checks the server (settings, grants, publication or position table):
   * a missing setting fails the app's start, naming it.
   */
  async prepare(): Promise<void> {
    this.source ??= await this.makeSource();
  }

  /** Starts reading the log and the sweep's timer. */
  async start(): Promise<void> {
    await this.prepare();
    const source = this.source;
    const claimIds = this.context.store.claimIds?.bind(this.context.store);
    if (this.tailer === undefined && source !== undefined && claimIds !== undefined) {
      const { options, log } = this.context;
      const { instanceId, dispatcher, ordering } = options;
      this.tailer = new LogTailer({
        source,
        store: { claimIds },
        pipeline: this.pipeline,
        leases: this.leases,
        log,
        owner: instanceId,
        leaseMs: dispatcher.leaseMs,
        batchSize: dispatcher.batchSize,
        batchesInFlight: dispatcher.batchesInFlight,
        lingerMs: this.observer.lingerMs ?? DEFAULT_LOG_LINGER_MS,
        ordered: ordering.enabled,
        maxRun: ordering.maxRun,
        handOff: () => this.sweep.wake(),
        sweepAfter: (delayMs) => this.retrySweeps.due([delayMs]),
      });
      this.tailer.start();
    }
    await this.sweep.start();
  }

  /** A sweep of the table now. */
  wake(): void {
    this.sweep.wake();
  }

  drain(): Promise<number> {
    return this.sweep.drain();
  }

  runOnce(): Promise<OutboxBatchReport> {
    return this.sweep.runOnce();
  }

  /** How far the log's durable position is behind; null before the source is made. */
  async lag(): Promise<OutboxLogLag | null> {
    return this.source === undefined ? null : this.source.lag();
  }

  /**
   * Stops the reader first: the batches it leased finish (settled), what it had not leased stays
   * unacknowledged. Then the sweep.
   */
  stop(): SourceStop {
    const tailer = this.tailer;
    this.retrySweeps.stop();
    const tailing = tailer?.stop() ?? Promise.resolve();
    const sweep = this.sweep.stop();
    return {
      idle: Promise.all([tailing, sweep.idle]).then(() => undefined),
      closing: sweep.closing,
    };
  }

  stillRunning(idleDone: boolean): string[] {
    const left = this.sweep.stillRunning(idleDone);
    if (!idleDone && this.tailer !== undefined && !this.tailer.idle) left.unshift('the log reader');
    return left;
  }

  private async makeSource(): Promise<OutboxLogSource> {
    const { sql, store, options, log } = this.context;
    const database = sql === undefined ? undefined : outboxDatabaseOf(sql.databaseType);
    if (sql === undefined || database === undefined) {
      throw new OutboxOptionsError(
        "delivery: the instance's database is unknown to log tailing; use 'poll'.",
        'delivery',
      );
    }
    const dialect = database.dialect as OutboxLogSourceContext['database'];
    const reader = LOG_READERS[dialect];
    if (reader === null || store.claimIds === undefined) {
      throw new OutboxOptionsError(
        `delivery: log tailing needs PostgreSQL or MySQL/MariaDB, and this instance runs on ${DIALECT_NAMES[dialect]}, ${reader === null ? 'which has no replication log' : 'whose store cannot lease by id yet'}. Use delivery: 'poll' (the default).`,
        'delivery',
      );
    }
    const { tableName, schema, instanceId } = options;
    this.database = dialect as LogDialect;
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
