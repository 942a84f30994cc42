import type { OutboxTableNames } from '../../internal/sql-identifier';

/** The position table's name, `<table>_log_position`, quoted and qualified like the table. */
export function mysqlLogPositionTable(n: OutboxTableNames): string {
  return n.logPositionTable;
}

/**
 * DDL of the position table: one row (`id = 1`), the binlog file and offset after the last
 * transaction whose inserts have their outcome recorded; `outbox schema migrate` runs it.
 */
export function mysqlLogTailingDdl(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${mysqlLogPositionTable(n)} (
  id TINYINT NOT NULL PRIMARY KEY,
  binlog_file VARCHAR(255) NOT NULL,
  binlog_offset BIGINT UNSIGNED NOT NULL,
  acknowledged_by VARCHAR(128) NULL,
  acknowledged_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

/** Drops the position table: the next start with log tailing reads from the log's end. */
export function mysqlLogTailingDrop(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${mysqlLogPositionTable(n)}`];
}

export function mysqlReadLogPosition(n: OutboxTableNames): string {
  return `SELECT binlog_file, binlog_offset FROM ${mysqlLogPositionTable(n)} WHERE id = 1`;
}

/** The stored position and who acknowledged it last (`outbox log status`). */
export function mysqlLogPositionStatus(n: OutboxTableNames): string {
  return `SELECT binlog_file, binlog_offset, acknowledged_by FROM ${mysqlLogPositionTable(n)} WHERE id = 1`;
}

/** Stores a first position; a table that has one keeps it. Values: file, offset, owner. */
export function mysqlInsertLogPosition(n: OutboxTableNames): string {
  return `INSERT IGNORE INTO ${mysqlLogPositionTable(n)} (id, binlog_file, binlog_offset, acknowledged_by, acknowledged_at)
VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6))`;
}

/**
 * Moves the position forward only: an acknowledgement arriving late (from a process that has
 * since lost the lock to another) never takes it back. Files are ordered by their sequence
 * number, which the server writes zero-padded: a longer name is a later file.
 * Values: file, offset, owner.
 */
export function mysqlAdvanceLogPosition(n: OutboxTableNames): string {
  return `UPDATE ${mysqlLogPositionTable(n)} AS p
JOIN (SELECT ? AS new_file, ? AS new_offset, ? AS new_owner) AS v
SET p.binlog_file = v.new_file, p.binlog_offset = v.new_offset, p.acknowledged_by = v.new_owner,
  p.acknowledged_at = UTC_TIMESTAMP(6)
WHERE p.id = 1 AND (CHAR_LENGTH(v.new_file) > CHAR_LENGTH(p.binlog_file)
  OR (CHAR_LENGTH(v.new_file) = CHAR_LENGTH(p.binlog_file) AND v.new_file > p.binlog_file)
  OR (v.new_file = p.binlog_file AND v.new_offset > p.binlog_offset))`;
}

/**
 * Sets the position whatever it was: for a stored position the server no longer has (purged,
 * or its binlog reset), which may be numbered after the server's new end. Values: file, offset,
 * owner.
 */
export function mysqlResetLogPosition(n: OutboxTableNames): string {
  return `INSERT INTO ${mysqlLogPositionTable(n)} (id, binlog_file, binlog_offset, acknowledged_by, acknowledged_at)
VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), binlog_offset = VALUES(binlog_offset),
  acknowledged_by = VALUES(acknowledged_by), acknowledged_at = VALUES(acknowledged_at)`;
}

/**
 * The server-wide name of the reader's lock: GET_LOCK names are global to the server, so the
 * database is part of it; MySQL refuses names over 64 characters, so a long one is hashed.
 */
export function mysqlLogLockName(database: string, n: OutboxTableNames): string {
  const name = `${n.schema ?? database}.${n.tableName}:log`;
  return name.length <= 64 ? name : `outbox-log:${fnv1a(name)}`;
}

function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (const char of text) {
    hash ^= char.codePointAt(0) ?? 0;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, '0');
}
