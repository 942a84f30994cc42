import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { addFilledColumnOnline, fillName } from './postgres-online-column';
import { OUTBOX_HEADER_TENANT } from '../../outbox.constants';
import { answers, tenantColumnProbe, tenantIndexName } from '../schema/tenant-column';
import { claimable } from './postgres.sql';

// `->>` on json is immutable, so the column can be generated from the headers. PostgreSQL
// computes a stored generated column for every row when it is added: the ALTER rewrites the
// table under an exclusive lock (docs/upgrading.md says when to run it).

const TENANT_EXPRESSION = `headers ->> '${OUTBOX_HEADER_TENANT}'`;

/** Schema step 7 on PostgreSQL: `tenant_id`, generated from the headers, and its index. */
export const postgresTenantColumn: SchemaPartSql = {
  rewrites: 'rewrites the table under an exclusive lock: writes wait until it ends',
  // A plain column the server fills (a trigger for new rows, batches for the rows there), then
  // the index built concurrently: writes go on throughout. Reads see the same values.
  async ensureOnline(run, n, online) {
    await addFilledColumnOnline(run, n, online, {
      column: 'tenant_id',
      tag: 'tenant',
      type: 'varchar(128)',
      expression: TENANT_EXPRESSION,
      sources: ['headers'],
      index: {
        name: tenantIndexName(n),
        definition: `(tenant_id, available_at, id) WHERE status = 'pending'`,
      },
    });
  },
  async ensure(run, n) {
    await run(
      `ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS tenant_id varchar(128) GENERATED ALWAYS AS (${TENANT_EXPRESSION}) STORED`,
    );
    await run(
      `CREATE INDEX IF NOT EXISTS ${n.quote(tenantIndexName(n))} ON ${n.table} (tenant_id, available_at, id) WHERE status = 'pending'`,
    );
  },
  async has(run, n) {
    if (!(await answers(run, tenantColumnProbe(n)))) return false;
    const rows = (await run(
      `SELECT 1 FROM pg_class AS i JOIN pg_index AS x ON x.indexrelid = i.oid
WHERE x.indrelid = to_regclass($1) AND i.relname = $2 AND x.indisvalid`,
      [n.table, tenantIndexName(n)],
    )) as unknown[];
    return rows.length > 0;
  },
  async drop(run, n) {
    await run(`DROP TRIGGER IF EXISTS ${n.quote(fillName(n, 'tenant'))} ON ${n.table}`);
    await run(`DROP FUNCTION IF EXISTS ${n.qualify(fillName(n, 'tenant'))}()`);
    await run(`ALTER TABLE ${n.table} DROP COLUMN IF EXISTS tenant_id`);
  },
};

/**
 * $1 the tenant after which to look (null: from the first), $2 how many. The tenants with a
 * pending message after $1, in order, each found by one probe of the tenant index (a skip
 * scan: a tenant's backlog is never read), kept when one of its messages is due and unleased.
 * A last row with a null tenant says that messages without a tenant are due too.
 */
export function postgresDueTenants(n: OutboxTableNames): string {
  const t = n.table;
  return `WITH RECURSIVE s AS (
  (SELECT c.tenant_id FROM ${t} AS c
    WHERE c.status = 'pending' AND c.tenant_id > coalesce($1::text, '')
    ORDER BY c.tenant_id LIMIT 1)
  UNION ALL
  SELECT (SELECT c.tenant_id FROM ${t} AS c
    WHERE c.status = 'pending' AND c.tenant_id > s.tenant_id ORDER BY c.tenant_id LIMIT 1)
  FROM s WHERE s.tenant_id IS NOT NULL)
SELECT u.tenant FROM (
  (SELECT s.tenant_id AS tenant FROM s
    WHERE s.tenant_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM ${t} AS c WHERE c.tenant_id = s.tenant_id AND ${claimable('c')})
    LIMIT $2)
  UNION ALL
  SELECT NULL WHERE EXISTS (SELECT 1 FROM ${t} AS c WHERE c.tenant_id IS NULL AND ${claimable('c')})
) AS u`;
}
