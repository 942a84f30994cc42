import { utcText } from '../shared-sql/sql-values';
import { SqlParams } from '../shared-sql/sql-params';
import { activityParts, type AdminDialect } from '../shared-sql/admin-dialect';
import {
  correlatedAdminQueries,
  type CorrelatedAdminVocabulary,
} from '../shared-sql/correlated-admin-sql';

// Times are UTC text with milliseconds (see the store), which compare and sort as text.
const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;
const ago = (param: string): string =>
  `strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (${param} / 1000.0) || ' seconds')`;
const ms = (from: string): string => `(julianday('now') - julianday(${from})) * 86400000.0`;
const SUMMARY = `o.id, o.message_id, o.topic, o.message_key, o.event_type, o.status, o.attempts, o.last_error,
  o.last_attempt_at, o.available_at, o.created_at, o.delivered_at, o.dead_at, o.locked_by, o.locked_until,
  ${ms('o.created_at')} AS age_ms, o.headers`;

const VOCABULARY: CorrelatedAdminVocabulary = {
  now: NOW,
  ms,
  timestamp: (column) => column,
  olderThan: (column, p, olderMs) => `${column} < ${ago(p.add(olderMs))}`,
  integer: 'INTEGER',
  text: 'TEXT',
  count: 'count',
  min: 'min',
  summary: SUMMARY,
};

/** SQLite 3.35+ (better-sqlite3). */
export const sqliteAdmin: AdminDialect = {
  params: () => new SqlParams('positional'),
  summaryColumns: SUMMARY,
  detailColumns: `${SUMMARY}, o.payload, o.lock_token, o.payload_encoding, o.content_type, o.payload_bytes, o.broker_attributes`,
  attemptColumns: 'o.attempt, o.outcome, o.locked_by, o.error_class, o.error, o.failed_at',
  statusIn: (p, statuses) =>
    `o.status IN (SELECT value FROM json_each(${p.add(JSON.stringify(statuses))}))`,
  messageIdIs: (p, messageId) => `o.message_id = ${p.add(messageId)}`,
  // instr, not LIKE: the text is searched for as it is. SQLite's lower() folds ASCII only.
  errorContains: (p, text) => `instr(lower(o.last_error), lower(${p.add(text)})) > 0`,
  createdBefore: (p, at) => `o.created_at < ${p.add(utcText(at))}`,
  createdAtOrAfter: (p, at) => `o.created_at >= ${p.add(utcText(at))}`,
  createdOlderThan: (p, olderMs) => `o.created_at < ${ago(p.add(olderMs))}`,
  deliveredBefore: (p, at) => `o.delivered_at < ${p.add(utcText(at))}`,
  deliveredAtOrAfter: (p, at) => `o.delivered_at >= ${p.add(utcText(at))}`,
  deliveredAgeMs: ms('o.delivered_at'),
  headerText: (name) => `json_extract(o.headers, '$."${name}"')`,
  redriveColumns: (origin) =>
    `${origin} AS origin, o.message_id, o.topic, o.message_key, o.event_type, o.payload, o.headers,
  o.payload_encoding, o.content_type, o.payload_bytes, o.broker_attributes, o.created_at, o.delivered_at`,
  idAfter: (p, id) => `o.id > CAST(${p.add(id)} AS INTEGER)`,
  idAtMost: (p, id) => `o.id <= CAST(${p.add(id)} AS INTEGER)`,
  listOrder: () => 'o.id',
  maxId: (n) => `SELECT CAST(max(id) AS TEXT) AS id FROM ${n.table}`,
  counts: (n, where) => `SELECT o.topic, o.status,
  CASE WHEN o.status = 'pending' AND o.locked_until >= ${NOW} THEN 1 ELSE 0 END AS leased, count(*) AS n
FROM ${n.table} AS o WHERE ${where}
GROUP BY 1, 2, 3`,
  activity: (n, p, withinMs) =>
    activityParts(n.table, () => ago(p.add(withinMs)), ms('min(o.created_at)')),
  ...correlatedAdminQueries(VOCABULARY),
};
