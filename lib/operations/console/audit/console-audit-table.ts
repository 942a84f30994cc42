import { refuseUnknownCallOptions } from '../../../internal/known-keys';
import type { DataSource } from 'typeorm';
import { outboxDialectOf, type OutboxDialect } from '../../../store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../../../internal/sql-identifier';
import type { AuditSql } from '../../../store/shared-sql/audit-sql';
import {
  auditSqlOf,
  auditTableNames,
  DEFAULT_AUDIT_TABLE,
  outboxAuditTableDdl,
  type OutboxAuditTableOptions,
} from '../../../store/shared-sql/audit-table';

/** Where the console keeps its audit log. */
export type OutboxConsoleAuditTableOptions = OutboxAuditTableOptions;

export const DEFAULT_CONSOLE_AUDIT_TABLE = DEFAULT_AUDIT_TABLE;

export function consoleAuditSqlOf(dialect: OutboxDialect): AuditSql {
  return auditSqlOf(dialect);
}

/** The table's quoted names, each identifier checked (throws `OutboxOptionsError`). */
export function consoleAuditTableNames(
  dialect: OutboxDialect,
  options: OutboxConsoleAuditTableOptions = {},
): OutboxTableNames {
  return auditTableNames(dialect, options);
}

/**
 * Creates the console's audit table if it does not exist (the statements of
 * `outboxAuditTableDdl`, which a migration runs instead).
 */
export async function ensureOutboxConsoleAuditTable(
  dataSource: DataSource,
  options: OutboxConsoleAuditTableOptions = {},
): Promise<void> {
  refuseUnknownCallOptions('ensureOutboxConsoleAuditTable()', options, {
    '': { tableName: true, schema: true } satisfies Record<
      keyof OutboxConsoleAuditTableOptions,
      true
    >,
  });
  for (const sql of outboxAuditTableDdl(outboxDialectOf(dataSource.options.type), options)) {
    await dataSource.query(sql);
  }
}
