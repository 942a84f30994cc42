import { Socket } from 'node:net';
import type { LogicalReplicationService, Pgoutput } from 'pg-logical-replication';
import type { ClientConfig } from 'pg';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { describeError } from '../../internal/describe-error';
import type {
  LoggedBatch,
  LoggedInsert,
  OutboxLogLag,
  OutboxLogSource,
  OutboxLogSourceContext,
} from '../../store/ports/outbox-log-source.port';
import {
  POSTGRES_LOG_SETTINGS,
  POSTGRES_PUBLICATION_STATUS,
  POSTGRES_SLOT_STATUS,
  postgresLogNames,
  postgresLogTailingDdl,
} from './postgres-log-tailing.sql';
import { OpenTransaction, overflowWarning } from '../open-transaction';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { compareLsn, lsnBefore } from './lsn';
import { PostgresLogTailingMessages as Messages } from './postgres-log-tailing.messages';
import { ensureLogicalSlot } from './postgres-slot';

/** What a PostgreSQL log source is built from, resolved by `logTailing()`. */
export interface PostgresLogSourceSettings {
  /** The publication on the outbox table (an identifier, validated). */
  readonly publication: string;
  /**
   * The logical replication slot; left out, `outbox_<database>_<schema>_<table>`
   * (postgresLogNames), found at `check()`.
   */
  readonly slot?: string;
  /** How to open the replication connection (never logged: it may hold a password). */
  readonly connection: ClientConfig;
  /**
   * How often a standby asks for the slot while another process reads it, and how often the
   * reader checks that the server still counts it as the slot's reader.
   */
  readonly standbyRetryMs: number;
  /**
   * The longest the reader waits for the server: its connect, its check that it still holds
   * the slot; TCP keep-alive starts after this much silence. The server ends a replication
   * session silent for `standbyRetryMs + readerTimeoutMs` (its `wal_sender_timeout`), so a
   * standby takes over from a reader cut off or frozen. @default 5000
   */
  readonly readerTimeoutMs?: number;
  /**
   * The longest making the slot waits for the write transactions open on the server before it
   * fails with `OutboxReplicationSlotWaitError`. @default 10000
   */
  readonly createSlotTimeoutMs?: number;
  /**
   * Most inserts received and not yet handed over before the source stops reading to let the
   * dispatcher catch up (it reconnects from the acknowledged position afterwards).
   */
  readonly maxQueued: number;
  /** Most inserts of one transaction kept in memory; past it the table's sweep has them all. */
  readonly maxTransactionInserts: number;
  /** Logs a line (the dispatcher's log). */
  readonly log: (level: 'log' | 'warn', message: string) => void;
}

/** PostgreSQL's SQLSTATE for "object in use": the slot is read by another process. */
const OBJECT_IN_USE = '55006';
const DEFAULT_READER_TIMEOUT_MS = 5_000;
const DEFAULT_CREATE_SLOT_TIMEOUT_MS = 10_000;
/** A warning that repeats word for word is written at most this often. */
const REPEAT_WARNING_MS = 60_000;
/**
 * Acknowledgements asked for closer together than this are sent as one, at its end: the
 * dispatcher acknowledges each handover, and under many small commits (bench L3: 8 writers, a
 * few hundred commits a second) a status update per handover was half of what the reader's
 * handling cost in the dispatcher, besides the walsender's work on each. The position only
 * bounds what a restart reads again, which the table makes harmless; a stop sends what is due.
 */
const ACKNOWLEDGE_EVERY_MS = 50;

/** A committed transaction of the outbox table, as it came off the stream. */
interface Committed {
  readonly inserts: LoggedInsert[];
  readonly leftToTable: number;
  readonly position: string;
}

/**
 * Reads the outbox table's inserts from PostgreSQL's logical replication (`pgoutput`, through
 * `pg-logical-replication`), one slot per outbox table. Nothing is acknowledged by the client
 * library on its own (its auto-acknowledge and its timer, which confirm the last LSN *received*,
 * are both off): the slot's confirmed position moves only through `acknowledge`, which the
 * dispatcher calls once every insert up to it has its outcome in the table, and through the
 * answer to a keepalive while nothing received is outstanding (so that an idle outbox on a busy
 * server does not keep WAL for nothing).
 */
