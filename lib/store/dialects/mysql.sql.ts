import type { OutboxTableNames } from '../sql-identifier';

/** Number of per-key lock rows; keys hash onto them, so unrelated keys rarely wait on each other. */
export const MYSQL_KEY_LOCK_BUCKETS = 1024;

// Every timestamp is UTC_TIMESTAMP(6): DATETIME has no zone, and sessions may differ in theirs.
const NOW = 'UTC_TIMESTAMP(6)';

/** DDL of the outbox table on MySQL 8.0.13+ and MariaDB 10.6+. */
export function mysqlCreateTable(n: OutboxTableNames): string[] {
  const t = n.table;
  // 4^5 = MYSQL_KEY_LOCK_BUCKETS rows from five base-4 digits (recursive CTEs stop at 1000 rows).
  const digit = '(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)';
  return [
    `CREATE TABLE IF NOT EXISTS ${t} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  message_id CHAR(36) CHARACTER SET ascii NOT NULL,
  topic VARCHAR(255) NOT NULL,
  message_key VARCHAR(255) NULL,
  event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL,
  headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending',
  attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  locked_by VARCHAR(128) NULL,
  lock_token CHAR(36) CHARACTER SET ascii NULL,
  locked_until DATETIME(6) NULL,
  last_error TEXT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  delivered_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY ${n.quote(`${n.tableName}_message_id_key`)} (message_id),
  KEY ${n.quote(`${n.tableName}_pending_idx`)} (status, id),
  KEY ${n.quote(`${n.tableName}_key_idx`)} (message_key, status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    // Enqueue locks these rows (never inserts them) so that a key's writers commit in id order;
    // locking existing primary-key rows takes no gap locks, so it cannot deadlock with inserts.
    `CREATE TABLE IF NOT EXISTS ${n.lockTable} (bucket INT NOT NULL PRIMARY KEY) ENGINE=InnoDB`,
    `INSERT IGNORE INTO ${n.lockTable} (bucket)
SELECT a.n + 4 * b.n + 16 * c.n + 64 * d.n + 256 * e.n FROM ${digit} AS a, ${digit} AS b, ${digit} AS c, ${digit} AS d, ${digit} AS e`,
  ];
}

export function mysqlDropTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.lockTable}`, `DROP TABLE IF EXISTS ${n.table}`];
}

export function mysqlLockKeys(n: OutboxTableNames, count: number): string {
  return `SELECT bucket FROM ${n.lockTable} WHERE bucket IN (${placeholders(count)}) ORDER BY bucket FOR UPDATE`;
}

export function mysqlInsert(n: OutboxTableNames, rows: number, scheduled: boolean): string {
  const row = scheduled
    ? `(?, ?, ?, ?, ?, ?, COALESCE(?, ${NOW} + INTERVAL ? * 1000 MICROSECOND))`
    : '(?, ?, ?, ?, ?, ?)';
  return `INSERT INTO ${n.table} (message_id, topic, message_key, event_type, payload, headers${scheduled ? ', available_at' : ''}) VALUES ${Array.from({ length: rows }, () => row).join(', ')}`;
}

const DUE = `c.status = 'pending' AND c.available_at <= ${NOW} AND (c.locked_until IS NULL OR c.locked_until < ${NOW})`;

/**
 * Step 1 of the claim, a plain (non-locking) read: due messages that head their key. It is kept
 * apart from the locking step because a locking read could skip a locked earlier message in the
 * head check and wrongly let a later one of the same key through.
 */
export function mysqlClaimCandidates(
  n: OutboxTableNames,
  ordered: boolean,
  deadBlocksKey: boolean,
): string {
  const blocking = deadBlocksKey ? `e.status IN ('pending', 'dead')` : `e.status = 'pending'`;
  const head = ordered
    ? `AND (c.message_key IS NULL OR NOT EXISTS (SELECT 1 FROM ${n.table} AS e WHERE e.message_key = c.message_key AND ${blocking} AND e.id < c.id))`
    : '';
  return `SELECT c.id FROM ${n.table} AS c WHERE ${DUE} ${head} ORDER BY c.id LIMIT ?`;
}

