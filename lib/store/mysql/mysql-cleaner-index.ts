import type { OutboxTableNames } from '../../internal/sql-identifier';

// The cleaner's cut-off index on MySQL/MariaDB, which have no partial indexes: one index serves
// both statuses. Delivered rows are found by (status, delivered_at); dead rows, whose
// delivered_at is always NULL, by (status, NULL, dead_at). Without it each cleaner pass read
// every delivered row of the table, even with nothing due.

/** The index definition, as CREATE TABLE and ALTER TABLE take it. */
export function mysqlCleanerIndex(n: OutboxTableNames): string {
  return `KEY ${n.quote(`${n.tableName}_done_idx`)} (status, delivered_at, dead_at)`;
}

type Query = (sql: string, params?: unknown[]) => Promise<unknown>;

/** Whether the table has the cleaner's index (read only). */
export async function mysqlHasCleanerIndex(query: Query, n: OutboxTableNames): Promise<boolean> {
  const index = `${n.tableName}_done_idx`;
  const params = n.schema === null ? [n.tableName, index] : [n.schema, n.tableName, index];
  const rows = (await query(
    `SELECT 1 AS present FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = ${n.schema === null ? 'DATABASE()' : '?'} AND TABLE_NAME = ? AND INDEX_NAME = ?
LIMIT 1`,
    params,
  )) as unknown[];
  return rows.length > 0;
}

/**
 * Adds the index to a table made before it existed (MySQL has no CREATE INDEX IF NOT EXISTS).
 * Online: InnoDB builds a secondary index without blocking writes.
 */
export async function mysqlEnsureCleanerIndex(query: Query, n: OutboxTableNames): Promise<void> {
  if (!(await mysqlHasCleanerIndex(query, n))) {
    await query(`ALTER TABLE ${n.table} ADD ${mysqlCleanerIndex(n)}, ALGORITHM=INPLACE, LOCK=NONE`);
  }
}