export class PostgresLogSource implements OutboxLogSource {
  private service: LogicalReplicationService | undefined;
  /** The last position handed to `acknowledge` (or the keepalive's, when idle). */
  private acked = '0/0';
  /** Received and not yet acknowledged: transactions queued, or being handed over. */
  /**
   * The commit positions received and not yet acknowledged, oldest first: a keepalive may move
   * the position past them only once there are none (the dispatcher settles batches side by
   * side and acknowledges after; handed over is not done).
   */
  private readonly outstanding: string[] = [];
  /** When the last status update went (monotonic clock), and the one waiting to go. */
  private acknowledgedAt = -Infinity;
  private acknowledgeTimer: NodeJS.Timeout | undefined;
  private active = false;
  /** The server process streaming the slot to this source (learnt after each start). */
  private readerPid: number | undefined;
  /** The slot's name, from the settings or (at `check()`) the database's default. */
  private slotName: string | undefined;
  /** Times the slot was found gone or invalidated (`OutboxLogLag.positionLosses`). */
  private losses = 0;
  /** Since when the slot is gone and not made again, and why; undefined while it is there. */
  private lost: { readonly reason: string; problem: string } | undefined;
  /** The last warning written, when, and how many like it were held back since. */
  private lastWarning: { text: string; at: number; held: number } | undefined;

  constructor(
    private readonly context: OutboxLogSourceContext,
    private readonly settings: PostgresLogSourceSettings,
  ) {}

  async check(): Promise<void> {
    // A missing package fails the start here rather than the first read.
    await loadLogicalReplication();
    const { sql, names } = this.context;
    const { publication } = this.settings;
    const [settings] = (
      await sql.query<{
        wal_level: string;
        database_name: string;
        can_replicate: boolean | null;
        role_name: string;
      }>(POSTGRES_LOG_SETTINGS)
    ).rows;
    if (settings?.wal_level !== 'logical') {
      throw new OutboxOptionsError(
        `Log tailing needs wal_level = logical, and the server has wal_level = ${settings?.wal_level ?? 'unknown'}. Set it (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL; on Amazon RDS/Aurora set the parameter rds.logical_replication = 1, on Cloud SQL the flag cloudsql.logical_decoding = on), or use delivery: 'poll'. See docs/log-tailing.md.`,
        'delivery',
      );
    }
    if (settings.can_replicate !== true) {
      throw new OutboxOptionsError(
        `Log tailing needs a role with the REPLICATION attribute, and ${settings.role_name} has none. Run ALTER ROLE ${settings.role_name} WITH REPLICATION (on RDS: GRANT rds_replication TO ${settings.role_name}; on Cloud SQL: ALTER USER ${settings.role_name} WITH REPLICATION), or give logTailing({ connectionString }) a role that has it. See docs/log-tailing.md.`,
        'delivery',
      );
    }
    const schema = names.schema ?? 'public';
    const slot =
      this.settings.slot ?? postgresLogNames(schema, names.tableName, settings.database_name).slot;
    this.slotName = slot;
    const [found] = (
      await sql.query<{ pubinsert: boolean; covers: boolean }>(POSTGRES_PUBLICATION_STATUS, [
        publication,
        schema,
        names.tableName,
      ])
    ).rows;
    if (found?.covers !== true || !found.pubinsert) {
      throw new OutboxOptionsError(
        `Log tailing reads the publication ${publication}, which ${found === undefined ? 'does not exist' : 'does not publish the inserts of ' + names.table}. Run "${logSetupCommand(names, publication, settings.database_name)}" with DATABASE_URL set, or add logTailingMigration(${logMigrationArgs(names, publication, settings.database_name)}) to the DataSource's migrations, or run this SQL: ${postgresLogTailingDdl(names, publication).join('; ')}`,
        'delivery',
      );
    }
    // The slot is made here, before the first read, so that WAL is kept from now on: what
    // commits between this check and the first read is read, not left to the poll alone.
    await ensureLogicalSlot(sql, slot, this.createSlotTimeoutMs, (line) =>
      this.settings.log('log', line),
    );
  }

  private get readerTimeoutMs(): number {
    return this.settings.readerTimeoutMs ?? DEFAULT_READER_TIMEOUT_MS;
  }

  private get createSlotTimeoutMs(): number {
    return this.settings.createSlotTimeoutMs ?? DEFAULT_CREATE_SLOT_TIMEOUT_MS;
  }

