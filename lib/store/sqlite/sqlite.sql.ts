import type { PurgeTypes } from '../ports/outbox-store.port';
import { eventTypeFilter } from '../shared-sql/event-type-filter';
import { blockingCondition, someDeadSkip, andDeadRowSkips } from '../shared-sql/dead-blocking';
import { ARCHIVE_INSERT_COLUMNS, archivedValues } from '../shared-sql/outbox-archive';
import {
  ATTEMPT_COLUMNS,
  ATTEMPT_HISTORY_LIMIT,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from '../shared-sql/attempt-history';
import {
  dropTableDdl,
  partialIndexesDdl,
  type IndexCatalogQuery,
} from '../schema/partial-indexes.sql';
import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { payloadColumnDefinitions, type PayloadColumnTypes } from '../schema/payload-columns';

export const SQLITE_PAYLOAD_TYPES: PayloadColumnTypes = {
  text: () => 'TEXT',
  bytes: 'BLOB',
  json: 'TEXT',
};

const EXTENDED_COLUMNS = ', payload_encoding, content_type, payload_bytes, broker_attributes';

// SQLite has no timestamp type: times are UTC text with milliseconds, which sorts correctly.
const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;
const plusMs = (param: string): string =>
  `strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (${param} / 1000.0) || ' seconds')`;
const minusMs = (param: string): string =>
  `strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (${param} / 1000.0) || ' seconds')`;

/** DDL of the outbox table on SQLite 3.35+. */
export function sqliteCreateTable(n: OutboxTableNames): string[] {
  const t = n.table;
  return [
    `CREATE TABLE IF NOT EXISTS ${t} (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id TEXT NOT NULL UNIQUE,
  topic TEXT NOT NULL,
  message_key TEXT,
  event_type TEXT NOT NULL,
  payload TEXT NOT NULL,
  headers TEXT NOT NULL DEFAULT '{}',
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'waiting', 'delivered', 'dead')),
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at TEXT NOT NULL DEFAULT (${NOW}),
  locked_by TEXT,
  lock_token TEXT,
  locked_until TEXT,
  last_error TEXT,
  last_attempt_at TEXT,
  created_at TEXT NOT NULL DEFAULT (${NOW}),
  delivered_at TEXT,
  dead_at TEXT,
  ${payloadColumnDefinitions(SQLITE_PAYLOAD_TYPES).join(',\n  ')}
)`,
    ...partialIndexesDdl(n),
  ];
}

export const sqliteDropTable = dropTableDdl;

/** DDL of the attempt history (see attempt-history.ts). AUTOINCREMENT: ids never come back. */
export function sqliteCreateHistoryTable(
  n: OutboxTableNames,
  outcomes?: readonly string[],
): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.attemptsTable} (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  locked_by TEXT,
  error_class TEXT,
  error TEXT,
  failed_at TEXT NOT NULL DEFAULT (${NOW}),
  CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck(outcomes)}
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_attempts_msg`)} ON ${n.attemptsTable} (message_id, id)`,
  ];
}

export function sqliteDropHistoryTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.attemptsTable}`];
}

/** DDL of the archive (see outbox-archive.ts), indexed for lookups by message and by age. */
export function sqliteCreateArchiveTable(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.archiveTable} (
  archive_id INTEGER PRIMARY KEY AUTOINCREMENT,
  outbox_id INTEGER NOT NULL,
  message_id TEXT NOT NULL,
  topic TEXT NOT NULL,
  message_key TEXT,
  event_type TEXT NOT NULL,
  payload TEXT NOT NULL,
  headers TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  last_error TEXT,
  last_attempt_at TEXT,
  created_at TEXT NOT NULL,
  delivered_at TEXT,
  dead_at TEXT,
  ${payloadColumnDefinitions(SQLITE_PAYLOAD_TYPES).join(',\n  ')},
  archived_at TEXT NOT NULL DEFAULT (${NOW})
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_archive_msg`)} ON ${n.archiveTable} (message_id)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_archive_at`)} ON ${n.archiveTable} (archived_at)`,
  ];
}

