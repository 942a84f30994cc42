import { randomInt } from 'node:crypto';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { describeError } from '../../internal/describe-error';
import type {
  LoggedBatch,
  OutboxLogLag,
  OutboxLogSource,
  OutboxLogSourceContext,
} from '../../store/ports/outbox-log-source.port';
import {
  connectionOptions,
  loadBinlogClient,
  openLockConnection,
  type BinlogClient,
  type BinlogClientClass,
  type MysqlBinlogConnectionSettings,
  type MysqlLockConnection,
} from './mysql-binlog-client';
import { MysqlBinlogLock } from './mysql-binlog-lock';
import {
  compareBinlogPositions,
  parseBinlogPosition,
  retainedBinlogBytes,
  type BinaryLogFile,
  type BinlogPosition,
} from './mysql-binlog-position';
import { BinlogTransactions } from './mysql-binlog-transactions';
import { overflowWarning } from '../open-transaction';
import { mysqlBinlogProblems } from './mysql-log-tailing.checks';
import { MysqlLogTailingMessages } from './mysql-log-tailing.messages';
import {
  mysqlLogLockName,
  mysqlLogPositionTable,
  mysqlReadLogPosition,
  mysqlAdvanceLogPosition,
  mysqlInsertLogPosition,
  mysqlResetLogPosition,
} from './mysql-log-tailing.sql';

/** What the MySQL/MariaDB log source needs besides the module's context. */
export interface MysqlLogSourceSettings {
  /** The binlog user's login (the password is never logged). */
  readonly connection: MysqlBinlogConnectionSettings;
  /**
   * The replica id the reader announces; unique among the server's replicas and readers.
   * @default a new number from 1 000 000 000 up for each binlog connection (sessionServerId)
   */
  readonly serverId?: number;
  /**
   * The `@vlasky/zongji` class, when the app loads it itself (an ES module app, a bundler).
   * @default loaded from `@vlasky/zongji` at the first `run`
   */
  readonly client?: BinlogClientClass;
  /**
   * Most inserts in one batch (a larger transaction comes in parts).
   * @default 500
   */
  readonly maxBatch?: number;
  /**
   * Most inserts of one transaction kept in memory; past it the transaction is left whole to
   * the table's sweep (see OpenTransaction). @default 10000
   */
  readonly maxTransactionInserts?: number;
  /**
   * How long a batch under `maxBatch` waits for more transactions before it goes. The
   * dispatcher's tailer coalesces what arrives while a batch is in flight (`logTailing({
   * lingerMs })`), so the reader hands over at once: a wait here delayed every message, even
   * the only one. @default 0
   */
  readonly lingerMs?: number;
  /**
   * How often a standby tries the lock, the holder checks it, and a lost connection is retried.
   * @default 1000
   */
  readonly retryMs?: number;
  /**
   * Longest wait for the server: a connect, a statement on the reader's own connection (a lock
   * check among them), or, once the server has sent heartbeats, silence on the binlog
   * connection. Past it the connection is taken for dead and closed; a lock check that times out
   * means the lock is lost. The server ends the lock's session after `retryMs + timeoutMs`
   * (rounded up to seconds, plus one) without a word from it (`wait_timeout`), which frees the
   * lock of a frozen or cut-off reader.
   * @default 5000
   */
  readonly timeoutMs?: number;
  /**
   * How often, while the outbox has no new inserts and everything handed over is acknowledged,
   * the source moves the durable position past the other tables' transactions itself.
   * @default 5000
   */
  readonly idleAdvanceMs?: number;
  /**
   * Where the reader says what it does (`log`: reading, standing by) and what went wrong
   * (`warn`: a lost lock or connection, skipped binlog). A Nest `Logger` fits.
   */
  readonly logger?: { warn(message: string): void; log?(message: string): void };
}

// Inserts waiting to be handed over beyond which the binlog connection is paused.
const PAUSE_AT_BATCHES = 20;
// The MySQL/MariaDB error that ends a binlog dump; it also ends the dump of a reader that
// another one with the same server id replaced, so only the texts of a missing file or offset
// mean that the position is gone.
const ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236;
const POSITION_GONE =
  /could not find first log file|impossible position|position > file size|purged required binary logs/i;