  /** Whether this process reads the slot now; the context hears of each change. */
  private setActive(active: boolean): void {
    if (this.active === active) return;
    this.active = active;
    this.context.reading?.(active);
  }

  /** The slot's name; known once `check()` ran. */
  get slot(): string {
    if (this.slotName === undefined) throw new Error('PostgresLogSource: check() has not run');
    return this.slotName;
  }

  async run(onBatch: (batch: LoggedBatch) => Promise<void>, signal: AbortSignal): Promise<void> {
    let standingBy = false;
    while (!signal.aborted) {
      const ended = await this.readOnce(onBatch, signal).then(
        () => undefined,
        (error: unknown) => error,
      );
      this.setActive(false);
      if (signal.aborted) break;
      const code = (ended as { code?: unknown } | undefined)?.code;
      if (code === OBJECT_IN_USE) {
        if (!standingBy) {
          this.settings.log(
            'log',
            `Replication slot ${this.slot} is read by another process: standing by, asking every ${this.settings.standbyRetryMs} ms`,
          );
        }
        standingBy = true;
      } else if (ended !== undefined) {
        standingBy = false;
        const remade = await this.remakeLostSlot(signal);
        if (remade) continue;
        if (this.lost === undefined) {
          this.warn(
            Messages.readFailed(this.slot, this.settings.standbyRetryMs, describeError(ended)),
          );
        }
      }
      await sleep(this.settings.standbyRetryMs, signal);
    }
  }

  /**
   * After a read failed: when the slot is gone (dropped: `outbox log drop`, a failover, an
   * operator) or invalidated by the server (`max_slot_wal_keep_size`), makes it again and
   * answers true, so the reader reconnects at once. The new slot starts at the server's current
   * WAL position: what was committed while the slot was gone is never read from the log, but
   * each such row is `pending` in the table (a row leaves that state only through a recorded
   * outcome), so the sweep, which selects by state, delivers it; a key's later rows that the
   * log names wait behind it (claimIds leases only a key's head). Nothing is lost, only later.
   */
  private async remakeLostSlot(signal: AbortSignal): Promise<boolean> {
    const slot = this.slot;
    let found: { wal_status: string | null } | undefined;
    try {
      [found] = (
        await within(
          this.context.sql.query<{ wal_status: string | null }>(POSTGRES_SLOT_STATUS, [slot]),
          this.readerTimeoutMs,
        )
      ).rows;
    } catch {
      return false;
    }
    if (found !== undefined && found.wal_status !== 'lost') return false;
    if (this.lost === undefined) {
      this.losses++;
      const reason =
        found === undefined
          ? 'dropped'
          : 'invalidated by the server (it kept more WAL than max_slot_wal_keep_size allows)';
      this.lost = { reason, problem: `replication slot ${slot} was ${reason}` };
    }
    const { reason } = this.lost;
    try {
      await untilAborted(
        ensureLogicalSlot(this.context.sql, slot, this.createSlotTimeoutMs, (line) =>
          this.settings.log('log', line),
        ),
        signal,
      );
    } catch (error) {
      this.lost.problem = `replication slot ${slot} was ${reason} and could not be made again: ${describeError(error)}`;
      this.warn(Messages.slotNotRemade(slot, reason, describeError(error)));
      return false;
    }
    if (signal.aborted) return false;
    this.lost = undefined;
    this.lastWarning = undefined;
    this.settings.log('warn', Messages.slotLost(slot, reason));
    return true;
  }

  /**
   * A warning, written at once when it is new and at most once a minute while it repeats word
   * for word (a reader retrying every standbyRetryMs would write 86 400 lines a day).
   */
  private warn(text: string): void {
    const now = Date.now();
    const last = this.lastWarning;
    if (last !== undefined && last.text === text && now - last.at < REPEAT_WARNING_MS) {
      last.held++;
      return;
    }
    const held = last?.text === text ? last.held : 0;
    this.lastWarning = { text, at: now, held: 0 };
    this.settings.log('warn', held === 0 ? text : Messages.repeated(text, held));
  }

