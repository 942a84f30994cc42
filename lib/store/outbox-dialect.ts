import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';
import { mysqlEnsureNoPad } from './dialects/mysql-no-pad';
import { mysqlCreateTable, mysqlDropTable } from './dialects/mysql.sql';
import { postgresCreateTable, postgresDropTable } from './dialects/postgres.sql';
import { sqliteCreateTable, sqliteDropTable } from './dialects/sqlite.sql';
import { assertIdentifier, outboxTableNames, type OutboxTableNames } from './sql-identifier';

/** The database families the outbox supports. */
export type OutboxDialect = 'postgres' | 'mysql' | 'sqlite';

/** Maps a TypeORM driver type to its outbox dialect, or throws a clear error. */
export function outboxDialectOf(type: string): OutboxDialect {
  switch (type) {
    case 'postgres':
      return 'postgres';
    case 'mysql':
    case 'mariadb':
      return 'mysql';
    case 'better-sqlite3':
    case 'sqlite':
      return 'sqlite';
    default:
      throw new OutboxOptionsError(OutboxMessages.unsupportedDatabase(type), 'dataSource');
  }
}

/** Where the outbox table lives. */
export interface OutboxTableOptions {
  /** @default 'outbox' */
  tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  schema?: string;
}

export function tableNamesFor(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): OutboxTableNames {
  const tableName = options.tableName ?? 'outbox';
  assertIdentifier(tableName, 'tableName');
  const schema = options.schema ?? null;
  if (schema !== null) assertIdentifier(schema, 'schema');
  return outboxTableNames(
    tableName,
    dialect === 'sqlite' ? null : schema,
    dialect === 'mysql' ? 'backtick' : 'double',
  );
}

/** The statements that create the outbox table (and its indexes) on one dialect. */
export function outboxTableDdl(dialect: OutboxDialect, options: OutboxTableOptions = {}): string[] {
  const names = tableNamesFor(dialect, options);
  switch (dialect) {
    case 'postgres':
      return postgresCreateTable(names);
    case 'mysql':
      return mysqlCreateTable(names);
    case 'sqlite':
      return sqliteCreateTable(names);
  }
}

export function outboxTableDropDdl(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): string[] {
  const names = tableNamesFor(dialect, options);
  switch (dialect) {
    case 'postgres':
      return postgresDropTable(names);
    case 'mysql':
      return mysqlDropTable(names);
    case 'sqlite':
      return sqliteDropTable(names);
  }
}

/** Creates the outbox table if it does not exist, e.g. in tests or at the start of a sample app. */
export async function ensureOutboxTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  const dialect = outboxDialectOf(dataSource.options.type);
  for (const sql of outboxTableDdl(dialect, options)) {
    await dataSource.query(sql);
  }
  if (dialect === 'mysql') {
    await mysqlEnsureNoPad(
      (sql, params) => dataSource.query(sql, params),
      tableNamesFor(dialect, options),
    );
  }
}
