import { outboxTableNames, type OutboxTableNames } from '../../internal/sql-identifier';
import {
  POSTGRES_DROP_SLOT,
  POSTGRES_PUBLICATION_STATUS,
  POSTGRES_SLOT_STATUS,
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
  type PostgresLogNames,
} from '../../log-tailing/postgres/postgres-log-tailing.sql';
import { retainedBinlogBytes } from '../../log-tailing/mysql/mysql-binlog-position';
import {
  mysqlLogLockName,
  mysqlLogPositionTable,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  mysqlLogPositionStatus,
} from '../../log-tailing/mysql/mysql-log-tailing.sql';
import type { SqlPort } from '../../store/ports/sql-port';
import { ensureLogicalSlot } from '../../log-tailing/postgres/postgres-slot';
import type { CliArgs } from './cli-args';
import { CliUsageError } from './cli-usage.error';
import type { CliDatabase } from './database-url';

// The `outbox log …` commands and `schema migrate --log-tailing` (docs/log-tailing.md): the
// publication and replication slot of PostgreSQL log tailing, the binlog position table of
// MySQL/MariaDB's. Apart from outbox-cli.ts, which only routes to them.

/** What one of these commands prints. */
export interface LogCliResult {
  readonly text: string;
  readonly json: unknown;
  readonly exitCode?: number;
}

/** The slot and publication the command means: the options', else the table's defaults. */
async function logNames(args: CliArgs, sql: SqlPort): Promise<PostgresLogNames> {
  // The slot's default name holds the database (slots are per server, publications per database).
  const [row] = (await sql.query<{ db: string }>('SELECT current_database() AS db')).rows;
  const defaults = postgresLogNames(args.schema ?? 'public', args.table, row?.db ?? '');
  return {
    slot: args.slot ?? defaults.slot,
    publication: args.publication ?? defaults.publication,
  };
}

/** MySQL/MariaDB keeps no slot or publication: their options would be silently ignored. */
function refusePostgresOptions(args: CliArgs, command: string): void {
  const given =
    args.slot !== undefined ? '--slot' : args.publication !== undefined ? '--publication' : null;
  if (given !== null) {
    throw new CliUsageError(
      `"outbox ${command}" ${given} is for PostgreSQL (DATABASE_URL names MySQL/MariaDB, whose binlog needs no slot or publication). Leave it out.`,
    );
  }
}

/** The table's names on MySQL/MariaDB, and its database (part of the reader's lock name). */
async function mysqlNames(
  args: CliArgs,
  sql: SqlPort,
  command: string,
): Promise<{ names: OutboxTableNames; database: string }> {
  refusePostgresOptions(args, command);
  const names = outboxTableNames(args.table, args.schema, 'backtick');
  const [row] = (await sql.query<{ db: string | null }>('SELECT DATABASE() AS db')).rows;
  return { names, database: args.schema ?? row?.db ?? '' };
}

/** How long `outbox log setup` waits for the server's open write transactions to make the slot. */
const SETUP_SLOT_WAIT_MS = 60_000;

/**
 * Creates the publication of the outbox table's inserts (or adds the table to it), checks that
 * it now covers the table, and makes the replication slot (idempotent), so that the app's first
 * start neither waits for the server's open transactions nor fails its readiness probe.
 */
export async function logSetup(
  args: CliArgs,
  db: CliDatabase,
  sql: SqlPort,
): Promise<LogCliResult> {
  if (db.dialect === 'mysql') return mysqlLogSetup(args, sql);
  sqliteRefused(db, 'log setup');
  const { publication, slot } = await logNames(args, sql);
  const names = outboxTableNames(args.table, args.schema, 'double');
  for (const statement of postgresLogTailingDdl(names, publication)) await sql.query(statement);
  // Checked after the DDL, as the app checks it: a publication of this name made by hand may
  // publish no inserts, and only this query says what the server will send.
  const [pub] = (
    await sql.query<{ covers: boolean; pubinsert: boolean }>(POSTGRES_PUBLICATION_STATUS, [
      publication,
      args.schema ?? 'public',
      args.table,
    ])
  ).rows;
  if (pub?.covers !== true || !pub.pubinsert) {
    return {
      text: `Publication ${publication} ${pub === undefined ? 'could not be made' : pub.covers ? 'covers ' + names.table + ' but does not publish inserts' : 'still does not cover ' + names.table} after "outbox log setup". Check it (SELECT * FROM pg_publication_tables WHERE pubname = '${publication}'), or drop it (outbox log drop --yes) and run "outbox log setup" again.`,
      json: { publication, table: names.table, covered: false },
      exitCode: 1,
    };
  }
  const made = await ensureLogicalSlot(sql, slot, SETUP_SLOT_WAIT_MS, () => undefined);
  const slotLine =
    made === 'exists'
      ? `Replication slot ${slot} was already there.`
      : `Made replication slot ${slot}: from now on the server keeps WAL for it until an app reads it (an unread slot fills the disk: "outbox log status", "outbox log drop").`;
  return {
    text: `Publication ${publication} publishes the inserts of ${names.table}. ${slotLine}`,
    json: { publication, table: names.table, covered: true, slot, slotMade: made !== 'exists' },
  };
}

