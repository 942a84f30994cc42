import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import { TENANT_JSON_PATH, tenantIndexName } from '../schema/tenant-column';

const NOW = 'UTC_TIMESTAMP(6)';

// A VIRTUAL generated column: added without a table copy (metadata only), and computed for its
// index. MySQL/MariaDB have no partial index, so the index leads with the status: pending rows
// by tenant, in due order, which both the tenants' loose index scan and a tenant's window read.

async function present(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<{ column: boolean; index: boolean }> {
  const where = `TABLE_SCHEMA = ${n.schema === null ? 'DATABASE()' : '?'} AND TABLE_NAME = ?`;
  const table = n.schema === null ? [n.tableName] : [n.schema, n.tableName];
  const columns = (await run(
    `SELECT 1 AS found FROM information_schema.COLUMNS WHERE ${where} AND COLUMN_NAME = 'tenant_id'`,
    table,
  )) as unknown[];
  const indexes = (await run(
    `SELECT 1 AS found FROM information_schema.STATISTICS WHERE ${where} AND INDEX_NAME = ? LIMIT 1`,
    [...table, tenantIndexName(n)],
  )) as unknown[];
  return { column: columns.length > 0, index: indexes.length > 0 };
}

/** Schema step 7 on MySQL/MariaDB: `tenant_id`, generated from the headers, and its index. */
export const mysqlTenantColumn: SchemaPartSql = {
  async ensure(run, n) {
    const has = await present(run, n);
    if (!has.column) {
      await run(
        `ALTER TABLE ${n.table} ADD COLUMN tenant_id VARCHAR(128) AS (JSON_UNQUOTE(JSON_EXTRACT(headers, '${TENANT_JSON_PATH}'))) VIRTUAL`,
      );
    }
    if (!has.index) {
      await run(
        // In place, writes allowed while it builds: the server refuses the ALTER rather than
        // take a lock that blocks them.
        `ALTER TABLE ${n.table} ADD KEY ${n.quote(tenantIndexName(n))} (status, tenant_id, available_at, id), ALGORITHM=INPLACE, LOCK=NONE`,
      );
    }
  },
  async has(run, n) {
    const has = await present(run, n);
    return has.column && has.index;
  },
  async drop(run, n) {
    const has = await present(run, n);
    if (has.index) await run(`ALTER TABLE ${n.table} DROP INDEX ${n.quote(tenantIndexName(n))}`);
    if (has.column) await run(`ALTER TABLE ${n.table} DROP COLUMN tenant_id`);
  },
};

/**
 * Params: the tenant after which to look ('' from the first), how many. The tenants with a
 * pending message after it, in order, by a loose index scan of the tenant index (one probe per
 * tenant, never its backlog), kept when one of its messages is due; then a null tenant when a
 * message without one is due. A lease moves `available_at` to its end, so due rows are unleased.
 */
export function mysqlDueTenants(n: OutboxTableNames): string {
  const index = n.quote(tenantIndexName(n));
  return `SELECT u.tenant FROM (
  SELECT * FROM (
    SELECT s.tenant_id AS tenant FROM (
      SELECT c.tenant_id FROM ${n.table} AS c FORCE INDEX (${index})
      WHERE c.status = 'pending' AND c.tenant_id > ?
      GROUP BY c.tenant_id) AS s
    WHERE EXISTS (SELECT 1 FROM ${n.table} AS d FORCE INDEX (${index})
      WHERE d.status = 'pending' AND d.tenant_id = s.tenant_id AND d.available_at <= ${NOW})
    ORDER BY s.tenant_id LIMIT ?) AS t
  UNION ALL
  SELECT NULL FROM DUAL WHERE EXISTS (SELECT 1 FROM ${n.table} AS d FORCE INDEX (${index})
    WHERE d.status = 'pending' AND d.tenant_id IS NULL AND d.available_at <= ${NOW})
) AS u`;
}
