import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { runAll } from './run-statements';

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

/**
 * A query of the database's catalog for the table's indexes of two names: one row per index
 * found. Each database's own (`lib/store/<database>/`).
 */
export type IndexCatalogQuery = (
  n: OutboxTableNames,
  indexes: readonly [string, string],
) => { readonly text: string; readonly params: unknown[] };

/** The cleaner's indexes as schema step 3, on a database with partial indexes. */
export function partialCleanerIndexes(catalog: IndexCatalogQuery): SchemaPartSql {
  const wanted = (n: OutboxTableNames): [string, string] => [
    `${n.tableName}_delivered_idx`,
    `${n.tableName}_dead_idx`,
  ];
  return {
    ensure: (run, n) => runAll(run, cleanerIndexesDdl(n)),
    async has(run, n) {
      const { text, params } = catalog(n, wanted(n));
      const rows = (await run(text, params)) as unknown[];
      return rows.length === wanted(n).length;
    },
    // PostgreSQL indexes live in their table's schema: qualify them as the table is.
    drop: (run, n) =>
      runAll(
        run,
        wanted(n).map(
          (index) =>
            `DROP INDEX IF EXISTS ${n.schema === null ? n.quote(index) : `${n.quote(n.schema)}.${n.quote(index)}`}`,
        ),
      ),
  };
}

export function dropTableDdl(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}