  async acknowledge(position: string): Promise<void> {
    if (compareLsn(position, this.acked) > 0) this.acked = position;
    let done = 0;
    while (
      done < this.outstanding.length &&
      compareLsn(this.outstanding[done] ?? '', position) <= 0
    ) {
      done++;
    }
    this.outstanding.splice(0, done);
    if (this.acknowledgeTimer !== undefined) return;
    const waitMs = this.acknowledgedAt + ACKNOWLEDGE_EVERY_MS - performance.now();
    if (waitMs <= 0) {
      await this.sendAcknowledgement();
      return;
    }
    this.acknowledgeTimer = setTimeout(() => {
      this.sendAcknowledgement().catch(() => undefined);
    }, waitMs);
  }

  /**
   * Sends the position acknowledged so far now (the one waiting, if any): the library writes it
   * to the stream before it returns, so a stop that follows goes after it.
   */
  private async sendAcknowledgement(): Promise<void> {
    clearTimeout(this.acknowledgeTimer);
    this.acknowledgeTimer = undefined;
    this.acknowledgedAt = performance.now();
    await this.service?.acknowledge(lsnBefore(this.acked));
  }

  async lag(): Promise<OutboxLogLag> {
    const [row] = (
      await this.context.sql.query<{
        retained_bytes: number | null;
        wal_status: string | null;
        active_pid: number | null;
      }>(POSTGRES_SLOT_STATUS, [this.slot])
    ).rows;
    // Active only while the server agrees: a reader cut off keeps its socket until it notices,
    // and the server may already have given the slot to a standby.
    const active =
      this.active && row?.active_pid != null && Number(row.active_pid) === this.readerPid;
    const problem =
      this.lost?.problem ??
      (row === undefined
        ? `replication slot ${this.slot} does not exist`
        : row.wal_status === 'lost'
          ? `replication slot ${this.slot} was invalidated by the server (max_slot_wal_keep_size)`
          : null);
    return {
      retainedBytes: row?.retained_bytes ?? null,
      active,
      positionLosses: this.losses,
      problem,
    };
  }