// A warning repeated within this time is not logged again.
const WARNING_QUIET_MS = 60_000;

/**
 * The MySQL/MariaDB binlog source: one process holds a named lock and reads the binlog in ROW
 * format from the position in `<table>_log_position`, handing over the outbox table's inserts
 * of each committed transaction; the others wait for the lock.
 *
 * On its very first start (no position stored) it begins at the server's current binlog end:
 * rows enqueued before that are left to the dispatcher's poll of the table.
 */
export class MysqlBinlogSource implements OutboxLogSource {
  private readonly maxBatch: number;
  private readonly maxTransactionInserts: number;
  private readonly lingerMs: number;
  private readonly retryMs: number;
  private readonly idleAdvanceMs: number;
  private readonly timeoutMs: number;
  /** The lock connection's `wait_timeout`: longer than a check's interval and bound together. */
  private readonly idleSeconds: number;
  /** Whether this server sends binlog heartbeats (then a silent binlog connection is dead). */
  private heartbeats = false;
  private acknowledged: BinlogPosition | null = null;
  private lock: MysqlBinlogLock | null = null;
  private schema: string | null;
  private lastAdvance = 0;
  private lastWarning = { text: '', at: 0 };
  private client: BinlogClientClass | undefined;

  constructor(
    private readonly context: OutboxLogSourceContext,
    private readonly settings: MysqlLogSourceSettings,
  ) {
    this.maxBatch = positive(settings.maxBatch, 500, 'maxBatch');
    this.maxTransactionInserts = positive(
      settings.maxTransactionInserts,
      10_000,
      'maxTransactionInserts',
    );
    this.lingerMs = settings.lingerMs ?? 0;
    this.retryMs = positive(settings.retryMs, 1_000, 'retryMs');
    this.idleAdvanceMs = positive(settings.idleAdvanceMs, 5_000, 'idleAdvanceMs');
    this.timeoutMs = positive(settings.timeoutMs, 5_000, 'timeoutMs');
    this.idleSeconds = Math.ceil((this.retryMs + this.timeoutMs) / 1_000) + 1;
    this.schema = context.names.schema;
  }

  async check(): Promise<void> {
    // A missing package fails the start here rather than the first run.
    this.client ??= this.settings.client ?? (await loadBinlogClient());
    const schema = await this.schemaName();
    const { host, port = 3306, user } = this.settings.connection;
    const connection = await openLockConnection(this.settings.connection, {
      timeoutMs: this.timeoutMs,
    }).catch((error: unknown) => {
      throw new OutboxOptionsError(
        MysqlLogTailingMessages.cannotConnect(`${user}@${host}:${port}`, describeError(error)),
        'logTailing.connection',
      );
    });
    try {
      const [variables] = await connection.query(
        'SELECT VERSION() AS version, @@log_bin AS log_bin, @@binlog_format AS binlog_format, @@binlog_row_image AS binlog_row_image, CURRENT_USER() AS user',
      );
      const v = (variables as Record<string, unknown>[])[0] ?? {};
      const [grants] = await connection.query('SHOW GRANTS');
      // A privilege held through a role is not in SHOW GRANTS: what SHOW BINARY LOGS needs is
      // tried instead of read.
      const monitors = await connection.query('SHOW BINARY LOGS').then(
        () => true,
        () => false,
      );
      const [compression] = await connection.query(
        "SHOW GLOBAL VARIABLES LIKE 'binlog_transaction_compression'",
      );
      const [columns] = await connection.query(
        "SELECT COUNT(*) AS n FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME IN ('id', 'message_key')",
        [schema, this.context.names.tableName],
      );
      const problem = mysqlBinlogProblems({
        version: String(v['version']),
        logBin: Number(v['log_bin']) === 1,
        binlogFormat: String(v['binlog_format']),
        binlogRowImage: String(v['binlog_row_image']),
        user: quotedUser(String(v['user'])),
        grants: (grants as Record<string, unknown>[]).map((row) => String(Object.values(row)[0])),
        binlogMonitor: monitors,
        transactionCompression: (compression as { Value?: unknown }[]).some(
          (row) => String(row.Value).toUpperCase() === 'ON',
        ),
        tableVisible: Number((columns as { n: unknown }[])[0]?.n) === 2,
        table: `${schema}.${this.context.names.tableName}`,
      });
      if (problem !== null) throw problem;
    } finally {
      await connection.end().catch(() => connection.destroy());
    }
    await this.context.sql
      .query(`${mysqlReadLogPosition(this.context.names)} LIMIT 0`)
      .catch((error: unknown) => {
        throw new OutboxOptionsError(
          `Log tailing keeps its binlog position in ${mysqlLogPositionTable(this.context.names)}, which could not be read (${describeError(error)}). Create it: run \`outbox log setup\` (or \`outbox schema migrate --log-tailing\`, or add logTailingMigration() to the app's TypeORM migrations).`,
          'logTailing',
        );
      });
  }

