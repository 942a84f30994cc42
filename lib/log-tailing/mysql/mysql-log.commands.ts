import {
  OUTBOX_TABLE_SUFFIXES,
  outboxTableNames,
  type OutboxTableNames,
} from '../../internal/sql-identifier';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  formatBytes,
  LogCommandUsageError,
  type LogCommandArgs,
  type LogCommandResult,
  type LogCommands,
} from '../log-commands';
import { retainedBinlogBytes } from './mysql-binlog-position';
import {
  mysqlLogLockName,
  mysqlLogPositionTable,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  mysqlLogPositionStatus,
} from './mysql-log-tailing.sql';

// `outbox log setup|status|drop` on MySQL/MariaDB (docs/log-tailing.md): the binlog position
// table, and whether a reader holds the binlog's lock.

/** MySQL/MariaDB keeps no slot or publication: their options would be silently ignored. */
function refusePostgresOptions(args: LogCommandArgs, command: string): void {
  const given =
    args.slot !== undefined ? '--slot' : args.publication !== undefined ? '--publication' : null;
  if (given !== null) {
    throw new LogCommandUsageError(
      `"outbox ${command}" ${given} is for PostgreSQL (DATABASE_URL names MySQL/MariaDB, whose binlog needs no slot or publication). Leave it out.`,
    );
  }
}

/** The table's names on MySQL/MariaDB, and its database (part of the reader's lock name). */
async function mysqlNames(
  args: LogCommandArgs,
  sql: SqlPort,
  command: string,
): Promise<{ names: OutboxTableNames; database: string }> {
  refusePostgresOptions(args, command);
  const names = outboxTableNames(args.table, args.schema, 'backtick');
  const [row] = (await sql.query<{ db: string | null }>('SELECT DATABASE() AS db')).rows;
  return { names, database: args.schema ?? row?.db ?? '' };
}

/** Creates the binlog position table (idempotent); the reader stores its first position. */
async function mysqlLogSetup(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
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
async function mysqlLogState(
  args: LogCommandArgs,
  sql: SqlPort,
  command: string,
): Promise<MysqlLogState> {
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
      [database, `${names.tableName}${OUTBOX_TABLE_SUFFIXES.logPositionTable}`],
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

async function mysqlLogStatus(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
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
async function mysqlLogDrop(args: LogCommandArgs, sql: SqlPort): Promise<LogCommandResult> {
  const state = await mysqlLogState(args, sql, 'log drop');
  if (!args.yes) {
    throw new LogCommandUsageError(
      `"outbox log drop" removes the binlog position table ${state.positionTable}: an app still set to log tailing then refuses to start until "outbox log setup" makes it again, and reads from the binlog's end (messages committed meanwhile are found by its poll). Add --yes to go ahead.`,
    );
  }
  if (state.active) {
    return {
      text: `The binlog of this table is being read by a running app: stop it (or set delivery back to 'poll' and deploy) first.`,
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

export const mysqlLogCommands: LogCommands = {
  setup: mysqlLogSetup,
  status: mysqlLogStatus,
  drop: mysqlLogDrop,
};
