import type { OutboxTableNames } from '../../internal/sql-identifier';
import { OUTBOX_HEADER_TENANT } from '../../outbox.constants';

// Schema step 7: the tenant of each message (docs/tenants.md). The service writes the tenant into
// the row's headers (`x-outbox-tenant`, which publishers send as they send every header), and
// `tenant_id` is a column the database generates from them: the enqueue, the requeue and every
// copy of a row keep it without naming it, and a row can never disagree with its header.

/** The JSON path of the tenant in the headers, as the databases' JSON functions take it. */
export const TENANT_JSON_PATH = `$."${OUTBOX_HEADER_TENANT}"`;

/** The index of pending rows by tenant, in due order: the tenants' skip-scan and their windows. */
export function tenantIndexName(n: OutboxTableNames): string {
  return `${n.tableName}_tenant_idx`;
}

/** A read that fails on a table without the column (and reads nothing otherwise). */
export function tenantColumnProbe(n: OutboxTableNames): string {
  return `SELECT 1 FROM ${n.table} WHERE 1 = 0 AND tenant_id IS NULL`;
}

/** Whether a probe runs (outside a transaction only: a failed probe aborts PostgreSQL's). */
export function answers(
  run: (sql: string, params?: unknown[]) => Promise<unknown>,
  statement: string,
): Promise<boolean> {
  return run(statement).then(
    () => true,
    () => false,
  );
}
