/**
 * What the log-tailing scenarios (L1–L4) share: the databases with a log, the log objects of a
 * bench table (publication and slot on PostgreSQL, position table on MariaDB), the reader's
 * readiness, the server's log position, a prefill in small transactions, and a Nest logger that
 * counts the reader's reconnect lines.
 *
 * The slot of a bench table is named after the table (`bench_l1_log_r<pid>`), so the bench only
 * ever drops slots it made; `dropStaleRunObjects` drops those of killed runs.
 */
import type { LoggerService } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { LogTailingOptions } from '../../lib/log-tailing';
import {
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  postgresLogTailingDdl,
} from '../../lib/log-tailing';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  closeDataSource,
  ensureMariaDatabase,
  openMaria,
  quoteTable,
  seedOutbox,
} from './databases';
import { SERVICES } from './config';
import type { BenchContext, ScenarioResult } from './report';
import { sleep } from '../../test/support/wait-for';

export type LogDatabase = 'postgres' | 'mariadb';

export interface LogTarget {
  readonly name: LogDatabase;
  readonly ds: DataSource;
}

/**
 * PostgreSQL (when `wal_level = logical`) and MariaDB (when its binlog is on, in ROW format), the
 * rest noted as skipped in `result`. `BENCH_LOG_DATABASES=postgres` picks some.
 */
