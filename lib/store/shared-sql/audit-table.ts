import { refuseUnknownCallOptions } from '../../internal/known-keys';
import {
  assertIdentifier,
  outboxTableNames,
  type OutboxTableNames,
} from '../../internal/sql-identifier';
import { outboxDatabase, type OutboxDialect } from '../schema/outbox-table-ddl';
import type { AuditSql } from './audit-sql';

/** Where the audit log is kept: the console's audit table, which re-drives write too. */
export interface OutboxAuditTableOptions {
  /** @default 'outbox_console_audit' */
  readonly tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  readonly schema?: string;
}

export const DEFAULT_AUDIT_TABLE = 'outbox_console_audit';

/** The keys of `OutboxAuditTableOptions`, for the checks that refuse any other. */
export const AUDIT_TABLE_KEYS = {
  '': { tableName: true, schema: true } satisfies Record<keyof OutboxAuditTableOptions, true>,
} as const;

/** The audit table's statements on one database: its registry entry's `audit`. */
export function auditSqlOf(dialect: OutboxDialect): AuditSql {
  return outboxDatabase(dialect).audit;
}

/**
 * The audit table's quoted names, each identifier checked (throws `OutboxOptionsError` naming
 * `option`, the option the names came from).
 */
export function auditTableNames(
  dialect: OutboxDialect,
  options: OutboxAuditTableOptions = {},
  option = 'auditTable',
): OutboxTableNames {
  const tableName = options.tableName ?? DEFAULT_AUDIT_TABLE;
  assertIdentifier(tableName, `${option}.tableName`);
  if (options.schema !== undefined) assertIdentifier(options.schema, `${option}.schema`);
  const database = outboxDatabase(dialect);
  return outboxTableNames(
    tableName,
    database.schemas ? (options.schema ?? null) : null,
    database.quoting,
  );
}

/** The statements that create the audit table on one database, for a migration. */
export function outboxAuditTableDdl(
  dialect: OutboxDialect,
  options: OutboxAuditTableOptions = {},
): string[] {
  refuseUnknownCallOptions('outboxAuditTableDdl()', options, AUDIT_TABLE_KEYS);
  return auditSqlOf(dialect).createTable(auditTableNames(dialect, options));
}
