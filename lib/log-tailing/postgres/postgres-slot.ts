import {
  OutboxReplicationSlotWaitError,
  type OutboxSlotBlocker,
} from '../../errors/outbox-replication-slot-wait.error';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  POSTGRES_CREATE_SLOT,
  POSTGRES_DROP_LOST_SLOT,
  POSTGRES_SLOT_BLOCKERS,
  POSTGRES_SLOT_STATUS,
} from './postgres-log-tailing.sql';
import { PostgresLogTailingMessages } from './postgres-log-tailing.messages';

/** SQLSTATE of a statement cancelled by `statement_timeout`. */
const QUERY_CANCELED = '57014';
/** SQLSTATE of "already exists": another instance made the slot first. */
const DUPLICATE_OBJECT = '42710';

/** What `ensureLogicalSlot` found: the slot there, made now, or made again after its loss. */
export type SlotOutcome = 'exists' | 'made' | 'remade';

/**
 * Makes the logical slot `slot` (pgoutput) unless it exists; drops and makes again a slot the
 * server invalidated (`wal_status` 'lost'), which can never be read again. PostgreSQL makes a
 * logical slot only once every transaction writing when it began has ended, so the wait is
 * bounded by `waitMs` (a `statement_timeout` in a transaction of its own; the function may run in
 * one that has not written) and ends in `OutboxReplicationSlotWaitError`, naming the oldest
 * sessions holding it up. `log` is told before the wait.
 */
export async function ensureLogicalSlot(
  sql: SqlPort,
  slot: string,
  waitMs: number,
  log: (message: string) => void,
): Promise<SlotOutcome> {
  const [found] = (await sql.query<{ wal_status: string | null }>(POSTGRES_SLOT_STATUS, [slot]))
    .rows;
  if (found !== undefined && found.wal_status !== 'lost') return 'exists';
  if (found !== undefined) await sql.query(POSTGRES_DROP_LOST_SLOT, [slot]);
  log(PostgresLogTailingMessages.makingSlot(slot, waitMs));
  const timeout = Math.max(1, Math.trunc(waitMs));
  try {
    await sql.transaction(async (tx) => {
      await tx.query(`SET LOCAL statement_timeout = ${timeout}`);
      await tx.query(POSTGRES_CREATE_SLOT, [slot]);
    });
  } catch (error) {
    const code = sqlState(error);
    if (code === DUPLICATE_OBJECT) return 'exists';
    if (code !== QUERY_CANCELED) throw error;
    const blockers = await slotBlockers(sql).catch((): OutboxSlotBlocker[] => []);
    throw new OutboxReplicationSlotWaitError(
      PostgresLogTailingMessages.slotWait(slot, timeout, blockers),
      slot,
      timeout,
      blockers,
      { cause: error },
    );
  }
  return found === undefined ? 'made' : 'remade';
}

async function slotBlockers(sql: SqlPort): Promise<OutboxSlotBlocker[]> {
  const { rows } = await sql.query<{
    pid: number | string;
    xact_start: string | null;
    usename: string | null;
    datname: string | null;
    application_name: string | null;
    state: string | null;
  }>(POSTGRES_SLOT_BLOCKERS);
  return rows.map((r) => ({
    pid: Number(r.pid),
    transactionStart: r.xact_start,
    user: r.usename,
    database: r.datname,
    applicationName: r.application_name,
    state: r.state,
  }));
}

/** The SQLSTATE of a driver's error, or of the ORM's error around it. */
export function sqlState(error: unknown): string | undefined {
  const e = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  const code = e?.code ?? e?.driverError?.code;
  return typeof code === 'string' ? code : undefined;
}
