import { randomUUID } from 'node:crypto';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { subjectKeysTablePart } from '../schema/subject-keys-table';
import { subjectKeyReads, textOf, type SubjectKeySql } from '../shared-sql/subject-keys-sql';

// The erasure's tables (shared-sql/subject-keys-sql.ts) on PostgreSQL.

function createTables(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.subjectKeysTable} (
  key_id uuid NOT NULL,
  subject_hash char(64) NULL,
  wrapped_key bytea NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  erased_at timestamptz NULL,
  CONSTRAINT ${n.quote(`${n.tableName}_sk_pkey`)} PRIMARY KEY (key_id)
)`,
    `CREATE UNIQUE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_sk_subject`)} ON ${n.subjectKeysTable} (subject_hash)`,
    `CREATE TABLE IF NOT EXISTS ${n.subjectUsesTable} (
  key_id uuid NOT NULL,
  topic varchar(255) NOT NULL,
  message_key varchar(255) NOT NULL,
  CONSTRAINT ${n.quote(`${n.tableName}_su_pkey`)} PRIMARY KEY (key_id, topic, message_key)
)`,
  ];
}

/** Schema step 11: the erasure's key and use tables. */
export const postgresSubjectKeysTables: SchemaPartSql = subjectKeysTablePart(createTables);

const reads = subjectKeyReads({
  find: (n) =>
    `SELECT key_id::text AS key_id, wrapped_key FROM ${n.subjectKeysTable} WHERE subject_hash = $1 FOR SHARE`,
  read: (n) => `SELECT wrapped_key, erased_at FROM ${n.subjectKeysTable} WHERE key_id = $1::uuid`,
  lock: (n) =>
    `SELECT key_id::text AS key_id FROM ${n.subjectKeysTable} WHERE subject_hash = $1 FOR UPDATE`,
});

export const postgresSubjectKeys: SubjectKeySql = {
  ...reads,
  // A SELECT … FOR UPDATE does not see a key row that an open enqueue is inserting (the
  // subject's first message): the erasure would find no key, and the enqueue commit its message
  // under a key that outlives the erasure. An insert of the subject's hash waits for that
  // enqueue to end, as the unique index makes it; when the subject has no key at all, the
  // erasure's own row (inserted, then deleted) holds the hash until it commits, so an enqueue
  // that comes meanwhile makes its key after the erasure.
  async lockForErase(run, n, subjectHash) {
    const { rows } = await run.query<{ key_id: unknown }>(
      `INSERT INTO ${n.subjectKeysTable} (key_id, subject_hash, erased_at) VALUES ($1::uuid, $2, now()) ON CONFLICT (subject_hash) DO NOTHING RETURNING key_id::text AS key_id`,
      [randomUUID(), subjectHash],
    );
    if (rows[0] !== undefined) {
      await run.query(`DELETE FROM ${n.subjectKeysTable} WHERE key_id = $1::uuid`, [
        textOf(rows[0].key_id),
      ]);
      return undefined;
    }
    return reads.lockForErase(run, n, subjectHash);
  },
  async create(run, n, key) {
    await run.query(
      `INSERT INTO ${n.subjectKeysTable} (key_id, subject_hash, wrapped_key) VALUES ($1::uuid, $2, $3::bytea) ON CONFLICT (subject_hash) DO NOTHING`,
      [key.keyId, key.subjectHash, key.wrapped],
    );
    return reads.find(run, n, key.subjectHash);
  },
  async recordUses(run, n, uses) {
    if (uses.length === 0) return;
    const values: unknown[] = [];
    const tuples = uses.map((use) => {
      values.push(use.keyId, use.topic, use.key);
      const at = values.length;
      return `($${at - 2}::uuid, $${at - 1}, $${at})`;
    });
    await run.query(
      `INSERT INTO ${n.subjectUsesTable} (key_id, topic, message_key) VALUES ${tuples.join(', ')} ON CONFLICT DO NOTHING`,
      values,
    );
  },
  async destroy(run, n, keyId) {
    await run.query(
      `UPDATE ${n.subjectKeysTable} SET wrapped_key = NULL, subject_hash = NULL, erased_at = now() WHERE key_id = $1::uuid`,
      [keyId],
    );
  },
  async takeUses(run, n, keyId) {
    const { rows } = await run.query<{ topic: unknown; message_key: unknown }>(
      `DELETE FROM ${n.subjectUsesTable} WHERE key_id = $1::uuid RETURNING topic, message_key`,
      [keyId],
    );
    return rows.map((r) => ({ topic: textOf(r.topic), key: textOf(r.message_key) }));
  },
};
