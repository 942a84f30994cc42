import type { InboxTableNames } from '../../internal/sql-identifier';
import type { InboxRecorder, InboxSequenceSql } from '../outbox-database';

// Times are UTC text with milliseconds (as in the outbox table), which sorts correctly.
const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;

/** DDL of the inbox table on SQLite 3.35+. */
export function sqliteInboxTable(n: InboxTableNames): string[] {
  return [
    // WITHOUT ROWID: the primary key is the table, so a lookup is one B-tree search.
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  consumer TEXT NOT NULL,
  message_id TEXT NOT NULL,
  received_at TEXT NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID`,
    `CREATE INDEX IF NOT EXISTS ${n.index} ON ${n.table} (received_at)`,
  ];
}

export function sqliteInboxDrop(n: InboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}

/**
 * Records (consumer, message id); changes 0 rows when it is already there. SQLite has one writer
 * per database file: a second connection's write waits (busy timeout) until the first
 * transaction ends, and then sees its committed row. Within one process TypeORM runs every
 * transaction on one shared connection, so the inbox serialises its own transactions instead
 * (see Inbox.handleOnce).
 */
export function sqliteInboxInsert(n: InboxTableNames): string {
  return `INSERT OR IGNORE INTO ${n.table} (consumer, message_id) VALUES (?, ?)`;
}

/** Deletes up to `?` rows received more than `?` ms ago (database clock). */
export function sqliteInboxPurge(n: InboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE (consumer, message_id) IN (
  SELECT consumer, message_id FROM ${n.table}
  WHERE received_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds') LIMIT ?)`;
}

/**
 * `recordOnce` on SQLite: the connections check that the caller's transaction is open in the
 * same synchronous step as they run the insert, so the plain insert is already one unit.
 */
export function sqliteInboxRecorder(n: InboxTableNames): InboxRecorder {
  const sql = sqliteInboxInsert(n);
  return async (tx, consumer, messageId) =>
    (await tx.query(sql, [consumer, messageId])).affected === 1 ? 'written' : 'present';
}

/** The inbox's gap guard on SQLite, whose single writer needs no row lock (`InboxSequenceSql`). */
export const sqliteInboxSequence: InboxSequenceSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.sequenceTable} (
  consumer TEXT NOT NULL,
  message_key TEXT NOT NULL,
  last_seq INTEGER NOT NULL,
  PRIMARY KEY (consumer, message_key)
)`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.sequenceTable}`],
  read: (n) => `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = ? AND message_key = ?`,
  peek: (n) => `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = ? AND message_key = ?`,
  write: (n) => `INSERT INTO ${n.sequenceTable} (consumer, message_key, last_seq) VALUES (?, ?, ?)
ON CONFLICT (consumer, message_key) DO UPDATE SET last_seq = max(last_seq, excluded.last_seq)`,
};
