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
  POSTGRES_CREATE_SLOT,
  POSTGRES_LOG_SETTINGS,
  POSTGRES_PUBLICATION_STATUS,
  POSTGRES_SLOT_STATUS,
  postgresLogNames,
  postgresLogTailingDdl,
} from '../../store/postgres/postgres.log-tailing-sql';
import { OpenTransaction, overflowWarning } from '../open-transaction';
import { compareLsn, lsnBefore } from './lsn';

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
  /** How often a standby asks for the slot while another process reads it. */
  readonly standbyRetryMs: number;
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
  private outstanding = 0;
  private active = false;
  /** The slot's name, from the settings or (at `check()`) the database's default. */
  private slotName: string | undefined;

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
        `Log tailing needs wal_level = logical, and the server has wal_level = ${settings?.wal_level ?? 'unknown'}. Set it (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL; on Amazon RDS/Aurora set the parameter rds.logical_replication = 1, on Cloud SQL the flag cloudsql.logical_decoding = on), or use dispatcher.observe: 'poll'. See docs/log-tailing.md.`,
        'dispatcher.observe',
      );
    }
    if (settings.can_replicate !== true) {
      throw new OutboxOptionsError(
        `Log tailing needs a role with the REPLICATION attribute, and ${settings.role_name} has none. Run ALTER ROLE ${settings.role_name} WITH REPLICATION (on RDS: GRANT rds_replication TO ${settings.role_name}; on Cloud SQL: ALTER USER ${settings.role_name} WITH REPLICATION), or give logTailing({ connectionString }) a role that has it. See docs/log-tailing.md.`,
        'dispatcher.observe',
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
        `Log tailing reads the publication ${publication}, which ${found === undefined ? 'does not exist' : 'does not publish the inserts of ' + names.table}. Run \`outbox schema migrate --log-tailing\` (or \`outbox log setup\`), or this SQL: ${postgresLogTailingDdl(names, publication).join('; ')}`,
        'dispatcher.observe',
      );
    }
    // The slot is made here, before the first read, so that WAL is kept from now on: what
    // commits between this check and the first read is read, not left to the poll alone.
    await sql.query(POSTGRES_CREATE_SLOT, [slot]);
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
      this.active = false;
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
        this.settings.log(
          'warn',
          `Reading replication slot ${this.slot} failed, reconnecting in ${this.settings.standbyRetryMs} ms: ${describeError(ended)}`,
        );
      }
      await sleep(this.settings.standbyRetryMs, signal);
    }
  }

  async acknowledge(position: string): Promise<void> {
    if (compareLsn(position, this.acked) > 0) this.acked = position;
    await this.service?.acknowledge(lsnBefore(this.acked));
  }

  async lag(): Promise<OutboxLogLag> {
    const [row] = (
      await this.context.sql.query<{ retained_bytes: number | null }>(POSTGRES_SLOT_STATUS, [
        this.slot,
      ])
    ).rows;
    return { retainedBytes: row?.retained_bytes ?? null, active: this.active };
  }

  /**
   * One replication connection: reads until it ends (an error, another reader, a stop) and
   * hands the committed transactions over in order. Rejects with the connection's error.
   */
  private async readOnce(
    onBatch: (batch: LoggedBatch) => Promise<void>,
    signal: AbortSignal,
  ): Promise<void> {
    const { publication, connection, maxQueued } = this.settings;
    const slot = this.slot;
    const { LogicalReplicationService, PgoutputPlugin } = await loadLogicalReplication();
    const service = new LogicalReplicationService(connection, {
      // Both off: the library would otherwise confirm every LSN it received, handled or not.
      acknowledge: { auto: false, timeoutSeconds: 0 },
      flowControl: { enabled: false },
    });
    this.service = service;
    const queue: Committed[] = [];
    let queued = 0;
    let open: OpenTransaction | undefined;
    let failure: unknown;
    let wake: (() => void) | undefined;
    let overflowing = false;
    const notify = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const stop = () => {
      void service.stop();
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
      } else if (message.tag === 'insert' && open !== undefined) {
        const { relation } = message;
        if (relation.schema !== table.schema || relation.name !== table.name) return;
        const row = message.new as { id?: unknown; message_key?: unknown };
        open.add({
          id: String(row.id),
          key: typeof row.message_key === 'string' ? row.message_key : null,
        });
      } else if (message.tag === 'commit') {
        const { inserts, leftToTable } = open?.end() ?? { inserts: [], leftToTable: 0 };
        open = undefined;
        if (message.commitEndLsn === null) return;
        queue.push({ inserts, leftToTable, position: message.commitEndLsn });
        queued += inserts.length;
        this.outstanding++;
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
      const idle = this.outstanding === 0 && open === undefined && queue.length === 0;
      if (idle && compareLsn(lsn, this.acked) > 0) this.acked = lsn;
      if (idle || shouldRespond)
        void service.acknowledge(lsnBefore(this.acked)).catch(() => undefined);
    });
    service.on('error', (error: Error) => {
      failure ??= error;
      stop();
    });
    service.on('start', () => {
      // Stopped while connecting: the library had no connection to end then; end it now, or
      // it would hold the slot from the standbys.
      if (signal.aborted) {
        stop();
        return;
      }
      this.active = true;
      this.settings.log('log', `Reading replication slot ${slot} (publication ${publication})`);
    });
    signal.addEventListener('abort', stop, { once: true });
    this.outstanding = 0;
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
        this.outstanding -= taken.length;
      }
    })();
    try {
      // '0/0': from the slot's confirmed position, never from a position this process believes.
      await service.subscribe(
        new PgoutputPlugin({ protoVersion: 1, publicationNames: [publication] }),
        slot,
        '0/0',
      );
    } catch (error) {
      failure ??= error;
    } finally {
      signal.removeEventListener('abort', stop);
      streaming = false;
      notify();
      await handing;
      await service.stop().catch(() => undefined);
      if (this.service === service) this.service = undefined;
    }
    if (failure !== undefined && !signal.aborted) {
      throw failure instanceof Error ? failure : new Error(describeError(failure));
    }
  }
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
      'dispatcher.observe',
    );
  });
  return logicalReplication;
}
