import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { subjectKeysTablePart } from '../schema/subject-keys-table';
import { subjectKeyReads, textOf, type SubjectKeySql } from '../shared-sql/subject-keys-sql';

// The erasure's tables (shared-sql/subject-keys-sql.ts) on SQLite, whose one writer serialises
// an erasure and the enqueues of its subject without row locks.

const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;

function createTables(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.subjectKeysTable} (
  key_id TEXT NOT NULL PRIMARY KEY,
  subject_hash TEXT NULL UNIQUE,
  wrapped_key BLOB NULL,
  created_at TEXT NOT NULL DEFAULT (${NOW}),
  erased_at TEXT NULL
)`,
    `CREATE TABLE IF NOT EXISTS ${n.subjectUsesTable} (
  key_id TEXT NOT NULL,
  topic TEXT NOT NULL,
  message_key TEXT NOT NULL,
  PRIMARY KEY (key_id, topic, message_key)
)`,
  ];
}

/** Schema step 11: the erasure's key and use tables. */
export const sqliteSubjectKeysTables: SchemaPartSql = subjectKeysTablePart(createTables);

const reads = subjectKeyReads({
  find: (n) => `SELECT key_id, wrapped_key FROM ${n.subjectKeysTable} WHERE subject_hash = ?`,
  read: (n) => `SELECT wrapped_key, erased_at FROM ${n.subjectKeysTable} WHERE key_id = ?`,
  lock: (n) => `SELECT key_id FROM ${n.subjectKeysTable} WHERE subject_hash = ?`,
});

export const sqliteSubjectKeys: SubjectKeySql = {
  ...reads,
  async create(run, n, key) {
    await run.query(
      `INSERT INTO ${n.subjectKeysTable} (key_id, subject_hash, wrapped_key) VALUES (?, ?, ?) ON CONFLICT (subject_hash) DO NOTHING`,
      [key.keyId, key.subjectHash, key.wrapped],
    );
    return reads.find(run, n, key.subjectHash);
  },
  async recordUses(run, n, uses) {
    if (uses.length === 0) return;
    await run.query(
      `INSERT OR IGNORE INTO ${n.subjectUsesTable} (key_id, topic, message_key) VALUES ${uses.map(() => '(?, ?, ?)').join(', ')}`,
      uses.flatMap((use) => [use.keyId, use.topic, use.key]),
    );
  },
  async destroy(run, n, keyId) {
    await run.query(
      `UPDATE ${n.subjectKeysTable} SET wrapped_key = NULL, subject_hash = NULL, erased_at = ${NOW} WHERE key_id = ?`,
      [keyId],
    );
  },
  async takeUses(run, n, keyId) {
    const { rows } = await run.query<{ topic: unknown; message_key: unknown }>(
      `DELETE FROM ${n.subjectUsesTable} WHERE key_id = ? RETURNING topic, message_key`,
      [keyId],
    );
    return rows.map((r) => ({ topic: textOf(r.topic), key: textOf(r.message_key) }));
  },
};