/** Step 2: lock the candidates that are still due, skipping those another dispatcher holds. */
export function mysqlClaimLock(n: OutboxTableNames, count: number): string {
  return `SELECT c.id, c.message_id, c.topic, c.message_key, c.event_type, c.payload, c.headers, c.attempts,
  DATE_FORMAT(c.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_at,
  TIMESTAMPDIFF(MICROSECOND, c.created_at, ${NOW}) / 1000 AS age_ms
FROM ${n.table} AS c WHERE c.id IN (${placeholders(count)}) AND ${DUE}
ORDER BY c.id FOR UPDATE SKIP LOCKED`;
}

/** Step 3: write the lease. Params: owner, token, lease ms, ids. */
export function mysqlClaimLease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET locked_by = ?, lock_token = ?, locked_until = ${NOW} + INTERVAL ? * 1000 MICROSECOND WHERE id IN (${placeholders(count)})`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

export function mysqlSettleDelivered(
  n: OutboxTableNames,
  count: number,
  deleteDelivered: boolean,
): string {
  return deleteDelivered
    ? `DELETE FROM ${n.table} WHERE lock_token = ? AND id IN (${placeholders(count)})`
    : `UPDATE ${n.table} SET status = 'delivered', delivered_at = ${NOW}, ${UNLOCK} WHERE lock_token = ? AND id IN (${placeholders(count)})`;
}

/** Params: token, then (id, delay ms, error) per row. */
export function mysqlSettleRetry(n: OutboxTableNames, count: number): string {
  const rows = Array.from({ length: count }, (_, i) =>
    i === 0 ? 'SELECT ? AS id, ? AS delay_ms, ? AS err' : 'SELECT ?, ?, ?',
  ).join(' UNION ALL ');
  return `UPDATE ${n.table} AS o JOIN (${rows}) AS u ON o.id = u.id
SET o.attempts = o.attempts + 1, o.available_at = ${NOW} + INTERVAL u.delay_ms * 1000 MICROSECOND, o.last_error = u.err,
  o.locked_by = NULL, o.lock_token = NULL, o.locked_until = NULL
WHERE o.lock_token = ?`;
}

/** Params: (id, error) per row, then token. */
export function mysqlSettleDead(n: OutboxTableNames, count: number): string {
  const rows = Array.from({ length: count }, (_, i) =>
    i === 0 ? 'SELECT ? AS id, ? AS err' : 'SELECT ?, ?',
  ).join(' UNION ALL ');
  return `UPDATE ${n.table} AS o JOIN (${rows}) AS u ON o.id = u.id
SET o.status = 'dead', o.attempts = o.attempts + 1, o.last_error = u.err, o.locked_by = NULL, o.lock_token = NULL, o.locked_until = NULL
WHERE o.lock_token = ?`;
}

export function mysqlRelease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE lock_token = ? AND id IN (${placeholders(count)})`;
}

export function mysqlReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < ${NOW}`;
}

/** Params: status, age ms, limit. */
export function mysqlPurge(n: OutboxTableNames, status: 'delivered' | 'dead'): string {
  const ts = status === 'delivered' ? 'delivered_at' : 'created_at';
  return `DELETE FROM ${n.table} WHERE status = ? AND ${ts} < ${NOW} - INTERVAL ? * 1000 MICROSECOND ORDER BY id LIMIT ?`;
}

export function mysqlRequeueDead(n: OutboxTableNames, count: number | null): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = ${NOW}, last_error = NULL, ${UNLOCK}
WHERE status = 'dead'${count === null ? '' : ` AND message_id IN (${placeholders(count)})`}`;
}

export function mysqlStats(n: OutboxTableNames): string {
  return `SELECT
  CAST(COALESCE(SUM(status = 'pending' AND (locked_until IS NULL OR locked_until < ${NOW})), 0) AS SIGNED) AS pending,
  CAST(COALESCE(SUM(status = 'pending' AND locked_until >= ${NOW}), 0) AS SIGNED) AS leased,
  CAST(COALESCE(SUM(status = 'delivered'), 0) AS SIGNED) AS delivered,
  CAST(COALESCE(SUM(status = 'dead'), 0) AS SIGNED) AS dead,
  TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status = 'pending' THEN created_at END), ${NOW}) / 1000 AS oldest_ms
FROM ${n.table}`;
}

function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
