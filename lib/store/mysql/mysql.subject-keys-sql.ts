import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { subjectKeysTablePart } from '../schema/subject-keys-table';
import {
  storedKeyOf,
  subjectKeyReads,
  textOf,
  type SubjectKeySql,
} from '../shared-sql/subject-keys-sql';

// The erasure's tables (shared-sql/subject-keys-sql.ts) on MySQL 8 and MariaDB 10.6+. Topics and
// keys are kept as their UTF-8 bytes: a PAD SPACE collation would take 'a' and 'a ' for one key.
// `LOCK IN SHARE MODE` rather than `FOR SHARE`, which MariaDB lacks.
//
// A subject's key is found by a consistent read of its hash and share-locked by its id: a
// locking read of a hash not in the table would take a gap lock under REPEATABLE READ (the
// default), and two enqueues making one subject's key would each wait for the other's gap to
// insert theirs, a deadlock. A transaction whose snapshot is older than the key misses it and
// inserts its own: the duplicate's lock, then a locking read of the hash, answers the other's.

const ID = 'CHAR(36) CHARACTER SET ascii';

function createTables(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.subjectKeysTable} (
  key_id ${ID} NOT NULL,
  subject_hash CHAR(64) CHARACTER SET ascii NULL,
  wrapped_key VARBINARY(1024) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  erased_at DATETIME(6) NULL,
  PRIMARY KEY (key_id),
  UNIQUE KEY ${n.quote(`${n.tableName}_sk_subject`)} (subject_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    `CREATE TABLE IF NOT EXISTS ${n.subjectUsesTable} (
  key_id ${ID} NOT NULL,
  topic VARBINARY(1020) NOT NULL,
  message_key VARBINARY(1020) NOT NULL,
  PRIMARY KEY (key_id, topic, message_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

/** Schema step 11: the erasure's key and use tables. */
export const mysqlSubjectKeysTables: SchemaPartSql = subjectKeysTablePart(createTables);

export const mysqlSubjectKeys: SubjectKeySql = {
  ...subjectKeyReads({
    find: (n) => `SELECT key_id FROM ${n.subjectKeysTable} WHERE subject_hash = ?`,
    read: (n) => `SELECT wrapped_key, erased_at FROM ${n.subjectKeysTable} WHERE key_id = ?`,
    lock: (n) => `SELECT key_id FROM ${n.subjectKeysTable} WHERE subject_hash = ? FOR UPDATE`,
  }),
  async find(run, n, subjectHash) {
    const { rows } = await run.query<{ key_id: unknown }>(
      `SELECT key_id FROM ${n.subjectKeysTable} WHERE subject_hash = ?`,
      [subjectHash],
    );
    if (rows[0] === undefined) return undefined;
    // By its id: the row is there (key rows are never deleted), so only it is locked. Erased
    // since the snapshot, it answers no key.
    const locked = await run.query<{ key_id: unknown; wrapped_key: unknown }>(
      `SELECT key_id, wrapped_key FROM ${n.subjectKeysTable} WHERE key_id = ? LOCK IN SHARE MODE`,
      [textOf(rows[0].key_id)],
    );
    return storedKeyOf(locked.rows[0]);
  },
  async create(run, n, key) {
    await run.query(
      `INSERT INTO ${n.subjectKeysTable} (key_id, subject_hash, wrapped_key) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE key_id = key_id`,
      [key.keyId, key.subjectHash, key.wrapped],
    );
    const { rows } = await run.query<{ key_id: unknown; wrapped_key: unknown }>(
      `SELECT key_id, wrapped_key FROM ${n.subjectKeysTable} WHERE subject_hash = ? LOCK IN SHARE MODE`,
      [key.subjectHash],
    );
    return storedKeyOf(rows[0]);
  },
  async recordUses(run, n, uses) {
    if (uses.length === 0) return;
    await run.query(
      `INSERT INTO ${n.subjectUsesTable} (key_id, topic, message_key) VALUES ${uses.map(() => '(?, ?, ?)').join(', ')} ON DUPLICATE KEY UPDATE key_id = key_id`,
      uses.flatMap((use) => [
        use.keyId,
        Buffer.from(use.topic, 'utf8'),
        Buffer.from(use.key, 'utf8'),
      ]),
    );
  },
  async destroy(run, n, keyId) {
    await run.query(
      `UPDATE ${n.subjectKeysTable} SET wrapped_key = NULL, subject_hash = NULL, erased_at = UTC_TIMESTAMP(6) WHERE key_id = ?`,
      [keyId],
    );
  },
  async takeUses(run, n, keyId) {
    const { rows } = await run.query<{ topic: unknown; message_key: unknown }>(
      `SELECT topic, message_key FROM ${n.subjectUsesTable} WHERE key_id = ? ORDER BY topic, message_key FOR UPDATE`,
      [keyId],
    );
    await run.query(`DELETE FROM ${n.subjectUsesTable} WHERE key_id = ?`, [keyId]);
    return rows.map((r) => ({ topic: textOf(r.topic), key: textOf(r.message_key) }));
  },
};