  async run(onBatch: (batch: LoggedBatch) => Promise<void>, signal: AbortSignal): Promise<void> {
    const Client = (this.client ??= this.settings.client ?? (await loadBinlogClient()));
    while (!signal.aborted) {
      const taken = await this.takeLock(signal);
      if (taken === null) break;
      const { lock, tookOver } = taken;
      this.lock = lock;
      this.context.reading?.(true);
      try {
        await this.read(Client, lock, tookOver, onBatch, signal);
      } catch (error) {
        if (signal.aborted) {
          // Stopping: whatever failed on the way out is no news.
        } else if (error instanceof LockLost) {
          this.warn(
            `Lost the binlog lock ${lock.name} of ${this.tableLabel()}: ${describeError(error.reason)}. Stopped reading; asking for the lock again every ${this.retryMs} ms`,
          );
        } else {
          this.warn(
            `Reading the binlog of ${this.tableLabel()} failed, reconnecting in ${this.retryMs} ms: ${describeError(error)}`,
          );
        }
      } finally {
        this.lock = null;
        this.context.reading?.(false);
        await lock.release();
      }
      await pause(this.retryMs, signal);
    }
  }

  async acknowledge(position: string): Promise<void> {
    await this.record(parseBinlogPosition(position));
  }

  async lag(): Promise<OutboxLogLag> {
    const { rows } = await this.context.sql.query<{ binlog_file: string; binlog_offset: unknown }>(
      mysqlReadLogPosition(this.context.names),
    );
    const row = rows[0];
    // Unknown rather than failed when the server cannot be asked: the gauges still say whether
    // this process reads.
    const files =
      row === undefined
        ? null
        : await this.withConnection(async (connection) => binaryLogs(connection)).catch(
            (error: unknown) => {
              this.warn(`Cannot read the binlog's size for the lag: ${describeError(error)}`);
              return null;
            },
          );
    return {
      retainedBytes:
        row === undefined || files === null
          ? null
          : retainedBinlogBytes(
              { file: row.binlog_file, offset: Number(row.binlog_offset) },
              files,
            ),
      active: this.lock?.holding === true,
    };
  }

  /**
   * Retries until this process holds the lock, or answers null once `signal` aborts (a
   * connection opening or asking then is closed, not awaited). `tookOver`: another process
   * held it meanwhile.
   */
  private async takeLock(
    signal: AbortSignal,
  ): Promise<{ lock: MysqlBinlogLock; tookOver: boolean } | null> {
    const name = mysqlLogLockName(await this.schemaName(), this.context.names);
    let reported = false;
    let standingBy = false;
    while (!signal.aborted) {
      let connection: MysqlLockConnection | null = null;
      const drop = (): void => connection?.destroy();
      signal.addEventListener('abort', drop, { once: true });
      try {
        connection = await openLockConnection(this.settings.connection, {
          timeoutMs: this.timeoutMs,
          idleSeconds: this.idleSeconds,
          signal,
        });
        // A standby keeps its connection and asks again; it holds nothing meanwhile.
        while (!signal.aborted) {
          const lock = await MysqlBinlogLock.take(connection, name, this.retryMs);
          if (lock !== null) {
            connection = null;
            return { lock, tookOver: standingBy };
          }
          if (!standingBy) {
            this.note(
              `The binlog of ${this.tableLabel()} is read by another process (it holds the lock ${name}): standing by, asking every ${this.retryMs} ms`,
            );
          }
          standingBy = true;
          await pause(this.retryMs, signal);
        }
      } catch (error) {
        if (!reported && !signal.aborted) {
          this.warn(
            `Cannot ask for the binlog lock ${name} (${describeError(error)}); retrying every ${this.retryMs} ms`,
          );
        }
        reported = true;
        await pause(this.retryMs, signal);
      } finally {
        signal.removeEventListener('abort', drop);
      }
      connection?.destroy();
    }
    return null;
  }