export async function openLogTargets(
  ctx: BenchContext,
  result: ScenarioResult,
): Promise<{ targets: LogTarget[]; close(): Promise<void> }> {
  const wanted = (process.env.BENCH_LOG_DATABASES ?? 'postgres,mariadb').split(',');
  const targets: LogTarget[] = [];
  let maria: DataSource | undefined;
  if (wanted.includes('postgres')) {
    if (ctx.pgSettings.walLevel === 'logical') targets.push({ name: 'postgres', ds: ctx.pg });
    else result.skipped.push(`PostgreSQL: wal_level is ${ctx.pgSettings.walLevel}, not logical`);
  }
  if (wanted.includes('mariadb')) {
    try {
      await ensureMariaDatabase();
      maria = await openMaria();
      const rows = await maria.query<{ Variable_name: string; Value: string }[]>(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format')",
      );
      const v = Object.fromEntries(rows.map((r) => [r.Variable_name, r.Value]));
      if (v.log_bin !== 'ON' || v.binlog_format !== 'ROW') {
        result.skipped.push(
          `MariaDB: log_bin ${v.log_bin}, binlog_format ${v.binlog_format} (needs ON, ROW)`,
        );
        await closeDataSource(maria);
        maria = undefined;
      } else targets.push({ name: 'mariadb', ds: maria });
    } catch (error) {
      result.skipped.push(`MariaDB: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return {
    targets,
    close: async () => {
      if (maria !== undefined) await closeDataSource(maria);
    },
  };
}

/** The slot and publication of a bench table: its own name, so no other slot is ever touched. */
export function postgresBenchLogNames(table: string): { slot: string; publication: string } {
  // Both end in the run's id (`_r<pid>`), as dropStaleRunObjects expects.
  return { slot: table, publication: table.replace(/^bench_/, 'bench_pub_') };
}

/** The `logTailing()` options of a bench table on `db`, with `extra` (the sweep) on top. */
export function benchLogOptions(
  db: LogDatabase,
  table: string,
  extra: Pick<LogTailingOptions, 'sweepIntervalMs'> = {},
): LogTailingOptions {
  if (db === 'mariadb') return { ...extra };
  const { slot, publication } = postgresBenchLogNames(table);
  return { slotName: slot, publicationName: publication, ...extra };
}

/** Makes the log objects of `table` as `outbox log setup` would (the slot: at the app's start). */
export async function setUpLog(target: LogTarget, table: string): Promise<void> {
  if (target.name === 'postgres') {
    const names = outboxTableNames(table, null, 'double');
    for (const s of postgresLogTailingDdl(names, postgresBenchLogNames(table).publication))
      await target.ds.query(s);
  } else {
    for (const s of mysqlLogTailingDdl(outboxTableNames(table, null, 'backtick')))
      await target.ds.query(s);
  }
}

/**
 * Drops the log objects of `table`: on PostgreSQL its own slot (once its reader let go of it) and
 * publication; on MariaDB the position table.
 */
export async function dropLog(target: LogTarget, table: string): Promise<void> {
  if (target.name === 'mariadb') {
    for (const s of mysqlLogTailingDrop(outboxTableNames(table, null, 'backtick')))
      await target.ds.query(s);
    return;
  }
  const { slot, publication } = postgresBenchLogNames(table);
  // A closed reader's server process ends a moment after its client.
  for (let i = 0; i < 150; i++) {
    const rows = await target.ds.query<{ active: boolean }[]>(
      'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    if (rows.every((r) => !r.active)) break;
    await sleep(100);
  }
  await target.ds.query(
    'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active',
    [slot],
  );
  await target.ds.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
}

/**
 * Resolves once a reader of `table` reads: the slot is held (PostgreSQL); the reader's lock is
 * held and its position stored (MariaDB: a first reader starts at the binlog's end, and rows
 * committed before are the poll's).
 */
export async function readerReady(
  target: LogTarget,
  table: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const { ds } = target;
  const ready = async (): Promise<boolean> => {
    if (target.name === 'postgres') {
      const rows = await ds.query<{ active: boolean }[]>(
        'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
        [postgresBenchLogNames(table).slot],
      );
      return rows[0]?.active === true;
    }
    // The lock's name as the reader makes it (database.table:log, short enough not to be hashed).
    const lock = await ds.query<{ holder: unknown }[]>('SELECT IS_USED_LOCK(?) AS holder', [
      `${SERVICES.mariadb.database}.${table}:log`,
    ]);
    if (lock[0]?.holder === null || lock[0]?.holder === undefined) return false;
    const rows = await ds.query<unknown[]>(
      `SELECT 1 FROM ${quoteTable(ds, `${table}_log_position`)} WHERE id = 1`,
    );
    return rows.length === 1;
  };
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`the log reader of ${table} did not start`);
    await sleep(50);
  }
}

/**
 * The server's log position in bytes: PostgreSQL's current WAL LSN; on MariaDB the sizes of
 * every binlog file by name (a difference of two is summed over the files, see
 * {@link logBytesBetween}). Both are the whole server's: other databases' writes count too.
 */
export type LogPosition = bigint | Map<string, number>;

export async function logPosition(target: LogTarget): Promise<LogPosition> {
  if (target.name === 'postgres') {
    const rows = await target.ds.query<{ b: string }[]>(
      "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS b",
    );
    return BigInt(rows[0]?.b ?? '0');
  }
  const rows =
    await target.ds.query<{ Log_name: string; File_size: string | number }[]>('SHOW BINARY LOGS');
  return new Map(rows.map((r) => [r.Log_name, Number(r.File_size)]));
}

export function logBytesBetween(before: LogPosition, after: LogPosition): number {
  if (typeof before === 'bigint' && typeof after === 'bigint') return Number(after - before);
  if (before instanceof Map && after instanceof Map) {
    let bytes = 0;
    for (const [file, size] of after) bytes += size - (before.get(file) ?? 0);
    return bytes;
  }
  throw new Error('log positions of different databases');
}

/**
 * `n` pending messages, a key per message (seq `from`…), 1 KiB JSON, committed in transactions of
 * `perTransaction`: a backlog the log carries as it carries writers' commits (one transaction of
 * more than `maxTransactionInserts` would be left to the table's sweep instead).
 */
export async function prefill(
  ds: DataSource,
  table: string,
  n: number,
  perTransaction = 100,
  from = 1,
): Promise<void> {
  for (let done = 0; done < n; done += perTransaction) {
    await seedOutbox(ds, table, Math.min(perTransaction, n - done), {
      from: from + done,
      keys: from + n + 1,
    });
  }
}

/** The reader's lines that mean it lost its link or its place and read again. */
const RECONNECT =
  /reconnect|Lost replication slot|Lost the binlog lock|made it again|could not be made again|taken over|purged/i;
/**
 * The reader's line at each start of reading (a second one within a run is a re-read); its
 * "Reading … failed, reconnecting" lines are reconnects, not starts.
 */
const READING = /^Reading (replication slot|the binlog of)(?!.* failed, reconnecting)/;

/**
 * A Nest logger that prints errors and warnings as the bench's apps do, and counts the log
 * reader's starts and reconnects (what L3 reports: whether the reader read the log again).
 */
export class ReaderLines implements LoggerService {
  reconnects: string[] = [];
  starts = 0;

  reset(): void {
    this.reconnects = [];
    this.starts = 0;
  }

  private see(message: unknown): void {
    const text = String(message);
    if (RECONNECT.test(text)) this.reconnects.push(text.slice(0, 300));
    if (READING.test(text)) this.starts++;
  }

  log(message: unknown): void {
    this.see(message);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.see(message);
    console.warn(message, ...rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.see(message);
    console.error(message, ...rest);
  }
  debug(): void {}
  verbose(): void {}
}
