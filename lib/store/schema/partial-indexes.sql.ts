import type { OutboxTableNames } from '../../internal/sql-identifier';

// The databases with partial indexes (PostgreSQL, SQLite) share these statements word for word;
// MySQL/MariaDB have none and index whole columns instead.

/** The partial indexes the dispatcher's and the cleaner's queries read. */
export function partialIndexesDdl(n: OutboxTableNames): string[] {
  const t = n.table;
  return [
    // The claim reads due rows in due order; waiting, delivered and dead rows stay out of it.
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_pending_idx`)} ON ${t} (available_at, id) WHERE status = 'pending'`,
    // Head-of-key checks, parking and promotion look up the undelivered rows of one key.
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_key_idx`)} ON ${t} (message_key, id) WHERE status <> 'delivered' AND message_key IS NOT NULL`,
    ...cleanerIndexesDdl(n),
  ];
}

/**
 * The cleaner's cut-offs: without them each pass read the whole table, even with nothing due
 * (1.4 s and 1 GB read per minute with a million delivered rows kept). Partial, so pending rows
 * never enter them and a delivered row is written once, when it is settled.
 */
export function cleanerIndexesDdl(n: OutboxTableNames): string[] {
  const t = n.table;
  return [
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_delivered_idx`)} ON ${t} (delivered_at) WHERE status = 'delivered'`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_dead_idx`)} ON ${t} (dead_at) WHERE status = 'dead'`,
  ];
}

/** Adds the cleaner's indexes where missing, as a migration step. */
export async function ensurePartialCleanerIndexes(
  run: (sql: string) => Promise<unknown>,
  n: OutboxTableNames,
): Promise<void> {
  for (const statement of cleanerIndexesDdl(n)) await run(statement);
}

/** Whether both of the cleaner's indexes exist (PostgreSQL or SQLite catalog). */
export async function hasPartialCleanerIndexes(
  run: (sql: string, params?: unknown[]) => Promise<unknown>,
  n: OutboxTableNames,
  catalog: 'postgres' | 'sqlite',
): Promise<boolean> {
  const wanted = [`${n.tableName}_delivered_idx`, `${n.tableName}_dead_idx`];
  const rows = (await run(
    catalog === 'postgres'
      ? `SELECT indexname AS name FROM pg_indexes WHERE schemaname = coalesce($1, current_schema()) AND tablename = $2 AND indexname IN ($3, $4)`
      : `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name IN (?, ?)`,
    catalog === 'postgres' ? [n.schema, n.tableName, ...wanted] : [n.tableName, ...wanted],
  )) as unknown[];
  return rows.length === wanted.length;
}

export function dropPartialCleanerIndexes(n: OutboxTableNames): string[] {
  // PostgreSQL indexes live in their table's schema: qualify them as the table is.
  const qualify = (index: string): string =>
    n.schema === null ? n.quote(index) : `${n.quote(n.schema)}.${n.quote(index)}`;
  return [`${n.tableName}_delivered_idx`, `${n.tableName}_dead_idx`].map(
    (index) => `DROP INDEX IF EXISTS ${qualify(index)}`,
  );
}

export function dropTableDdl(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}