  /**
   * One replication connection: reads until it ends (an error, another reader, a stop) and
   * hands the committed transactions over in order. Rejects with the connection's error.
   */
  private async readOnce(
    onBatch: (batch: LoggedBatch) => Promise<void>,
    signal: AbortSignal,
  ): Promise<void> {
    const { publication, maxQueued, standbyRetryMs } = this.settings;
    const slot = this.slot;
    const timeoutMs = this.readerTimeoutMs;
    const { LogicalReplicationService, PgoutputPlugin } = await loadLogicalReplication();
    // The socket is ours so that a stop can close it in any state: node-postgres never settles
    // a connect that its own end() interrupts, and its end() waits for the server's goodbye.
    let socket: Socket | undefined;
    const connection: ClientConfig = {
      ...this.settings.connection,
      stream: () => {
        socket = new Socket();
        return socket;
      },
      keepAlive: true,
      keepAliveInitialDelayMillis: timeoutMs,
      connectionTimeoutMillis: timeoutMs,
      fallback_application_name: 'nestjs-outbox log reader',
      // The server ends this session when it has not heard from it for this long (the reader
      // answers its keepalives at once): the slot of a reader cut off or frozen goes to a standby.
      options: `-c wal_sender_timeout=${standbyRetryMs + timeoutMs}`,
    };
    const service = new LogicalReplicationService(connection, {
      // Both off: the library would otherwise confirm every LSN it received, handled or not.
      acknowledge: { auto: false, timeoutSeconds: 0 },
      flowControl: { enabled: false },
    });
    this.service = service;
    const queue: Committed[] = [];
    let queued = 0;
    let open: OpenTransaction | undefined;
    /** The open transaction's commit time (ms, the server's clock), from its BEGIN. */
    let committedAtMs = 0;
    let failure: unknown;
    let wake: (() => void) | undefined;
    let overflowing = false;
    const notify = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    let stopped: (() => void) | undefined;
    const ended = new Promise<void>((resolve) => (stopped = resolve));
    const stop = () => {
      this.setActive(false);
      // What was acknowledged and is waiting to go is sent first: a graceful stop leaves the
      // slot where the dispatcher's outcomes are.
      if (this.acknowledgeTimer !== undefined) this.sendAcknowledgement().catch(() => undefined);
      void service.stop().catch(() => undefined);
      socket?.destroy();
      stopped?.();
      notify();
    };
    const { schema, tableName } = this.context.names;
    const table = { schema: schema ?? 'public', name: tableName };
    const transaction = new OpenTransaction(this.settings.maxTransactionInserts, (soFar) =>
      this.settings.log(
        'warn',
        overflowWarning(this.context.names.table, this.settings.maxTransactionInserts, soFar),
      ),
    );
    // Messages arrive in order on one socket and are handled here synchronously, so a keepalive
    // is seen after every transaction sent before it.
    service.on('data', (_lsn: string, message: Pgoutput.Message) => {
      if (message.tag === 'begin') {
        open = transaction;
        open.begin();
        committedAtMs = Number(message.commitTime.valueOf() / 1000n);
      } else if (message.tag === 'insert' && open !== undefined) {
        const { relation } = message;
        if (relation.schema !== table.schema || relation.name !== table.name) return;
        const row = message.new as { id?: unknown; message_key?: unknown; available_at?: unknown };
        const dueAtMs = timeOf(row.available_at);
        open.add({
          id: String(row.id),
          key: typeof row.message_key === 'string' ? row.message_key : null,
          ...(dueAtMs !== undefined && { dueInMs: dueAtMs - committedAtMs }),
        });
      } else if (message.tag === 'commit') {
        const { inserts, leftToTable } = open?.end() ?? { inserts: [], leftToTable: 0 };
        open = undefined;
        if (message.commitEndLsn === null) return;
        queue.push({ inserts, leftToTable, position: message.commitEndLsn });
        queued += inserts.length;
        this.outstanding.push(message.commitEndLsn);
        // Too much received and not handed over: stop reading, hand over what came, and read
        // the rest again from the acknowledged position (a replay the lease by id makes harmless).
        if (queued > maxQueued && !overflowing) {
          overflowing = true;
          stop();
        }
        notify();
      }
    });
    service.on('heartbeat', (lsn: string, _time: number, shouldRespond: boolean) => {
      // Idle: everything sent before this keepalive is handled, so its position is too.
      const idle = this.outstanding.length === 0 && open === undefined && queue.length === 0;
      if (idle && compareLsn(lsn, this.acked) > 0) this.acked = lsn;
      if (idle || shouldRespond)
        void service.acknowledge(lsnBefore(this.acked)).catch(() => undefined);
    });
    service.on('error', (error: Error) => {
      failure ??= error;
      stop();
    });
    // Whether the server still counts this connection as the slot's reader: the first answer
    // after the start names this reader's server process; an answer naming another (or none),
    // or no answer within readerTimeoutMs, means the stream is dead or the slot was taken over
    // (a cut the socket has not noticed): stop, and ask for the slot again.
    let checking: NodeJS.Timeout | undefined;
    let inCheck = false;
    const check = async () => {
      if (inCheck || !this.active) return;
      inCheck = true;
      try {
        const [row] = (
          await within(
            this.context.sql.query<{ active_pid: number | null }>(POSTGRES_SLOT_STATUS, [slot]),
            timeoutMs,
          )
        ).rows;
        const pid = row?.active_pid == null ? undefined : Number(row.active_pid);
        if (!this.active) return;
        if (this.readerPid === undefined && pid !== undefined) this.readerPid = pid;
        else if (pid === undefined || pid !== this.readerPid) {
          this.warn(
            Messages.readerLost(
              slot,
              pid === undefined
                ? 'the server no longer counts a reader on it (the connection was cut or the slot dropped)'
                : `another process (server pid ${pid}) reads it now`,
            ),
          );
          stop();
        }
      } catch (error) {
        if (!this.active) return;
        this.warn(
          Messages.readerLost(
            slot,
            `checking that this process still reads it failed: ${describeError(error)}`,
          ),
        );
        stop();
      } finally {
        inCheck = false;
      }
    };
    service.on('start', () => {
      // Stopped while connecting: the library had no connection to end then; end it now, or
      // it would hold the slot from the standbys.
      if (signal.aborted) {
        stop();
        return;
      }
      this.setActive(true);
      this.readerPid = undefined;
      this.settings.log('log', `Reading replication slot ${slot} (publication ${publication})`);
      checking ??= setInterval(() => void check(), standbyRetryMs);
      void check();
    });
    signal.addEventListener('abort', stop, { once: true });
    if (signal.aborted) stop();
    this.outstanding.length = 0;
    // Hands the queue over, oldest first, merged into batches: one lease and settle for many
    // small transactions. Runs until the stream ended and the queue is empty.
    let streaming = true;
    const handing = (async () => {
      while (streaming || queue.length > 0) {
        if (queue.length === 0) {
          await new Promise<void>((resolve) => (wake = resolve));
          continue;
        }
        if (signal.aborted) return;
        const taken = queue.splice(0, queue.length);
        const inserts = taken.flatMap((t) => t.inserts);
        const leftToTable = taken.reduce((n, t) => n + t.leftToTable, 0);
        queued -= inserts.length;
        const last = taken[taken.length - 1];
        if (last === undefined) continue;
        await onBatch({ inserts, leftToTable, position: last.position });
      }
    })();
    try {
      // '0/0': from the slot's confirmed position, never from a position this process believes.
      // Raced with the stop: a connect it interrupted never settles.
      await Promise.race([
        service.subscribe(
          new PgoutputPlugin({ protoVersion: 1, publicationNames: [publication] }),
          slot,
          '0/0',
        ),
        ended,
      ]);
    } catch (error) {
      failure ??= error;
    } finally {
      clearInterval(checking);
      signal.removeEventListener('abort', stop);
      streaming = false;
      this.setActive(false);
      notify();
      await handing;
      socket?.destroy();
      await service.stop().catch(() => undefined);
      if (this.service === service) this.service = undefined;
    }
    if (failure !== undefined && !signal.aborted) {
      throw failure instanceof Error ? failure : new Error(describeError(failure));
    }
  }
}

