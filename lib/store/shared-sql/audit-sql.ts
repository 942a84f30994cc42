import type { OutboxTableNames } from '../../internal/sql-identifier';

/**
 * The statements of the audit table (the console's audit log, which re-drives write too) on one
 * database, in `<db>.audit-sql.ts` beside each database's store.
 */
export interface AuditSql {
  createTable(names: OutboxTableNames): string[];
  dropTable(names: OutboxTableNames): string[];
  /** Parameters: actor, action, scope, target, confirmed, affected; `at` is the database's now. */
  insert(names: OutboxTableNames): string;
  /** The newest rows first; parameter: the limit. */
  recent(names: OutboxTableNames): string;
  /** The newest rows of one action first; parameters: the action, the limit. */
  recentOf(names: OutboxTableNames): string;
  /** Selects every column and no row: fails when the table is missing or not this shape. */
  probe(names: OutboxTableNames): string;
}
