import type { OutboxTableNames } from '../../../internal/sql-identifier';

/** The statements of the console's audit table on one database (in `<db>.audit-sql.ts` beside this file). */
export interface ConsoleAuditSql {
  createTable(names: OutboxTableNames): string[];
  dropTable(names: OutboxTableNames): string[];
  /** Parameters: actor, action, scope, target, confirmed, affected; `at` is the database's now. */
  insert(names: OutboxTableNames): string;
  /** The newest rows first; parameter: the limit. */
  recent(names: OutboxTableNames): string;
  /** Selects every column and no row: fails when the table is missing or not this shape. */
  probe(names: OutboxTableNames): string;
}