/** A `timestamptz` column as the decoder gives it (a Date, or text), in ms; undefined if absent. */
function timeOf(value: unknown): number | undefined {
  if (value instanceof Date) return value.getTime();
  if (typeof value !== 'string') return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

/** `work`, or a rejection once `ms` passed without its answer. */
function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** `work`, or undefined as soon as `signal` aborts (`work` goes on, its answer unused). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.resolve(undefined);
  }
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  return Promise.race([work, aborted]).finally(() => {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

type LogicalReplicationModule = typeof import('pg-logical-replication');
let logicalReplication: Promise<LogicalReplicationModule> | undefined;

/**
 * `pg-logical-replication` (and `pg` under it), loaded when a PostgreSQL source first checks or
 * reads rather than by the entry point: an app on MySQL/MariaDB imports `logTailing` too, and
 * has neither package.
 */
function loadLogicalReplication(): Promise<LogicalReplicationModule> {
  logicalReplication ??= import('pg-logical-replication').catch((error: unknown) => {
    logicalReplication = undefined;
    throw new OutboxOptionsError(
      `Log tailing on PostgreSQL reads logical replication with pg-logical-replication, which could not be loaded (${describeError(error)}). Install it: npm install pg-logical-replication`,
      'delivery',
    );
  });
  return logicalReplication;
}

/** What differs from the defaults for this table and publication: the fix's flags and options. */
function nonDefaults(
  names: OutboxTableNames,
  publication: string,
  database: string,
): { table?: string; schema?: string; publication?: string } {
  const byDefault = postgresLogNames(names.schema ?? 'public', names.tableName, database);
  return {
    ...(names.tableName === 'outbox' ? {} : { table: names.tableName }),
    ...(names.schema === null ? {} : { schema: names.schema }),
    ...(publication === byDefault.publication ? {} : { publication }),
  };
}

/** The `outbox log setup` command for this table and publication (flags only where not the default). */
function logSetupCommand(names: OutboxTableNames, publication: string, database: string): string {
  const set = nonDefaults(names, publication, database);
  return ['npx outbox log setup', ...Object.entries(set).map(([flag, v]) => `--${flag} ${v}`)].join(
    ' ',
  );
}

/** `logTailingMigration()`'s options for this table and publication, as code. */
function logMigrationArgs(names: OutboxTableNames, publication: string, database: string): string {
  const { table, schema, publication: named } = nonDefaults(names, publication, database);
  const fields = [
    ...(table === undefined ? [] : [`tableName: '${table}'`]),
    ...(schema === undefined ? [] : [`schema: '${schema}'`]),
    ...(named === undefined ? [] : [`publicationName: '${named}'`]),
  ];
  return fields.length === 0 ? '' : `{ ${fields.join(', ')} }`;
}
