import { utcText } from '../shared-sql/sql-values';
import { SqlParams } from '../shared-sql/sql-params';
import { activityParts, type AdminDialect } from '../shared-sql/admin-dialect';
import {
  correlatedAdminQueries,
  type CorrelatedAdminVocabulary,
} from '../shared-sql/correlated-admin-sql';

// Times are UTC in zone-less DATETIME columns (see the store): compared with UTC_TIMESTAMP and
// read as formatted text, because the driver would read a DATETIME in the connection's zone.
const NOW = 'UTC_TIMESTAMP(6)';
const ts = (column: string, alias: string): string =>
  `DATE_FORMAT(${column}, '%Y-%m-%d %H:%i:%s.%f') AS ${alias}`;
const ms = (from: string): string => `TIMESTAMPDIFF(MICROSECOND, ${from}, ${NOW}) / 1000`;
const list = (p: SqlParams, values: readonly string[]): string =>
  values.map((v) => p.add(v)).join(', ');
// A DATETIME literal in UTC.
const SUMMARY = `o.id, o.message_id, o.topic, o.message_key, o.event_type, o.status, o.attempts, o.last_error,
  ${ts('o.last_attempt_at', 'last_attempt_at')}, ${ts('o.available_at', 'available_at')},
  ${ts('o.created_at', 'created_at')}, ${ts('o.delivered_at', 'delivered_at')}, ${ts('o.dead_at', 'dead_at')},
  o.locked_by, ${ts('o.locked_until', 'locked_until')}, ${ms('o.created_at')} AS age_ms, o.headers`;

const VOCABULARY: CorrelatedAdminVocabulary = {
  now: NOW,
  ms,
  timestamp: ts,
  olderThan: (column, p, olderMs) =>
    `${column} < ${NOW} - INTERVAL ${p.add(Math.round(olderMs * 1000))} MICROSECOND`,
  integer: 'SIGNED',
  text: 'CHAR',
  count: 'COUNT',
  min: 'MIN',
  summary: SUMMARY,
};

/** MySQL 8 / MariaDB 10.6+ (MariaDB has no LATERAL: correlated subqueries instead). */
export const mysqlAdmin: AdminDialect = {
  params: () => new SqlParams('positional'),
  summaryColumns: SUMMARY,
  detailColumns: `${SUMMARY}, o.payload, o.lock_token, o.payload_encoding, o.content_type, TO_BASE64(o.payload_bytes) AS payload_bytes, o.broker_attributes`,
  attemptColumns: `o.attempt, o.outcome, o.locked_by, o.error_class, o.error, ${ts('o.failed_at', 'failed_at')}`,
  statusIn: (p, statuses) => `o.status IN (${list(p, statuses)})`,
  messageIdIs: (p, messageId) => `o.message_id = ${p.add(messageId)}`,
  // LOCATE, not LIKE: the text is searched for as it is. LOWER on both sides because the table's
  // collation (utf8mb4_bin) compares case-sensitively.
  errorContains: (p, text) => `LOCATE(LOWER(${p.add(text)}), LOWER(o.last_error)) > 0`,
  createdBefore: (p, at) => `o.created_at < ${p.add(utcText(at))}`,
  createdAtOrAfter: (p, at) => `o.created_at >= ${p.add(utcText(at))}`,
  createdOlderThan: (p, olderMs) =>
    `o.created_at < ${NOW} - INTERVAL ${p.add(Math.round(olderMs * 1000))} MICROSECOND`,
  deliveredBefore: (p, at) => `o.delivered_at < ${p.add(utcText(at))}`,
  deliveredAtOrAfter: (p, at) => `o.delivered_at >= ${p.add(utcText(at))}`,
  // One collation for the outbox's NO PAD columns and the archive's, which a UNION needs.
  deliveredAgeMs: ms('o.delivered_at'),
  headerText: (name) => `JSON_UNQUOTE(JSON_EXTRACT(o.headers, '$."${name}"'))`,
  redriveColumns: (origin) =>
    `${origin} AS origin, o.message_id, o.topic COLLATE utf8mb4_bin AS topic,
  o.message_key COLLATE utf8mb4_bin AS message_key, o.event_type COLLATE utf8mb4_bin AS event_type,
  o.payload, o.headers, o.payload_encoding, o.content_type, TO_BASE64(o.payload_bytes) AS payload_bytes,
  o.broker_attributes, ${ts('o.created_at', 'created_at')}, ${ts('o.delivered_at', 'delivered_at')}`,
  // Cast so the bound text compares as an integer (no float conversion of large ids).
  idAfter: (p, id) => `o.id > CAST(${p.add(id)} AS SIGNED)`,
  idAtMost: (p, id) => `o.id <= CAST(${p.add(id)} AS SIGNED)`,
  listOrder: () => 'o.id',
  maxId: (n) => `SELECT CAST(MAX(id) AS CHAR) AS id FROM ${n.table}`,
  counts: (n, where) => `SELECT o.topic, o.status,
  CASE WHEN o.status = 'pending' AND o.locked_until >= ${NOW} THEN 1 ELSE 0 END AS leased, COUNT(*) AS n
FROM ${n.table} AS o WHERE ${where}
GROUP BY 1, 2, 3`,
  activity: (n, p, withinMs) =>
    activityParts(
      n.table,
      () => `${NOW} - INTERVAL ${p.add(Math.round(withinMs * 1000))} MICROSECOND`,
      ms('MIN(o.created_at)'),
    ),
  ...correlatedAdminQueries(VOCABULARY),
};
