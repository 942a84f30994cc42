import type { OutboxTableNames } from '../sql-identifier';

// SQLite has no timestamp type: times are UTC text with milliseconds, which sorts correctly.
const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;
const plusMs = (param: string): string =>
  `strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (${param} / 1000.0) || ' seconds')`;

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
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at TEXT NOT NULL DEFAULT (${NOW}),
  locked_by TEXT,
  lock_token TEXT,
  locked_until TEXT,
  last_error TEXT,
  created_at TEXT NOT NULL DEFAULT (${NOW}),
  delivered_at TEXT
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_pending_idx`)} ON ${t} (id) WHERE status = 'pending'`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_key_idx`)} ON ${t} (message_key, id) WHERE status <> 'delivered' AND message_key IS NOT NULL`,
  ];
}

export function sqliteDropTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}

export function sqliteInsert(n: OutboxTableNames, rows: number, scheduled: boolean): string {
  const row = scheduled ? `(?, ?, ?, ?, ?, ?, COALESCE(?, ${plusMs('?')}))` : '(?, ?, ?, ?, ?, ?)';
  return `INSERT INTO ${n.table} (message_id, topic, message_key, event_type, payload, headers${scheduled ? ', available_at' : ''}) VALUES ${Array.from({ length: rows }, () => row).join(', ')}`;
}

/** Params: owner, token, lease ms, limit. SQLite serialises writers, so one UPDATE is atomic. */
export function sqliteClaim(n: OutboxTableNames, ordered: boolean, deadBlocksKey: boolean): string {
  const blocking = deadBlocksKey ? `e.status IN ('pending', 'dead')` : `e.status = 'pending'`;
  const head = ordered
    ? `AND (c.message_key IS NULL OR NOT EXISTS (SELECT 1 FROM ${n.table} AS e WHERE e.message_key = c.message_key AND e.status <> 'delivered' AND ${blocking} AND e.id < c.id))`
    : '';
  return `UPDATE ${n.table} SET locked_by = ?, lock_token = ?, locked_until = ${plusMs('?')}
WHERE id IN (
  SELECT c.id FROM ${n.table} AS c
  WHERE c.status = 'pending' AND c.available_at <= ${NOW} AND (c.locked_until IS NULL OR c.locked_until < ${NOW}) ${head}
  ORDER BY c.id LIMIT ?)
RETURNING id, message_id, topic, message_key, event_type, payload, headers, attempts, created_at,
  (julianday('now') - julianday(created_at)) * 86400000.0 AS age_ms`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

/** Params: token, JSON array of ids. */
export function sqliteSettleDelivered(n: OutboxTableNames, deleteDelivered: boolean): string {
  const ids = 'id IN (SELECT value FROM json_each(?))';
  return deleteDelivered
    ? `DELETE FROM ${n.table} WHERE lock_token = ? AND ${ids}`
    : `UPDATE ${n.table} SET status = 'delivered', delivered_at = ${NOW}, ${UNLOCK} WHERE lock_token = ? AND ${ids}`;
}

/** Params: JSON array of [id, delay ms, error], token. */
export function sqliteSettleRetry(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET attempts = attempts + 1, available_at = ${plusMs('u.delay')}, last_error = u.err, ${UNLOCK}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS delay, value ->> 2 AS err FROM json_each(?)) AS u
WHERE ${n.table}.id = u.id AND ${n.table}.lock_token = ?`;
}

/** Params: JSON array of [id, error], token. */
export function sqliteSettleDead(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'dead', attempts = attempts + 1, last_error = u.err, ${UNLOCK}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS err FROM json_each(?)) AS u
WHERE ${n.table}.id = u.id AND ${n.table}.lock_token = ?`;
}

/** Params: token, JSON array of ids. */
export function sqliteRelease(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE lock_token = ? AND id IN (SELECT value FROM json_each(?))`;
}

export function sqliteReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < ${NOW}`;
}

/** Params: status, age ms, limit. */
export function sqlitePurge(n: OutboxTableNames, status: 'delivered' | 'dead'): string {
  const ts = status === 'delivered' ? 'delivered_at' : 'created_at';
  return `DELETE FROM ${n.table} WHERE id IN (
  SELECT id FROM ${n.table} WHERE status = ? AND ${ts} < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds') ORDER BY id LIMIT ?)`;
}

/** Params: JSON array of message ids, when given. */
export function sqliteRequeueDead(n: OutboxTableNames, withIds: boolean): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = ${NOW}, last_error = NULL, ${UNLOCK}
WHERE status = 'dead'${withIds ? ' AND message_id IN (SELECT value FROM json_each(?))' : ''}`;
}

export function sqliteStats(n: OutboxTableNames): string {
  return `SELECT
  COALESCE(SUM(status = 'pending' AND (locked_until IS NULL OR locked_until < ${NOW})), 0) AS pending,
  COALESCE(SUM(status = 'pending' AND locked_until >= ${NOW}), 0) AS leased,
  COALESCE(SUM(status = 'delivered'), 0) AS delivered,
  COALESCE(SUM(status = 'dead'), 0) AS dead,
  (julianday('now') - julianday(MIN(CASE WHEN status = 'pending' THEN created_at END))) * 86400000.0 AS oldest_ms
FROM ${n.table}`;
}