/** The slot's state and the WAL it keeps, and whether the publication is there. */
export async function logStatus(
  args: CliArgs,
  db: CliDatabase,
  sql: SqlPort,
): Promise<LogCliResult> {
  if (db.dialect === 'mysql') return mysqlLogStatus(args, sql);
  sqliteRefused(db, 'log status');
  const { slot, publication } = await logNames(args, sql);
  const [row] = (
    await sql.query<{
      active: boolean;
      confirmed_flush_lsn: string | null;
      retained_bytes: number | null;
    }>(POSTGRES_SLOT_STATUS, [slot])
  ).rows;
  const [pub] = (
    await sql.query<{ covers: boolean }>(POSTGRES_PUBLICATION_STATUS, [
      publication,
      args.schema ?? 'public',
      args.table,
    ])
  ).rows;
  const json = {
    slot,
    slotExists: row !== undefined,
    active: row?.active ?? false,
    confirmedFlushLsn: row?.confirmed_flush_lsn ?? null,
    retainedBytes: row?.retained_bytes === undefined ? null : Number(row.retained_bytes),
    publication,
    publicationCoversTable: pub?.covers === true,
  };
  const lines = [
    row === undefined
      ? `Slot ${slot}: none ("outbox log setup" makes it, or the app at its first start with log tailing).`
      : `Slot ${slot}: ${row.active ? 'read now' : 'NOT read by any process'}, confirmed up to ${row.confirmed_flush_lsn ?? '-'}, keeping ${formatBytes(json.retainedBytes)} of WAL.`,
    `Publication ${publication}: ${pub === undefined ? 'missing (outbox log setup)' : pub.covers ? 'publishes the table' : 'does not cover the table'}.`,
  ];
  if (row !== undefined && !row.active) {
    lines.push(
      'A slot nobody reads keeps WAL until the disk fills: start the app, or drop it with "outbox log drop --yes".',
    );
  }
  return { text: lines.join('\n'), json };
}

/** Drops the slot (and the publication), so the server stops keeping WAL for it. */
export async function logDrop(args: CliArgs, db: CliDatabase, sql: SqlPort): Promise<LogCliResult> {
  if (db.dialect === 'mysql') return mysqlLogDrop(args, sql);
  sqliteRefused(db, 'log drop');
  const { slot, publication } = await logNames(args, sql);
  if (!args.yes) {
    throw new CliUsageError(
      `"outbox log drop" removes replication slot ${slot} and publication ${publication}: an app still set to log tailing makes the slot again (at once if it is running, else at its next start), and messages committed meanwhile are found by its sweep. Add --yes to go ahead.`,
    );
  }
  const [row] = (await sql.query<{ active: boolean }>(POSTGRES_SLOT_STATUS, [slot])).rows;
  if (row?.active === true) {
    return {
      text: `Slot ${slot} is being read by a running app: stop it (or set dispatcher.observe back to 'poll' and deploy) first.`,
      json: { slot, dropped: false, reason: 'active' },
      exitCode: 1,
    };
  }
  if (row !== undefined) await sql.query(POSTGRES_DROP_SLOT, [slot]);
  await sql.query(postgresDropPublication(publication));
  return {
    text: `${row === undefined ? `No slot ${slot} to drop` : `Dropped slot ${slot}`}; dropped publication ${publication} (if it existed).`,
    json: { slot, dropped: row !== undefined, publication },
  };
}

function sqliteRefused(db: CliDatabase, command: string): void {
  if (db.dialect === 'sqlite') {
    throw new CliUsageError(
      `"outbox ${command}" is for PostgreSQL and MySQL/MariaDB: SQLite has no replication log to tail.`,
    );
  }
}

/** Creates the binlog position table (idempotent); the reader stores its first position. */
async function mysqlLogSetup(args: CliArgs, sql: SqlPort): Promise<LogCliResult> {
  const { names } = await mysqlNames(args, sql, 'log setup');
  for (const statement of mysqlLogTailingDdl(names)) await sql.query(statement);
  const positionTable = mysqlLogPositionTable(names);
  return {
    text: `Position table ${positionTable} keeps where the binlog reader of ${names.table} is. The app's logTailing() stores its first position at its first start (from the binlog's end then).`,
    json: { positionTable, table: names.table },
  };
}

