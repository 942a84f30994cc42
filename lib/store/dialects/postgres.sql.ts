import type { OutboxTableNames } from '../sql-identifier';

/** DDL of the outbox table on PostgreSQL 12+. */
export function postgresCreateTable(n: OutboxTableNames): string[] {
  const t = n.table;
  const schema = n.schema === null ? [] : [`CREATE SCHEMA IF NOT EXISTS ${n.quote(n.schema)}`];
  return [
    ...schema,
    `CREATE TABLE IF NOT EXISTS ${t} (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id uuid NOT NULL,
  topic varchar(255) NOT NULL,
  message_key varchar(255),
  event_type varchar(255) NOT NULL,
  payload json NOT NULL,
  headers json NOT NULL DEFAULT '{}',
  status varchar(16) NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  locked_by varchar(128),
  lock_token uuid,
  locked_until timestamptz,
  last_error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  CONSTRAINT ${n.quote(`${n.tableName}_message_id_key`)} UNIQUE (message_id),
  CONSTRAINT ${n.quote(`${n.tableName}_status_check`)} CHECK (status IN ('pending', 'delivered', 'dead'))
)`,
    // The claim scans pending rows in id order; delivered history stays out of this index.
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_pending_idx`)} ON ${t} (id) WHERE status = 'pending'`,
    // The head-of-key check looks up earlier undelivered rows of one key.
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_key_idx`)} ON ${t} (message_key, id) WHERE status <> 'delivered' AND message_key IS NOT NULL`,
  ];
}

export function postgresDropTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}

/**
 * One statement: take the per-key transaction locks (when asked), then insert the rows in array
 * order. The lock subquery is an aggregate, so every lock is held before the first row gets its
 * id; that makes a key's id order its commit order.
 */
export function postgresInsert(
  n: OutboxTableNames,
  scheduled: boolean,
  lockKeys: boolean,
  notify: boolean,
): string {
  const cols = 'message_id, topic, message_key, event_type, payload, headers';
  const arrays = '$1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]';
  let next = 7;
  const schedule = scheduled ? `, $${next++}::timestamptz[], $${next++}::int8[]` : '';
  let extra = '';
  if (lockKeys) {
    extra += ` CROSS JOIN (SELECT count(pg_advisory_xact_lock($${next++}::int4, k)) FROM unnest($${next++}::int4[]) AS k) AS lk`;
  }
  if (notify) extra += ` CROSS JOIN (SELECT pg_notify($${next++}::text, '')) AS nt`;
  return `INSERT INTO ${n.table} (${cols}${scheduled ? ', available_at' : ''})
SELECT u.m, u.t, u.k, u.y, u.p::json, u.h::json${scheduled ? `, COALESCE(u.a, now() + u.d * interval '1 millisecond')` : ''}
FROM unnest(${arrays}${schedule}) WITH ORDINALITY AS u(m, t, k, y, p, h${scheduled ? ', a, d' : ''}, ord)${extra}
ORDER BY u.ord`;
}

const RETURNING = `o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type,
  o.payload::text AS payload, o.headers::text AS headers, o.attempts, o.created_at,
  extract(epoch FROM (now() - o.created_at)) * 1000 AS age_ms`;