  private async read(
    Client: BinlogClientClass,
    lock: MysqlBinlogLock,
    tookOver: boolean,
    onBatch: (batch: LoggedBatch) => Promise<void>,
    signal: AbortSignal,
  ): Promise<void> {
    const schema = await this.schemaName();
    const start = await this.startPosition(lock.connection);
    this.note(
      `Reading the binlog of ${this.tableLabel()} from ${start.file}:${start.offset} (lock ${lock.name}${tookOver ? ', taken over from another process' : ''})`,
    );
    const maxInserts = this.maxTransactionInserts;
    const transactions = new BinlogTransactions(schema, this.context.names.tableName, start, {
      maxInserts,
      overflowed: (soFar) =>
        this.settings.logger?.warn(overflowWarning(this.tableLabel(), maxInserts, soFar)),
    });
    const wake = new Wake();
    // Written by the client's and the lock's callbacks, read by the loop.
    const state: { failure: Error | null; paused: boolean } = { failure: null, paused: false };
    const client = new Client(connectionOptions(this.settings.connection, this.timeoutMs));
    // Anything from the binlog connection, a heartbeat included, shows that it is alive.
    let heardAt = performance.now();
    client.on('binlog', (event) => {
      heardAt = performance.now();
      if (event.getEventName() === 'heartbeat') {
        this.heartbeats = true;
        return;
      }
      if (!transactions.accept(event)) return;
      wake.notify();
      if (!state.paused && transactions.waiting > PAUSE_AT_BATCHES * this.maxBatch) {
        state.paused = true;
        client.connection?.pause();
      }
    });
    client.on('error', (error) => {
      state.failure ??= error;
      wake.notify();
    });
    void lock.lost.then((error) => {
      state.failure ??= new LockLost(error);
      wake.notify();
    });
    const onAbort = (): void => wake.notify();
    signal.addEventListener('abort', onAbort, { once: true });
    client.start({
      serverId: this.settings.serverId ?? sessionServerId(),
      filename: start.file,
      position: start.offset,
      includeEvents: [
        'rotate',
        'gtid',
        'mariadbgtid',
        'tablemap',
        'writerows',
        'xid',
        'query',
        'heartbeat',
      ],
      includeSchema: { [schema]: [this.context.names.tableName] },
    });
    // Queued on the binlog connection before zongji's own statements and its dump: while the
    // binlog is idle the server sends a heartbeat this often (the variable is in nanoseconds;
    // MySQL 8.0.26+ reads the second name).
    const heartbeatNs = Math.ceil(this.timeoutMs / 4) * 1_000_000;
    client.connection?.query?.(
      `SET @master_heartbeat_period = ${heartbeatNs}, @source_heartbeat_period = ${heartbeatNs}`,
      () => undefined,
    );
    try {
      while (!signal.aborted && state.failure === null) {
        if (this.lingerMs > 0 && transactions.waiting > 0 && transactions.waiting < this.maxBatch) {
          await pause(this.lingerMs, signal);
        }
        const batch = transactions.take(this.maxBatch);
        if (batch !== null) {
          await onBatch(batch);
          continue;
        }
        if (state.paused) {
          state.paused = false;
          client.connection?.resume();
          heardAt = performance.now();
        }
        await this.advanceIdle(transactions);
        if (this.heartbeats && !state.paused && performance.now() - heardAt > this.timeoutMs) {
          // A link cut whole silences the lock connection too: that is the news, if so.
          state.failure ??= (await lock.held())
            ? new Error(
                `the binlog connection sent nothing, not even a heartbeat, for ${this.timeoutMs} ms`,
              )
            : new LockLost(await lock.lost);
          break;
        }
        await wake.wait(this.retryMs);
      }
      const lost = state.failure;
      if (lost !== null && !signal.aborted) {
        if (
          errnoOf(lost) === ER_MASTER_FATAL_ERROR_READING_BINLOG &&
          POSITION_GONE.test(lost.message) &&
          (await lock.held())
        ) {
          await this.skipToEnd(lock.connection, lost);
        }
        throw lost;
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      await stopClient(client);
    }
  }

  /** The stored position; on the first start, the server's binlog end, stored at once. */
  private async startPosition(connection: MysqlLockConnection): Promise<BinlogPosition> {
    const { rows } = await this.context.sql.query<{ binlog_file: string; binlog_offset: unknown }>(
      mysqlReadLogPosition(this.context.names),
    );
    const row = rows[0];
    if (row !== undefined) {
      const stored = { file: row.binlog_file, offset: Number(row.binlog_offset) };
      this.acknowledged = stored;
      return stored;
    }
    const end = await binlogEnd(connection);
    await this.record(end);
    return end;
  }

  /**
   * The stored position's binlog is gone (purged by expiry before it was read): start again at
   * the end. The inserts in between are left to the dispatcher's poll of the table.
   */
  private async skipToEnd(connection: MysqlLockConnection, error: Error): Promise<void> {
    const end = await binlogEnd(connection);
    this.warn(
      `The binlog of ${this.tableLabel()} at the stored position is no longer on the server (${describeError(error)}); reading on from ${end.file}:${end.offset}, the inserts in between are left to the table's poll. Keep binlogs longer (binlog_expire_logs_seconds, expire_logs_days, or RDS binlog retention hours).`,
    );
    this.acknowledged = null;
    await this.write(end, 'reset');
  }

  /**
   * Moves the durable position past transactions of other tables, but only while every batch
   * handed over is acknowledged: the position never passes an insert without its outcome.
   */
  private async advanceIdle(transactions: BinlogTransactions): Promise<void> {
    const acknowledged = this.acknowledged;
    if (acknowledged === null || transactions.waiting > 0) return;
    if (compareBinlogPositions(acknowledged, transactions.handedPosition) < 0) return;
    if (compareBinlogPositions(transactions.readPosition, acknowledged) <= 0) return;
    if (Date.now() - this.lastAdvance < this.idleAdvanceMs) return;
    this.lastAdvance = Date.now();
    await this.record(transactions.readPosition);
  }

  private async record(position: BinlogPosition): Promise<void> {
    const known = this.acknowledged;
    if (known !== null && compareBinlogPositions(position, known) <= 0) return;
    await this.write(position);
    const latest = this.acknowledged;
    if (latest === null || compareBinlogPositions(position, latest) > 0) {
      this.acknowledged = position;
    }
  }

  private async write(
    position: BinlogPosition,
    how: 'advance' | 'reset' = 'advance',
  ): Promise<void> {
    const values = [position.file, position.offset, this.context.owner.slice(0, 128)];
    if (how === 'reset') {
      await this.context.sql.query(mysqlResetLogPosition(this.context.names), values);
      return;
    }
    const { affected } = await this.context.sql.query(
      mysqlAdvanceLogPosition(this.context.names),
      values,
    );
    if (affected === 0) {
      await this.context.sql.query(mysqlInsertLogPosition(this.context.names), values);
    }
  }

  private async schemaName(): Promise<string> {
    if (this.schema === null) {
      const { rows } = await this.context.sql.query<{ db: unknown }>('SELECT DATABASE() AS db');
      const db = rows[0]?.db;
      if (typeof db !== 'string') {
        throw new OutboxOptionsError(
          'Log tailing needs to know the outbox table’s database: connect with a default database, or set the `schema` option.',
          'schema',
        );
      }
      this.schema = db;
    }
    return this.schema;
  }

  /** Runs `work` on the lock's connection while this process reads, else on a short one. */
  private async withConnection<T>(work: (c: MysqlLockConnection) => Promise<T>): Promise<T> {
    const held = this.lock;
    if (held?.holding === true) return work(held.connection);
    const connection = await openLockConnection(this.settings.connection, {
      timeoutMs: this.timeoutMs,
    });
    try {
      return await work(connection);
    } finally {
      await connection.end().catch(() => connection.destroy());
    }
  }

  /** `database.table`, as the lines name the outbox table. */
  private tableLabel(): string {
    return `${this.schema ?? '?'}.${this.context.names.tableName}`;
  }

  /** A line at LOG level: what the reader does (reading, standing by). */
  private note(message: string): void {
    this.settings.logger?.log?.(message);
  }

  private warn(message: string): void {
    const now = Date.now();
    if (message === this.lastWarning.text && now - this.lastWarning.at < WARNING_QUIET_MS) return;
    this.lastWarning = { text: message, at: now };
    this.settings.logger?.warn(message);
  }
}

/** The MySQL/MariaDB binlog source of one outbox table (what `logTailing()` builds on MySQL). */
export function mysqlLogSource(
  context: OutboxLogSourceContext,
  settings: MysqlLogSourceSettings,
): MysqlBinlogSource {
  return new MysqlBinlogSource(context, settings);
}

/** The reader's lock is no longer its own (`reason` says how it learnt): reading stops. */
class LockLost extends Error {
  constructor(readonly reason: Error) {
    super(`binlog lock lost: ${reason.message}`);
  }
}

/** Resolves on `notify`, or after `ms`. */
class Wake {
  private resolve: (() => void) | null = null;
  private pending = false;