export function sqliteInsert(
  n: OutboxTableNames,
  rows: number,
  scheduled: boolean,
  idempotent = false,
  extended = false,
): string {
  const values = extended ? '?, ?, ?, ?, ?, ?, ?, ?, ?, ?' : '?, ?, ?, ?, ?, ?';
  const row = scheduled ? `(${values}, COALESCE(?, ${plusMs('?')}))` : `(${values})`;
  // The ids it returns are the ones written, so the caller learns which were already there.
  const skip = idempotent ? ' ON CONFLICT (message_id) DO NOTHING RETURNING message_id AS id' : '';
  return `INSERT INTO ${n.table} (message_id, topic, message_key, event_type, payload, headers${extended ? EXTENDED_COLUMNS : ''}${scheduled ? ', available_at' : ''}) VALUES ${Array.from({ length: rows }, () => row).join(', ')}${skip}`;
}

// SQLite uses a partial index only when the query's WHERE visibly implies the index's: every
// lookup of a key's rows repeats `status <> 'delivered'`, or it scans the table instead of
// `<table>_key_idx`.
const UNDELIVERED = (alias: string): string => `${alias}.status <> 'delivered'`;

/**
 * `INDEXED BY` the key index, for every lookup of a key's rows. Without it, after an ANALYZE
 * taken while one key fills the table, SQLite believes any key matches nearly every row and
 * answers `e.message_key = ? AND e.id < ?` by walking the rowid range, that is the big key's
 * whole backlog, for every window row (4.9 s per claim over 100 000 rows). With it the plan is
 * one probe of `(message_key, id)` whatever the statistics say.
 */
const BY_KEY = (n: OutboxTableNames): string => `INDEXED BY ${n.quote(`${n.tableName}_key_idx`)}`;

/**
 * Params: window. The due rows in due order, each with the blocking row of its key right before
 * it (`prev`, null for a key's head and for rows without a key): a row is held back when
 * `prev` is set, and it follows its key's head in a run when `prev` is a window row in that run
 * (see SqliteOutboxStore.claim). One backward probe of the key index per row, stopping at the
 * first blocking row, as cheap as an existence check. Runs inside the claim's write transaction.
 */
export function sqliteClaimWindow(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  /**
   * A tenant-fair claim's share (docs/tenants.md): one tenant's rows (`one`, its id the first
   * parameter) or those without one (`none`), read through the tenant index. The key probe
   * still sees every tenant.
   */
  tenant: 'all' | 'one' | 'none' = 'all',
): string {
  const t = n.table;
  const prev = policy.ordered
    ? `(SELECT e.id FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = c.message_key AND ${UNDELIVERED('e')} AND e.id < c.id AND ${blockingCondition('e', policy)} ORDER BY e.id DESC LIMIT 1)`
    : 'NULL';
  const index = tenant === 'all' ? `${n.tableName}_pending_idx` : `${n.tableName}_tenant_idx`;
  const only =
    tenant === 'all' ? '' : tenant === 'one' ? ' AND c.tenant_id = ?' : ' AND c.tenant_id IS NULL';
  return `SELECT c.id, c.message_key, ${prev} AS prev FROM ${t} AS c INDEXED BY ${n.quote(index)}
WHERE c.status = 'pending' AND c.available_at <= ${NOW}${only}
ORDER BY c.available_at, c.id LIMIT ?`;
}

