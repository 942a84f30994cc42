import type { DataSource } from 'typeorm';
import {
  outboxDatabase,
  outboxDialectOf,
  type OutboxDialect,
} from '../../../store/schema/outbox-table-ddl';
import { MYSQL_CONSOLE_AUDIT_SQL } from './mysql.audit-sql';
import { POSTGRES_CONSOLE_AUDIT_SQL } from './postgres.audit-sql';
import { SQLITE_CONSOLE_AUDIT_SQL } from './sqlite.audit-sql';
import {
  assertIdentifier,
  outboxTableNames,
  type OutboxTableNames,
} from '../../../internal/sql-identifier';
import type { ConsoleAuditSql } from './console-audit-sql';

/** Where the console keeps its audit log. */
export interface OutboxConsoleAuditTableOptions {
  /** @default 'outbox_console_audit' */
  readonly tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  readonly schema?: string;
}

export const DEFAULT_CONSOLE_AUDIT_TABLE = 'outbox_console_audit';

const SQL: Record<OutboxDialect, ConsoleAuditSql> = {
  postgres: POSTGRES_CONSOLE_AUDIT_SQL,
  mysql: MYSQL_CONSOLE_AUDIT_SQL,
  sqlite: SQLITE_CONSOLE_AUDIT_SQL,
};

export function consoleAuditSqlOf(dialect: OutboxDialect): ConsoleAuditSql {
  return SQL[dialect];
}

/** The table's quoted names, each identifier checked (throws `OutboxOptionsError`). */
export function consoleAuditTableNames(
  dialect: OutboxDialect,
  options: OutboxConsoleAuditTableOptions = {},
): OutboxTableNames {
  const tableName = options.tableName ?? DEFAULT_CONSOLE_AUDIT_TABLE;
  assertIdentifier(tableName, 'auditTable.tableName');
  if (options.schema !== undefined) assertIdentifier(options.schema, 'auditTable.schema');
  const database = outboxDatabase(dialect);
  return outboxTableNames(
    tableName,
    database.schemas ? (options.schema ?? null) : null,
    database.quoting,
  );
}

/** The statements that create the console's audit table on one database, for a migration. */
export function outboxConsoleAuditTableDdl(
  dialect: OutboxDialect,
  options: OutboxConsoleAuditTableOptions = {},
): string[] {
  return SQL[dialect].createTable(consoleAuditTableNames(dialect, options));
}

/** Creates the console's audit table if it does not exist. */
export async function ensureOutboxConsoleAuditTable(
  dataSource: DataSource,
  options: OutboxConsoleAuditTableOptions = {},
): Promise<void> {
  for (const sql of outboxConsoleAuditTableDdl(outboxDialectOf(dataSource.options.type), options)) {
    await dataSource.query(sql);
  }
}