interface MysqlLogState {
  readonly positionTable: string;
  readonly positionTableExists: boolean;
  readonly position: string | null;
  readonly acknowledgedBy: string | null;
  readonly active: boolean;
  readonly retainedBytes: number | null;
}

/** The stored position, whether a reader holds the lock, and the binlog after the position. */
async function mysqlLogState(args: CliArgs, sql: SqlPort, command: string): Promise<MysqlLogState> {
  const { names, database } = await mysqlNames(args, sql, command);
  const positionTable = mysqlLogPositionTable(names);
  const [lock] = (
    await sql.query<{ holder: unknown }>('SELECT IS_USED_LOCK(?) AS holder', [
      mysqlLogLockName(database, names),
    ])
  ).rows;
  const active = lock?.holder !== null && lock?.holder !== undefined;
  const [exists] = (
    await sql.query<{ n: unknown }>(
      'SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
      [database, `${names.tableName}_log_position`],
    )
  ).rows;
  if (Number(exists?.n) === 0) {
    return {
      positionTable,
      positionTableExists: false,
      position: null,
      acknowledgedBy: null,
      active,
      retainedBytes: null,
    };
  }
  const [row] = (
    await sql.query<{
      binlog_file: string;
      binlog_offset: unknown;
      acknowledged_by: string | null;
    }>(mysqlLogPositionStatus(names))
  ).rows;
  if (row === undefined) {
    return {
      positionTable,
      positionTableExists: true,
      position: null,
      acknowledgedBy: null,
      active,
      retainedBytes: null,
    };
  }
  const position = { file: row.binlog_file, offset: Number(row.binlog_offset) };
  // SHOW BINARY LOGS needs REPLICATION CLIENT (BINLOG MONITOR): without it the lag is unknown.
  const files = await sql.query<{ Log_name: string; File_size: unknown }>('SHOW BINARY LOGS').then(
    ({ rows }) => rows.map((r) => ({ file: r.Log_name, size: Number(r.File_size) })),
    () => null,
  );
  return {
    positionTable,
    positionTableExists: true,
    position: `${position.file}:${position.offset}`,
    acknowledgedBy: row.acknowledged_by,
    active,
    retainedBytes: files === null ? null : retainedBinlogBytes(position, files),
  };
}

async function mysqlLogStatus(args: CliArgs, sql: SqlPort): Promise<LogCliResult> {
  const state = await mysqlLogState(args, sql, 'log status');
  const reader = state.active ? 'read now' : 'NOT read by any process';
  const lines = !state.positionTableExists
    ? [`Position table ${state.positionTable}: missing (outbox log setup). Binlog ${reader}.`]
    : state.position === null
      ? [
          `Position table ${state.positionTable}: no position yet (the app stores one at its first start with log tailing). Binlog ${reader}.`,
        ]
      : [
          `Binlog ${reader}; acknowledged up to ${state.position}${state.acknowledgedBy === null ? '' : ` by ${state.acknowledgedBy}`}, ${formatBytes(state.retainedBytes)} of binlog after it.`,
        ];
  return { text: lines.join('\n'), json: state };
}

/** Drops the position table: a later start with log tailing reads from the binlog's end. */
async function mysqlLogDrop(args: CliArgs, sql: SqlPort): Promise<LogCliResult> {
  const state = await mysqlLogState(args, sql, 'log drop');
  if (!args.yes) {
    throw new CliUsageError(
      `"outbox log drop" removes the binlog position table ${state.positionTable}: an app still set to log tailing then refuses to start until "outbox log setup" makes it again, and reads from the binlog's end (messages committed meanwhile are found by its poll). Add --yes to go ahead.`,
    );
  }
  if (state.active) {
    return {
      text: `The binlog of this table is being read by a running app: stop it (or set dispatcher.observe back to 'poll' and deploy) first.`,
      json: { positionTable: state.positionTable, dropped: false, reason: 'active' },
      exitCode: 1,
    };
  }
  const names = outboxTableNames(args.table, args.schema, 'backtick');
  for (const statement of mysqlLogTailingDrop(names)) await sql.query(statement);
  return {
    text: `${state.positionTableExists ? 'Dropped' : 'No'} position table ${state.positionTable}${state.positionTableExists ? '' : ' to drop'}.`,
    json: { positionTable: state.positionTable, dropped: state.positionTableExists },
  };
}

function formatBytes(bytes: number | null): string {
  if (bytes === null) return 'an unknown amount';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 'B';
  for (const u of units) {
    if (value < 1024) break;
    value /= 1024;
    unit = u;
  }
  return `${value.toFixed(1)} ${unit}`;
}