/** Params: owner, token, lease ms, lease ms, JSON array of ids. Leases and counts an attempt. */
export function sqliteClaimLease(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET locked_by = ?, lock_token = ?, locked_until = ${plusMs('?')}, available_at = ${plusMs('?')},
  attempts = attempts + 1, last_attempt_at = ${NOW}
WHERE status = 'pending' AND id IN (SELECT value FROM json_each(?))
RETURNING id, message_id, topic, message_key, event_type, payload, headers, attempts, created_at,
  payload_encoding, content_type, payload_bytes, broker_attributes,
  (julianday('now') - julianday(created_at)) * 86400000.0 AS age_ms`;
}

/**
 * Params: JSON array of keys, IN_FLIGHT_GRACE_MS. Those of the keys whose head (first
 * blocking message) is in flight: leased, less than that long ago.
 */
export function sqliteInFlightHeads(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  return `SELECT k.value AS k FROM json_each(?) AS k
WHERE (SELECT e.locked_until > ${NOW} AND e.last_attempt_at > ${minusMs('?')} FROM ${t} AS e ${BY_KEY(n)}
  WHERE e.message_key = k.value AND ${UNDELIVERED('e')} AND ${blockingCondition('e', policy)}
  ORDER BY e.id LIMIT 1)`;
}

/**
 * Params: JSON array of keys. See PostgreSQL's park. The followers through the key index too:
 * under statistics taken while the table was nearly empty SQLite scanned the whole table for
 * them, delivered history included (1.4 × the time over 300 000 delivered rows, growing with
 * the history; docs/performance.md, "The park under stale statistics").
 */
export function sqlitePark(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  return `UPDATE ${t} ${BY_KEY(n)} SET status = 'waiting'
WHERE status = 'pending' AND status <> 'delivered' AND message_key IN (SELECT value FROM json_each(?))
  AND (locked_until IS NULL OR locked_until < ${NOW})
  AND id > (SELECT min(e.id) FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = ${t}.message_key AND ${UNDELIVERED('e')} AND ${blockingCondition('e', policy)})`;
}

/**
 * Params: JSON array of keys, the longest run less one. Makes the next waiting messages of each
 * key claimable when its first blocking row is waiting (nothing earlier holds it back): every
 * waiting row among its first maxRun blocking rows, which the next claim can take as one run.
 * `bound` is the key's blocking row right after those (its maxRun + 1st), found by one probe of
 * the key index that stops there: the rows promoted lie between the first waiting row and it.
 * CROSS JOIN keeps the keys the outer loop (SQLite then searches the key index per key, never
 * scans it whole).
 */
export function sqlitePromote(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  return `WITH f AS (
  SELECT k.value AS key,
    (SELECT w.id FROM ${t} AS w ${BY_KEY(n)} WHERE w.message_key = k.value AND ${UNDELIVERED('w')} AND w.status = 'waiting' ORDER BY w.id LIMIT 1) AS first
  FROM json_each(?) AS k),
h AS (
  SELECT f.key, f.first,
    (SELECT e.id FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = f.key AND ${UNDELIVERED('e')} AND e.id > f.first AND ${blockingCondition('e', policy)} ORDER BY e.id LIMIT 1 OFFSET ?) AS bound
  FROM f
  WHERE f.first IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = f.key AND ${UNDELIVERED('e')} AND e.id < f.first AND ${blockingCondition('e', policy)}))
UPDATE ${t} SET status = 'pending'
WHERE status = 'waiting' AND id IN (
  SELECT x.id FROM h CROSS JOIN ${t} AS x ${BY_KEY(n)}
  WHERE x.message_key = h.key AND ${UNDELIVERED('x')} AND x.id >= h.first AND x.id < coalesce(h.bound, 9223372036854775807)
    AND x.status = 'waiting')`;
}

/** Params: limit. Keys whose first waiting message has nothing earlier holding it back. */
export function sqliteOrphanKeys(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  return `SELECT DISTINCT w.message_key AS key FROM ${t} AS w
WHERE w.status = 'waiting' AND ${UNDELIVERED('w')} AND w.message_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = w.message_key AND ${UNDELIVERED('e')} AND e.id < w.id AND ${blockingCondition('e', policy)})
LIMIT ?`;
}

/** Params: limit. Without ordering nothing waits. */
export function sqliteReleaseAllWaiting(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'pending' WHERE id IN (SELECT id FROM ${n.table} WHERE status = 'waiting' LIMIT ?)`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

/** Params: token, JSON array of ids. */
export function sqliteSettleDelivered(n: OutboxTableNames, deleteDelivered: boolean): string {
  const ids = 'id IN (SELECT value FROM json_each(?))';
  return deleteDelivered
    ? `DELETE FROM ${n.table} WHERE lock_token = ? AND ${ids}`
    : `UPDATE ${n.table} SET status = 'delivered', delivered_at = ${NOW}, ${UNLOCK} WHERE lock_token = ? AND ${ids}`;
}

/** Params: JSON array of [id, delay ms, error], token. The claim counted the attempt. */
export function sqliteSettleRetry(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET available_at = ${plusMs('u.delay')}, last_error = u.err, ${UNLOCK}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS delay, value ->> 2 AS err FROM json_each(?)) AS u
WHERE ${n.table}.id = u.id AND ${n.table}.lock_token = ?`;
}

/**
 * Params: JSON array of [id, error, back], token; `back` 1 gives the claim's attempt back (it
 * expired before its publish).
 */
export function sqliteSettleDead(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'dead', dead_at = ${NOW}, last_error = u.err,
  attempts = max(attempts - u.back, 0), ${UNLOCK}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS err, value ->> 2 AS back FROM json_each(?)) AS u
WHERE ${n.table}.id = u.id AND ${n.table}.lock_token = ?`;
}