/** $1 owner, $2 token, $3 lease ms, $4 limit. */
export function postgresClaim(
  n: OutboxTableNames,
  ordered: boolean,
  deadBlocksKey: boolean,
): string {
  const blocking = deadBlocksKey ? `e.status IN ('pending', 'dead')` : `e.status = 'pending'`;
  const head = ordered
    ? `AND (c.message_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM ${n.table} AS e
      WHERE e.message_key = c.message_key AND e.id < c.id AND e.status <> 'delivered' AND ${blocking}))`
    : '';
  // A materialised CTE runs the locking subquery exactly once, so the LIMIT holds even when the
  // planner would otherwise re-scan an IN (SELECT ...) subquery.
  return `WITH c AS MATERIALIZED (
  SELECT c.id FROM ${n.table} AS c
  WHERE c.status = 'pending' AND c.available_at <= now()
    AND (c.locked_until IS NULL OR c.locked_until < now())
    ${head}
  ORDER BY c.id
  LIMIT $4
  FOR UPDATE SKIP LOCKED)
UPDATE ${n.table} AS o
SET locked_by = $1, lock_token = $2::uuid, locked_until = now() + $3 * interval '1 millisecond'
FROM c WHERE o.id = c.id
RETURNING ${RETURNING}`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

/**
 * The whole settlement in one round trip: one data-modifying CTE per non-empty group, each
 * guarded by the lease token so that a dispatcher which lost its lease changes nothing.
 * Parameters: $1 token, then per present group in this order: delivered ids; retry ids, delays,
 * errors; dead ids, errors; released ids.
 */
export function postgresSettle(
  n: OutboxTableNames,
  groups: { delivered: boolean; retry: boolean; dead: boolean; release: boolean },
  deleteDelivered: boolean,
): string {
  const t = n.table;
  const ctes: string[] = [];
  let next = 2;
  if (groups.delivered) {
    const ids = `$${next++}::int8[]`;
    ctes.push(
      deleteDelivered
        ? `d AS (DELETE FROM ${t} WHERE id = ANY(${ids}) AND lock_token = $1::uuid RETURNING 1)`
        : `d AS (UPDATE ${t} SET status = 'delivered', delivered_at = now(), ${UNLOCK} WHERE id = ANY(${ids}) AND lock_token = $1::uuid RETURNING 1)`,
    );
  }
  if (groups.retry) {
    const u = `unnest($${next++}::int8[], $${next++}::int8[], $${next++}::text[])`;
    ctes.push(`r AS (UPDATE ${t} AS o SET attempts = o.attempts + 1, available_at = now() + u.delay * interval '1 millisecond', last_error = u.err, ${UNLOCK}
  FROM ${u} AS u(id, delay, err) WHERE o.id = u.id AND o.lock_token = $1::uuid RETURNING 1)`);
  }
  if (groups.dead) {
    const u = `unnest($${next++}::int8[], $${next++}::text[])`;
    ctes.push(`x AS (UPDATE ${t} AS o SET status = 'dead', attempts = o.attempts + 1, last_error = u.err, ${UNLOCK}
  FROM ${u} AS u(id, err) WHERE o.id = u.id AND o.lock_token = $1::uuid RETURNING 1)`);
  }
  if (groups.release) {
    ctes.push(
      `l AS (UPDATE ${t} SET ${UNLOCK} WHERE id = ANY($${next++}::int8[]) AND lock_token = $1::uuid RETURNING 1)`,
    );
  }
  const counts = ctes.map((cte) => `(SELECT count(*) FROM ${cte.slice(0, 1)})`).join(' + ');
  return `WITH ${ctes.join(',\n')}\nSELECT (${counts})::int AS changed`;
}

export function postgresReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < now()`;
}

/** $1 status, $2 age ms, $3 limit. */
export function postgresPurge(n: OutboxTableNames): string {
  const ts = `CASE WHEN $1 = 'delivered' THEN delivered_at ELSE created_at END`;
  return `DELETE FROM ${n.table} WHERE id IN (
  SELECT id FROM ${n.table} WHERE status = $1 AND ${ts} < now() - $2 * interval '1 millisecond' ORDER BY id LIMIT $3)`;
}

export function postgresRequeueDead(n: OutboxTableNames, withIds: boolean): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = now(), last_error = NULL, ${UNLOCK}
WHERE status = 'dead'${withIds ? ' AND message_id = ANY($1::uuid[])' : ''}`;
}

export function postgresStats(n: OutboxTableNames): string {
  return `SELECT
  count(*) FILTER (WHERE status = 'pending' AND (locked_until IS NULL OR locked_until < now()))::int AS pending,
  count(*) FILTER (WHERE status = 'pending' AND locked_until >= now())::int AS leased,
  count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
  count(*) FILTER (WHERE status = 'dead')::int AS dead,
  extract(epoch FROM (now() - min(created_at) FILTER (WHERE status = 'pending'))) * 1000 AS oldest_ms
FROM ${n.table}`;
}
