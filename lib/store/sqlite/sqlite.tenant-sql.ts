import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import { TENANT_JSON_PATH, tenantIndexName } from '../schema/tenant-column';

const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;

// SQLite adds only VIRTUAL generated columns to an existing table; its index stores the value,
// so a claim's window by tenant reads the index, not the headers of each row.

async function hasColumn(run: StatementRunner, n: OutboxTableNames): Promise<boolean> {
  const rows = (await run(`SELECT name FROM pragma_table_xinfo(?) WHERE name = 'tenant_id'`, [
    n.tableName,
  ])) as unknown[];
  return rows.length > 0;
}

async function hasIndex(run: StatementRunner, n: OutboxTableNames): Promise<boolean> {
  const rows = (await run(
    `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name = ?`,
    [n.tableName, tenantIndexName(n)],
  )) as unknown[];
  return rows.length > 0;
}

/** Schema step 7 on SQLite: `tenant_id`, generated from the headers, and its partial index. */
export const sqliteTenantColumn: SchemaPartSql = {
  async ensure(run, n) {
    if (!(await hasColumn(run, n))) {
      await run(
        `ALTER TABLE ${n.table} ADD COLUMN tenant_id TEXT GENERATED ALWAYS AS (json_extract(headers, '${TENANT_JSON_PATH}')) VIRTUAL`,
      );
    }
    await run(
      `CREATE INDEX IF NOT EXISTS ${n.quote(tenantIndexName(n))} ON ${n.table} (tenant_id, available_at, id) WHERE status = 'pending'`,
    );
  },
  has: async (run, n) => (await hasColumn(run, n)) && (await hasIndex(run, n)),
  async drop(run, n) {
    await run(`DROP INDEX IF EXISTS ${n.quote(tenantIndexName(n))}`);
    if (await hasColumn(run, n)) await run(`ALTER TABLE ${n.table} DROP COLUMN tenant_id`);
  },
};

/**
 * Params: the tenant after which to look ('' from the first), how many. The tenants with a due
 * message after it, in order, through the tenant index; then a null tenant when a message
 * without one is due. A lease moves `available_at` to its end, so due rows are unleased.
 */
export function sqliteDueTenants(n: OutboxTableNames): string {
  const index = n.quote(tenantIndexName(n));
  return `SELECT tenant FROM (
  SELECT tenant FROM (
    SELECT DISTINCT c.tenant_id AS tenant FROM ${n.table} AS c INDEXED BY ${index}
    WHERE c.status = 'pending' AND c.tenant_id > ? AND c.available_at <= ${NOW}
    ORDER BY c.tenant_id LIMIT ?)
  UNION ALL
  SELECT NULL WHERE EXISTS (SELECT 1 FROM ${n.table} AS d INDEXED BY ${index}
    WHERE d.status = 'pending' AND d.tenant_id IS NULL AND d.available_at <= ${NOW}))`;
}
