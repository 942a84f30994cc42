import type { InboxTableNames } from '../../internal/sql-identifier';
import type { InboxRecorder, InboxSequenceSql } from '../outbox-database';
import type { MysqlTransactionGuard } from './mysql.sql';
import { mysqlStillInTransaction, readMysqlTransactionGuard } from './mysql.transaction-guard';

// DATETIME has no zone and sessions may differ in theirs: every timestamp is UTC, as in the outbox.
const NOW = 'UTC_TIMESTAMP(6)';

/**
 * DDL of the inbox table on MySQL 8.0.13+ and MariaDB 10.6+. The key columns are VARBINARY so
 * ids compare byte for byte: MariaDB's binary collations pad with spaces, so with VARCHAR the ids
 * `a` and `a ` would be one key and the second message would be skipped as a duplicate.
 */
export function mysqlInboxTable(n: InboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  consumer VARBINARY(128) NOT NULL,
  message_id VARBINARY(255) NOT NULL,
  received_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (consumer, message_id),
  KEY ${n.index} (received_at)
) ENGINE=InnoDB`,
  ];
}

export function mysqlInboxDrop(n: InboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}

/**
 * Records (consumer, message id); affects 0 rows when it is already there. InnoDB checks the
 * primary key with a locking read of the latest committed version (not the transaction's
 * snapshot, even under REPEATABLE READ): when another transaction inserted the same key and is
 * still open, this INSERT waits for its lock, then ignores the row if it committed or inserts it
 * if it rolled back. IGNORE would also turn other errors into warnings (a too-long value would
 * be truncated and could collide with another id), which is why the ids' lengths are checked
 * before the statement runs. With three or more waiters on one key whose holder rolls back,
 * InnoDB may pick a deadlock victim: its transaction fails and the message is redelivered.
 */
export function mysqlInboxInsert(n: InboxTableNames): string {
  return `INSERT IGNORE INTO ${n.table} (consumer, message_id) VALUES (?, ?)`;
}

/** Deletes up to `?` rows received more than `?` ms ago (database clock). */
export function mysqlInboxPurge(n: InboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE received_at < ${NOW} - INTERVAL ? * 1000 MICROSECOND ORDER BY received_at LIMIT ?`;
}

/**
 * The insert of `recordOnce`, inside the caller's transaction only (`guard`, as the outbox's
 * enqueue checks it, `mysql.sql.ts`): a statement running on its own after the app's ROLLBACK
 * writes nothing.
 */
export function mysqlInboxRecord(n: InboxTableNames, guard: MysqlTransactionGuard): string {
  return `INSERT IGNORE INTO ${n.table} (consumer, message_id) SELECT ?, ? FROM DUAL WHERE ${guard}`;
}

export function mysqlInboxRecorder(n: InboxTableNames): InboxRecorder {
  let guard: Promise<MysqlTransactionGuard> | undefined;
  return async (tx, consumer, messageId) => {
    guard ??= readMysqlTransactionGuard(tx).catch((error: unknown) => {
      guard = undefined;
      throw error;
    });
    const check = await guard;
    const { affected } = await tx.query(mysqlInboxRecord(n, check), [consumer, messageId]);
    if (affected === 1) return 'written';
    // Nothing written: the id was there, or the transaction had ended (IGNORE hides neither).
    return (await mysqlStillInTransaction(tx, check)) ? 'present' : 'ended';
  };
}

/**
 * The inbox's gap guard on MySQL/MariaDB (`InboxSequenceSql`); consumer and key as bytes, so
 * that they compare exactly as the inbox's own columns do.
 */
export const mysqlInboxSequence: InboxSequenceSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.sequenceTable} (
  consumer VARBINARY(128) NOT NULL,
  message_key VARBINARY(1020) NOT NULL,
  last_seq BIGINT NOT NULL,
  PRIMARY KEY (consumer, message_key)
) ENGINE=InnoDB`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.sequenceTable}`],
  // ON DUPLICATE KEY UPDATE locks a row that is there exclusively at once; INSERT IGNORE would
  // take a shared lock that two deliveries then both try to raise for the read: a deadlock.
  seed: (n) => `INSERT INTO ${n.sequenceTable} (consumer, message_key, last_seq) VALUES (?, ?, 0)
ON DUPLICATE KEY UPDATE last_seq = last_seq`,
  read: (n) =>
    `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = ? AND message_key = ? FOR UPDATE`,
  peek: (n) => `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = ? AND message_key = ?`,
  write: (n) => `INSERT INTO ${n.sequenceTable} (consumer, message_key, last_seq) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE last_seq = GREATEST(last_seq, VALUES(last_seq))`,
};