  notify(): void {
    this.pending = true;
    this.resolve?.();
  }

  async wait(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.resolve = resolve;
      timer = setTimeout(resolve, ms);
    });
    clearTimeout(timer);
    this.resolve = null;
    this.pending = false;
  }
}

/** Waits `ms`, or less once `signal` aborts. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return;
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  await new Promise<void>((resolve) => {
    onAbort = resolve;
    timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  clearTimeout(timer);
  if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
}

async function stopClient(client: BinlogClient): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 2_000);
    client.once('stopped', () => {
      clearTimeout(timer);
      resolve();
    });
    client.stop();
  });
}

/** The server's current binlog end (`SHOW MASTER STATUS`; MySQL 8.4 renamed it). */
async function binlogEnd(connection: MysqlLockConnection): Promise<BinlogPosition> {
  let rows: unknown;
  try {
    [rows] = await connection.query('SHOW MASTER STATUS');
  } catch {
    [rows] = await connection.query('SHOW BINARY LOG STATUS');
  }
  const row = (rows as { File?: unknown; Position?: unknown }[])[0];
  if (row === undefined || typeof row.File !== 'string') {
    throw new OutboxOptionsError(
      'SHOW MASTER STATUS answers no binlog file: the server writes no binlog. Set `log_bin = mysql-bin` under [mysqld] and restart.',
      'log_bin',
    );
  }
  return { file: row.File, offset: Number(row.Position) };
}

