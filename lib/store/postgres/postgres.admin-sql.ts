import { SqlParams } from '../sql-params';
import { blockingStatuses, type AdminDialect } from '../admin-dialect';

const ms = (from: string, to: string): string => `extract(epoch FROM (${to} - ${from})) * 1000`;

const SUMMARY = `o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type,
  o.status, o.attempts, o.last_error, o.last_attempt_at, o.available_at, o.created_at, o.delivered_at,
  o.dead_at, o.locked_by, o.locked_until, ${ms('o.created_at', 'now()')} AS age_ms`;

/** PostgreSQL: timestamptz columns come back as Dates; ids and uuids are cast to text. */
export const postgresAdmin: AdminDialect = {
  params: () => new SqlParams('numbered'),
  summaryColumns: SUMMARY,
  detailColumns: `${SUMMARY}, o.payload::text AS payload, o.headers::text AS headers, o.lock_token::text AS lock_token`,
  attemptColumns: 'o.attempt, o.outcome, o.locked_by, o.error_class, o.error, o.failed_at',
  statusIn: (p, statuses) => `o.status = ANY(${p.add(statuses)}::text[])`,
  messageIdIs: (p, messageId) => `o.message_id = ${p.add(messageId)}::uuid`,
  // strpos, not LIKE: the operator's text is searched for as it is, wildcards included.
  errorContains: (p, text) => `strpos(lower(o.last_error), lower(${p.add(text)}::text)) > 0`,
  createdBefore: (p, at) => `o.created_at < ${p.add(at.toISOString())}::timestamptz`,
  createdAtOrAfter: (p, at) => `o.created_at >= ${p.add(at.toISOString())}::timestamptz`,
  createdOlderThan: (p, olderMs) =>
    `o.created_at < now() - ${p.add(olderMs)}::float8 * interval '1 millisecond'`,
  idAfter: (p, id) => `o.id > ${p.add(id)}::int8`,
  idAtMost: (p, id) => `o.id <= ${p.add(id)}::int8`,
  maxId: (n) => `SELECT max(id)::text AS id FROM ${n.table}`,
  counts: (n, where) => `SELECT o.topic, o.status,
  CASE WHEN o.status = 'pending' AND o.locked_until >= now() THEN 1 ELSE 0 END AS leased, count(*)::int AS n
FROM ${n.table} AS o WHERE ${where}
GROUP BY 1, 2, 3`,
  blockedKeys: (n, p, deadBlocksKey, after, limit) => {
    const t = n.table;
    const from = after === null ? '' : `AND o.id > ${p.add(after)}::int8`;
    return `WITH h AS (
  SELECT message_key AS k, min(id) AS head FROM ${t}
  WHERE message_key IS NOT NULL AND status IN ${blockingStatuses(deadBlocksKey)}
  GROUP BY message_key)
SELECT h.k AS message_key, o.id::text AS head_id, o.message_id::text AS head_message_id, o.status AS head_status,
  o.attempts, o.last_error, o.available_at, f.waiting::int AS waiting, ${ms('f.oldest', 'now()')} AS oldest_waiting_ms
FROM h JOIN ${t} AS o ON o.id = h.head
CROSS JOIN LATERAL (
  SELECT count(*) AS waiting, min(w.created_at) AS oldest FROM ${t} AS w
  WHERE w.message_key = h.k AND w.id > h.head AND w.status IN ('pending', 'waiting')) AS f
WHERE f.waiting > 0 ${from}
  AND (o.status = 'dead' OR (o.status = 'pending' AND o.available_at > now()
    AND (o.locked_until IS NULL OR o.locked_until < now()) AND (o.attempts > 0 OR o.last_error IS NOT NULL)))
ORDER BY o.id
LIMIT ${p.add(limit)}`;
  },
  stuckLeases: (n, p, longerThanMs, after, limit) => {
    const long =
      longerThanMs === null
        ? ''
        : ` OR o.last_attempt_at < now() - ${p.add(longerThanMs)}::float8 * interval '1 millisecond'`;
    const from = after === null ? '' : `AND o.id > ${p.add(after)}::int8`;
    return `SELECT ${SUMMARY},
  CASE WHEN o.locked_until < now() THEN 1 ELSE 0 END AS lease_expired,
  ${ms('o.last_attempt_at', 'now()')} AS leased_ms
FROM ${n.table} AS o
WHERE o.status = 'pending' AND o.locked_until IS NOT NULL AND (o.locked_until < now()${long}) ${from}
ORDER BY o.id
LIMIT ${p.add(limit)}`;
  },
};
