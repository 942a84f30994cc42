import { SqlParams } from '../sql-params';
import { blockingStatuses, type AdminDialect } from '../admin-dialect';

// Times are UTC text with milliseconds (see the store), which compare and sort as text.
const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;
const ago = (param: string): string =>
  `strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (${param} / 1000.0) || ' seconds')`;
const ms = (from: string): string => `(julianday('now') - julianday(${from})) * 86400000.0`;
const utc = (at: Date): string => at.toISOString().replace('T', ' ').replace('Z', '');

const SUMMARY = `o.id, o.message_id, o.topic, o.message_key, o.event_type, o.status, o.attempts, o.last_error,
  o.last_attempt_at, o.available_at, o.created_at, o.delivered_at, o.dead_at, o.locked_by, o.locked_until,
  ${ms('o.created_at')} AS age_ms`;

/** SQLite 3.35+ (better-sqlite3). */
export const sqliteAdmin: AdminDialect = {
  params: () => new SqlParams('positional'),
  summaryColumns: SUMMARY,
  detailColumns: `${SUMMARY}, o.payload, o.headers, o.lock_token`,
  statusIn: (p, statuses) =>
    `o.status IN (SELECT value FROM json_each(${p.add(JSON.stringify(statuses))}))`,
  messageIdIs: (p, messageId) => `o.message_id = ${p.add(messageId)}`,
  // instr, not LIKE: the text is searched for as it is. SQLite's lower() folds ASCII only.
  errorContains: (p, text) => `instr(lower(o.last_error), lower(${p.add(text)})) > 0`,
  createdBefore: (p, at) => `o.created_at < ${p.add(utc(at))}`,
  createdAtOrAfter: (p, at) => `o.created_at >= ${p.add(utc(at))}`,
  createdOlderThan: (p, olderMs) => `o.created_at < ${ago(p.add(olderMs))}`,
  idAfter: (p, id) => `o.id > CAST(${p.add(id)} AS INTEGER)`,
  idAtMost: (p, id) => `o.id <= CAST(${p.add(id)} AS INTEGER)`,
  maxId: (n) => `SELECT CAST(max(id) AS TEXT) AS id FROM ${n.table}`,
  counts: (n, where) => `SELECT o.topic, o.status,
  CASE WHEN o.status = 'pending' AND o.locked_until >= ${NOW} THEN 1 ELSE 0 END AS leased, count(*) AS n
FROM ${n.table} AS o WHERE ${where}
GROUP BY 1, 2, 3`,
  blockedKeys: (n, p, deadBlocksKey, after, limit) => {
    const t = n.table;
    const from = after === null ? '' : `AND o.id > CAST(${p.add(after)} AS INTEGER)`;
    const followers = `FROM ${t} AS w WHERE w.message_key = h.k AND w.id > h.head AND w.status IN ('pending', 'waiting')`;
    return `SELECT * FROM (
  SELECT h.k AS message_key, CAST(o.id AS TEXT) AS head_id, o.message_id AS head_message_id, o.status AS head_status,
    o.attempts, o.last_error, o.available_at, o.id AS head_order,
    (SELECT count(*) ${followers}) AS waiting,
    (SELECT ${ms('min(w.created_at)')} ${followers}) AS oldest_waiting_ms
  FROM (
    SELECT message_key AS k, min(id) AS head FROM ${t}
    WHERE message_key IS NOT NULL AND status IN ${blockingStatuses(deadBlocksKey)}
    GROUP BY message_key) AS h
  JOIN ${t} AS o ON o.id = h.head
  WHERE (o.status = 'dead' OR (o.status = 'pending' AND o.available_at > ${NOW}
      AND (o.locked_until IS NULL OR o.locked_until < ${NOW}) AND (o.attempts > 0 OR o.last_error IS NOT NULL)))
    ${from}) AS b
WHERE b.waiting > 0
ORDER BY b.head_order
LIMIT ${p.add(limit)}`;
  },
  stuckLeases: (n, p, longerThanMs, after, limit) => {
    const long = longerThanMs === null ? '' : ` OR o.last_attempt_at < ${ago(p.add(longerThanMs))}`;
    const from = after === null ? '' : `AND o.id > CAST(${p.add(after)} AS INTEGER)`;
    return `SELECT ${SUMMARY},
  CASE WHEN o.locked_until < ${NOW} THEN 1 ELSE 0 END AS lease_expired, ${ms('o.last_attempt_at')} AS leased_ms
FROM ${n.table} AS o
WHERE o.status = 'pending' AND o.locked_until IS NOT NULL AND (o.locked_until < ${NOW}${long}) ${from}
ORDER BY o.id
LIMIT ${p.add(limit)}`;
  },
};
