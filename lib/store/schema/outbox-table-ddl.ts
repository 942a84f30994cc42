import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxPartitioningOptions } from '../../options/outbox.options';
import {
  resolvePartitioningOptions,
  type ResolvedPartitioningOptions,
} from '../../options/resolve-partitioning-options';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxDatabase } from '../outbox-database';
import { checkTableLayout, partitionedTablesOf } from './table-layout';
import { rangesAhead } from '../partitions/partition-range';
import { OUTBOX_DATABASES, outboxDatabaseOf, type OutboxDriverType } from '../outbox-databases';
import {
  assertIdentifier,
  outboxTableNames,
  type OutboxTableNames,
} from '../../internal/sql-identifier';
import type { SqlPort } from '../ports/sql-port';
import type { MessageIdLayout } from '../rows/message-id-codec';
import { layoutForNewTables } from './message-id-layout';

/** The database families the outbox supports. */
export type OutboxDialect = (typeof OUTBOX_DATABASES)[OutboxDriverType]['dialect'];

/** The database of a TypeORM driver type (or a dialect name), or throws a clear error. */
export function outboxDatabase(type: string): OutboxDatabase {
  const database = outboxDatabaseOf(type);
  if (database === undefined) {
    throw new OutboxOptionsError(
      OutboxMessages.unsupportedDatabase(type, listed(Object.keys(OUTBOX_DATABASES))),
      'dataSource',
    );
  }
  return database;
}

/** "a, b or c". */
function listed(names: readonly string[]): string {
  return names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
}

/** Maps a TypeORM driver type to its outbox dialect, or throws a clear error. */
export function outboxDialectOf(type: string): OutboxDialect {
  return outboxDatabase(type).dialect as OutboxDialect;
}

/** Where the outbox table lives. */
export interface OutboxTableOptions {
  /** @default 'outbox' */
  tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  schema?: string;
  /**
   * Make the table time-partitioned (PostgreSQL, MySQL/MariaDB): `interval` and `premake` as
   * the module's `partitioning` option, whose object may be passed as it is.
   * @default none (a plain table)
   */
  partitioning?: OutboxPartitioningOptions;
}

/** `options.partitioning` checked (the lease is the module's business: not checked here). */
export function tablePartitioning(options: OutboxTableOptions): ResolvedPartitioningOptions | null {
  return resolvePartitioningOptions(options.partitioning, 0);
}

export function tableNamesFor(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): OutboxTableNames {
  const database = OUTBOX_DATABASES[dialect];
  const tableName = options.tableName ?? 'outbox';
  assertIdentifier(tableName, 'tableName');
  const schema = options.schema ?? null;
  if (schema !== null) assertIdentifier(schema, 'schema');
  return outboxTableNames(tableName, database.schemas ? schema : null, database.quoting);
}

/**
 * The statements that create the outbox table (and its indexes) on one dialect, with its
 * attempt history `<table>_attempts`. Each is `IF NOT EXISTS` (on MySQL/MariaDB, the NO PAD
 * collation's ALTER runs only where a column lacks it): run on an existing table, they add what
 * it lacks. `dialect`: also 'mariadb', the same statements as 'mysql'.
 */
export function outboxTableDdl(
  dialect: OutboxDialect | 'mariadb',
  options: OutboxTableOptions = {},
): string[] {
  const database = outboxDatabase(dialect);
  const names = tableNamesFor(database.dialect as OutboxDialect, options);
  return [
    ...outboxTableStatements(database, names, tablePartitioning(options)),
    ...(database.finishTableDdl?.(names) ?? []),
    ...database.createHistoryTable(names),
  ];
}

/**
 * The statements that create the outbox table alone, in the layout asked: plain, or
 * partitioned with its first partitions made ahead from now.
 */
export function outboxTableStatements(
  database: OutboxDatabase,
  names: OutboxTableNames,
  partitioning: Pick<ResolvedPartitioningOptions, 'interval' | 'premake'> | null,
  /** How message ids are stored (MySQL/MariaDB): see `layoutForNewTables`. */
  ids?: MessageIdLayout,
): string[] {
  return partitioning === null
    ? database.createTable(names, ids)
    : partitionedTablesOf(database).createTable(
        names,
        partitioning.interval,
        rangesAhead(partitioning.interval, new Date(), partitioning.premake),
        ids,
      );
}

/**
 * The statements that create the archive `<table>_archive`, where the cleaner moves rows past
 * their retention when `cleaner.archive` is on. Each is `IF NOT EXISTS`. The archive is the
 * app's to keep: nothing here ever drops or prunes it.
 */
export function outboxArchiveTableDdl(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): string[] {
  return OUTBOX_DATABASES[dialect].createArchiveTable(tableNamesFor(dialect, options));
}

/** Creates the archive `<table>_archive` if it does not exist (see `outboxArchiveTableDdl`). */
export async function createOutboxArchiveTable(
  sql: SqlPort,
  options: OutboxTableOptions = {},
): Promise<void> {
  const dialect = outboxDialectOf(sql.databaseType);
  const database = OUTBOX_DATABASES[dialect];
  const names = tableNamesFor(dialect, options);
  const ids = await layoutForNewTables(database, runnerOf(sql), names);
  for (const statement of database.createArchiveTable(names, ids)) {
    await sql.query(statement);
  }
}

/** The port as a `StatementRunner` that answers the rows. */
function runnerOf(sql: SqlPort): (statement: string, params?: unknown[]) => Promise<unknown> {
  return async (statement, params) => (await sql.query(statement, params)).rows;
}

/** Drops the attempt history and the outbox table (and its lock table). */
export function outboxTableDropDdl(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): string[] {
  const database = OUTBOX_DATABASES[dialect];
  const names = tableNamesFor(dialect, options);
  return [
    ...database.dropHistoryTable(names),
    ...database.dropTable(names),
    // The partitioned layout's guard, if the table had it.
    ...(database.partitioned?.dropTable(names) ?? []),
  ];
}

/** Creates the outbox table if it does not exist, and brings an older one up to date. */
export async function createOutboxTable(
  sql: SqlPort,
  options: OutboxTableOptions = {},
): Promise<void> {
  const dialect = outboxDialectOf(sql.databaseType);
  // A table already there must have the layout asked for: a plain one is never converted here.
  await checkTableLayout(
    sql,
    OUTBOX_DATABASES[dialect],
    tableNamesFor(dialect, options),
    tablePartitioning(options),
    {
      creating: true,
    },
  );
  const database = OUTBOX_DATABASES[dialect];
  const names = tableNamesFor(dialect, options);
  const run = runnerOf(sql);
  // outboxTableDdl's statements, in the id layout of a table already there (kept as it is).
  const ids = await layoutForNewTables(database, run, names);
  for (const statement of [
    ...outboxTableStatements(database, names, tablePartitioning(options), ids),
    ...database.createHistoryTable(names, ids),
  ]) {
    await sql.query(statement);
  }
  await OUTBOX_DATABASES[dialect].afterCreateTable?.(run, names);
  // Steps 4 and 5 on a table that existed before them (a new table has them already).
  await OUTBOX_DATABASES[dialect].ensurePayloadColumns(run, names);
  await OUTBOX_DATABASES[dialect].waitingIndex?.ensure(run, names);
}
