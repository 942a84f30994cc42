import { SqlParams } from '../shared-sql/sql-params';
import { activityParts, type AdminDialect } from '../shared-sql/admin-dialect';
import { blockingCondition } from '../shared-sql/dead-blocking';

const STATUS_CONDITIONS: Readonly<Record<string, string>> = {
  pending: `o.status = 'pending'`,
  waiting: `(o.status = 'waiting' AND o.message_key IS NOT NULL)`,
  delivered: `o.status = 'delivered'`,
  dead: `o.status = 'dead'`,
};

/** A status written into the statement, from the fixed set only (the admin API checked it). */
function statusIs(status: string): string {
  const condition = Object.hasOwn(STATUS_CONDITIONS, status)
    ? STATUS_CONDITIONS[status]
    : undefined;
  if (condition === undefined) throw new Error(`unknown message status ${JSON.stringify(status)}`);
  return condition;
}

const ms = (from: string, to: string): string => `extract(epoch FROM (${to} - ${from})) * 1000`;

// A lease leaves `available_at` where it was (postgresClaim); a leased message is next due when
// its lease ends, as the admin API promises and the other databases store.
const DUE = `CASE WHEN o.status = 'pending' AND o.locked_until > o.available_at THEN o.locked_until ELSE o.available_at END`;

const SUMMARY = `o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type,
  o.status, o.attempts, o.last_error, o.last_attempt_at, ${DUE} AS available_at, o.created_at, o.delivered_at,
  o.dead_at, o.locked_by, o.locked_until, ${ms('o.created_at', 'now()')} AS age_ms, o.headers::text AS headers`;

/** PostgreSQL: timestamptz columns come back as Dates; ids and uuids are cast to text. */
export const postgresAdmin: AdminDialect = {
  params: () => new SqlParams('numbered'),
  summaryColumns: SUMMARY,
  detailColumns: `${SUMMARY}, o.payload::text AS payload, o.lock_token::text AS lock_token, o.payload_encoding, o.content_type, encode(o.payload_bytes, 'base64') AS payload_bytes, o.broker_attributes::text AS broker_attributes`,
  attemptColumns: 'o.attempt, o.outcome, o.locked_by, o.error_class, o.error, o.failed_at',
  // One literal comparison per status, OR-ed: each then matches a partial index (pending, key,
  // delivered, dead) and the planner reads only those rows, where `= ANY(array)` read the whole
  // table. Parked rows always have a key (only a key's order parks one): saying so lets the key
  // index find them.
  statusIn: (_p, statuses) => `(${statuses.map(statusIs).join(' OR ')})`,
  messageIdIs: (p, messageId) => `o.message_id = ${p.add(messageId)}::uuid`,
  // strpos, not LIKE: the operator's text is searched for as it is, wildcards included.
  errorContains: (p, text) => `strpos(lower(o.last_error), lower(${p.add(text)}::text)) > 0`,
  createdBefore: (p, at) => `o.created_at < ${p.add(at.toISOString())}::timestamptz`,
  createdAtOrAfter: (p, at) => `o.created_at >= ${p.add(at.toISOString())}::timestamptz`,
  createdOlderThan: (p, olderMs) =>
    `o.created_at < now() - ${p.add(olderMs)}::float8 * interval '1 millisecond'`,
  deliveredBefore: (p, at) => `o.delivered_at < ${p.add(at.toISOString())}::timestamptz`,
  deliveredAtOrAfter: (p, at) => `o.delivered_at >= ${p.add(at.toISOString())}::timestamptz`,
  deliveredAgeMs: ms('o.delivered_at', 'now()'),
  headerText: (name) => `(o.headers ->> '${name}')`,
  redriveColumns: (origin) =>
    `${origin} AS origin, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type,
  o.payload::text AS payload, o.headers::text AS headers, o.payload_encoding, o.content_type,
  encode(o.payload_bytes, 'base64') AS payload_bytes, o.broker_attributes::text AS broker_attributes,
  o.created_at, o.delivered_at`,
  idAfter: (p, id) => `o.id > ${p.add(id)}::int8`,
  idAtMost: (p, id) => `o.id <= ${p.add(id)}::int8`,
  // Undelivered rows sit at the end of a long delivered history (or dead ones scattered in it),
  // which the planner cannot know: ordered by the primary key it walked millions of delivered
  // rows to fill a page. "+ 0" makes it read the few matching rows through their partial index
  // and sort them instead (bench C1: a page of pending rows under 10 million rows).
  listOrder: (undeliveredOnly) => (undeliveredOnly ? 'o.id + 0' : 'o.id'),
  maxId: (n) => `SELECT max(id)::text AS id FROM ${n.table}`,
  counts: (n, where) => `SELECT o.topic, o.status,
  CASE WHEN o.status = 'pending' AND o.locked_until >= now() THEN 1 ELSE 0 END AS leased, count(*)::int AS n
FROM ${n.table} AS o WHERE ${where}
GROUP BY 1, 2, 3`,
  activity: (n, p, withinMs) => {
    const window = p.add(withinMs);
    const since = (): string => `now() - ${window}::float8 * interval '1 millisecond'`;
    return activityParts(n.table, since, ms('min(o.created_at)', 'now()'));
  },
  blockedKeys: (n, p, policy, after, limit) => {
    const t = n.table;
    const from = after === null ? '' : `AND o.id > ${p.add(after)}::int8`;
    return `WITH h AS (
  SELECT message_key AS k, min(id) AS head FROM ${t}
  WHERE message_key IS NOT NULL AND ${blockingCondition('', policy)}
  GROUP BY message_key)
SELECT h.k AS message_key, o.headers::text AS head_headers, o.id::text AS head_id, o.message_id::text AS head_message_id, o.status AS head_status,
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
  deliveryPartitions: {
    partitions: (n) =>
      `SELECT w.partition, w.owner, w.generation::text AS generation, w.since FROM ${n.ownersTable} AS w ORDER BY w.partition`,
    dispatchers: (n) =>
      `SELECT d.instance, d.label, d.valid_ms, d.working, d.joined_at, ${ms('d.heartbeat_at', 'now()')} AS heartbeat_age_ms
FROM ${n.dispatchersTable} AS d ORDER BY d.instance`,
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