async function binaryLogs(connection: MysqlLockConnection): Promise<BinaryLogFile[]> {
  const [rows] = await connection.query('SHOW BINARY LOGS');
  return (rows as { Log_name: string; File_size: unknown }[]).map((row) => ({
    file: row.Log_name,
    size: Number(row.File_size),
  }));
}

function errnoOf(error: Error): number | undefined {
  const errno = (error as { errno?: unknown }).errno;
  return typeof errno === 'number' ? errno : undefined;
}

/** `root@localhost` as `'root'@'localhost'`, the form GRANT takes. */
function quotedUser(user: string): string {
  const at = user.lastIndexOf('@');
  return at < 0 ? `'${user}'` : `'${user.slice(0, at)}'@'${user.slice(at + 1)}'`;
}

/**
 * A replica id for one read session, from 1 000 000 000 up and new each time. The server lets one
 * session at a time read under an id: one that asks under an id in use waits until the server has
 * ended the other. It cannot end one whose client stopped reading (a frozen process, a link cut
 * without a close) while the binlog it sends fills the socket, until `net_write_timeout` (60 s
 * by default) passes, and a standby taking over from such a reader would wait that long. The
 * binlog lock, not the id, keeps one reader per table.
 */
function sessionServerId(): number {
  return 1_000_000_000 + randomInt(1_000_000_000);
}

function positive(value: number | undefined, fallback: number, option: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new OutboxOptionsError(
      `logTailing.${option} must be a positive integer, got ${String(value)}.`,
      `logTailing.${option}`,
    );
  }
  return value;
}