/** Params: JSON array of [id, delay ms, error or null], token. Gives the claim's attempt back. */
export function sqliteRelease(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET attempts = max(attempts - 1, 0), available_at = ${plusMs('u.delay')},
  last_error = coalesce(u.err, ${n.table}.last_error), ${UNLOCK}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS delay, value ->> 2 AS err FROM json_each(?)) AS u
WHERE ${n.table}.id = u.id AND ${n.table}.lock_token = ?`;
}

/**
 * Params: JSON array of [id, outcome, error class, error], token. Records the failures of a
 * settle in the attempt history before the updates clear the lease: only rows still holding
 * the token, with the claim's attempt (a release gives it back afterwards).
 */
export function sqliteRecordAttempts(n: OutboxTableNames): string {
  return `INSERT INTO ${n.attemptsTable} (${ATTEMPT_COLUMNS})
SELECT o.message_id, o.attempts, u.outcome, o.locked_by, u.cls, u.err
FROM ${n.table} AS o JOIN (SELECT value ->> 0 AS id, value ->> 1 AS outcome, value ->> 2 AS cls, value ->> 3 AS err FROM json_each(?)) AS u ON o.id = u.id
WHERE o.lock_token = ?
ORDER BY o.id`;
}

/** Params: JSON array of row ids. Keeps the latest ATTEMPT_HISTORY_LIMIT attempts of their messages. */
export function sqliteBoundAttempts(n: OutboxTableNames): string {
  const h = n.attemptsTable;
  return `DELETE FROM ${h} WHERE id IN (
  SELECT s.id FROM (
    SELECT a.id, row_number() OVER (PARTITION BY a.message_id ORDER BY a.id DESC) AS n
    FROM ${h} AS a WHERE a.message_id IN (SELECT o.message_id FROM ${n.table} AS o WHERE o.id IN (SELECT value FROM json_each(?)))) AS s
  WHERE s.n > ${ATTEMPT_HISTORY_LIMIT})`;
}

/** Params: token, JSON array of row ids. The history of delivered rows about to be deleted. */
export function sqliteDeleteDeliveredAttempts(n: OutboxTableNames): string {
  return `DELETE FROM ${n.attemptsTable} WHERE message_id IN (
  SELECT message_id FROM ${n.table} WHERE lock_token = ? AND id IN (SELECT value FROM json_each(?)))`;
}

/** Params: JSON array of message ids. The history of deleted messages. */
export function sqliteDeleteAttempts(n: OutboxTableNames): string {
  return `DELETE FROM ${n.attemptsTable} WHERE message_id IN (SELECT value FROM json_each(?))`;
}

/** Params: the lost claim's token; due at once again (the claim set available_at to its lease end). See OutboxStore.releaseClaim. */
export function sqliteReleaseClaim(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET attempts = MAX(attempts - 1, 0), available_at = ${NOW}, ${UNLOCK} WHERE status = 'pending' AND lock_token = ?`;
}

/**
 * Params: lease ms twice, the new token or null, the batch's token, JSON array of row ids. Lease
 * renewal: only rows still leased with the token and pending move their lease end, and
 * `available_at` with it, and take the new token. See OutboxStore.renewLease.
 */
export function sqliteRenewLease(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET locked_until = ${plusMs('?')}, available_at = ${plusMs('?')},
  lock_token = COALESCE(?, lock_token)
WHERE lock_token = ? AND status = 'pending' AND id IN (SELECT value FROM json_each(?))`;
}

export function sqliteReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < ${NOW}`;
}

/** Params: age ms, limit. Returns the keys of the deleted rows. */
export function sqlitePurge(
  n: OutboxTableNames,
  status: 'delivered' | 'dead',
  types?: PurgeTypes,
): string {
  return `DELETE FROM ${n.table} WHERE id IN (${sqlitePurgeCandidates(n, status, types)})
RETURNING message_key AS key, message_id`;
}

/** Params: age ms, limit. The ids of the rows to purge, oldest first. */
export function sqlitePurgeCandidates(
  n: OutboxTableNames,
  status: 'delivered' | 'dead',
  types?: PurgeTypes,
): string {
  // As on PostgreSQL: the status literal matches the partial cut-off index, read in its order.
  const ts = status === 'delivered' ? 'delivered_at' : 'dead_at';
  return `SELECT id FROM ${n.table} WHERE status = '${status}' AND ${ts} < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds')${eventTypeFilter(types)} ORDER BY ${ts} LIMIT ?`;
}

/**
 * Params: limit, age ms. Deletes the oldest rows written before the cut-off, whatever their
 * status (delivery 'external'; see postgresPurgeByAge). Returns the keys of the deleted rows.
 */
export function sqlitePurgeByAge(n: OutboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE id IN (SELECT id FROM (SELECT id, created_at FROM ${n.table} ORDER BY id LIMIT ?)
  WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds'))
RETURNING message_key AS key, message_id`;
}

/** Params: JSON array of row ids. Copies the rows about to be purged into the archive. */
export function sqliteArchiveByIds(n: OutboxTableNames): string {
  return `INSERT INTO ${n.archiveTable} (${ARCHIVE_INSERT_COLUMNS})
SELECT ${archivedValues('o')} FROM ${n.table} AS o WHERE o.id IN (SELECT value FROM json_each(?)) ORDER BY o.id`;
}

/** Params: JSON array of row ids. Returns the keys of the deleted rows. */
export function sqliteDeleteByIds(n: OutboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE id IN (SELECT value FROM json_each(?))
RETURNING message_key AS key, message_id`;
}

const REQUEUE_COLUMNS =
  'message_id, topic, message_key, event_type, payload, headers, payload_encoding, content_type, payload_bytes, broker_attributes, created_at';

/** Params: JSON array of message ids, when given. See PostgreSQL's postgresDeadToRequeue. */
export function sqliteDeadToRequeue(
  n: OutboxTableNames,
  withIds: boolean,
  policy: OutboxQueuePolicy,
): string {
  const t = n.table;
  const overtaken =
    policy.ordered && someDeadSkip(policy)
      ? `(d.message_key IS NOT NULL${andDeadRowSkips('d', policy)} AND EXISTS (
    SELECT 1 FROM ${t} AS e ${BY_KEY(n)} WHERE e.message_key = d.message_key AND ${UNDELIVERED('e')} AND e.id > d.id AND e.status IN ('pending', 'waiting')))`
      : '0';
  return `SELECT d.id, ${REQUEUE_COLUMNS.split(', ')
    .map((c) => `d.${c}`)
    .join(', ')},
  ${overtaken} AS overtaken
FROM ${t} AS d WHERE d.status = 'dead'${withIds ? ' AND d.message_id IN (SELECT value FROM json_each(?))' : ''}
ORDER BY d.id`;
}

/** Params: JSON array of message ids. Returns the keys of the deleted rows. */
export function sqliteDeleteDeadByMessageIds(n: OutboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE status = 'dead' AND message_id IN (SELECT value FROM json_each(?))
RETURNING message_key AS key, message_id`;
}

/** Params: JSON array of ids. */
export function sqliteRequeueInPlace(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = ${NOW}, last_error = NULL, dead_at = NULL, ${UNLOCK}
WHERE status = 'dead' AND id IN (SELECT value FROM json_each(?))`;
}

/** Params: JSON array of ids. */
export function sqliteDeleteDead(n: OutboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE status = 'dead' AND id IN (SELECT value FROM json_each(?))`;
}

/** Re-inserts requeued rows at the end of the queue: params, per row, the REQUEUE_COLUMNS. */
export function sqliteReinsert(n: OutboxTableNames, rows: number): string {
  const row = '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)';
  return `INSERT INTO ${n.table} (${REQUEUE_COLUMNS}) VALUES ${Array.from({ length: rows }, () => row).join(', ')}`;
}

export function sqliteStats(n: OutboxTableNames): string {
  return `SELECT
  COALESCE(SUM(status = 'waiting' OR (status = 'pending' AND (locked_until IS NULL OR locked_until < ${NOW}))), 0) AS pending,
  COALESCE(SUM(status = 'pending' AND locked_until >= ${NOW}), 0) AS leased,
  COALESCE(SUM(status = 'delivered'), 0) AS delivered,
  COALESCE(SUM(status = 'dead'), 0) AS dead,
  (julianday('now') - julianday(MIN(CASE WHEN status IN ('pending', 'waiting') THEN created_at END))) * 86400000.0 AS oldest_ms
FROM ${n.table}`;
}

/** Whether a message is due: one probe of the pending index (see OutboxStore.hasDue). */
export function sqliteHasDue(n: OutboxTableNames): string {
  return `SELECT EXISTS (SELECT 1 FROM ${n.table} WHERE status = 'pending' AND available_at <= ${NOW}) AS due`;
}

/** The table's indexes of these names. */
export const sqliteIndexCatalog: IndexCatalogQuery = (n, [a, b]) => ({
  text: `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name IN (?, ?)`,
  params: [n.tableName, a, b],
});
