import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';

// Sequence numbers per topic and key (ordering.sequence, shared-sql/key-sequence.ts) on SQLite, whose
// single writer serialises the enqueues of a key by itself.

export const sqliteKeySequence: SchemaPartSql = {
  async ensure(run, n) {
    const rows = (await run(`SELECT 1 AS x FROM pragma_table_info(?) WHERE name = 'key_seq'`, [
      n.tableName,
    ])) as unknown[];
    if (rows.length === 0) await run(`ALTER TABLE ${n.table} ADD COLUMN key_seq INTEGER`);
    await run(`CREATE TABLE IF NOT EXISTS ${n.keySeqTable} (
  topic TEXT NOT NULL,
  message_key TEXT NOT NULL,
  last_seq INTEGER NOT NULL,
  PRIMARY KEY (topic, message_key)
)`);
  },
  has: (run, n) =>
    run(
      `SELECT 1 FROM ${n.table} AS o CROSS JOIN ${n.keySeqTable} AS s WHERE 1 = 0 AND o.key_seq IS NULL`,
    ).then(
      () => true,
      () => false,
    ),
  async drop(run, n) {
    await run(`DROP TABLE IF EXISTS ${n.keySeqTable}`);
    await run(`ALTER TABLE ${n.table} DROP COLUMN key_seq`);
  },
};

/** Raises `keys` counters by their counts ((topic, key, count) triples) and answers the new values. */
export function sqliteBumpCounters(n: OutboxTableNames, keys: number): string {
  return `INSERT INTO ${n.keySeqTable} (topic, message_key, last_seq) VALUES ${Array.from({ length: keys }, () => '(?, ?, ?)').join(', ')}
ON CONFLICT (topic, message_key) DO UPDATE SET last_seq = last_seq + excluded.last_seq
RETURNING topic, message_key, last_seq`;
}

/** Writes `rows` rows' numbers (message id, number pairs), column and header alike. */
export function sqliteSetNumbers(n: OutboxTableNames, rows: number): string {
  return `WITH v(m, s) AS (VALUES ${Array.from({ length: rows }, () => '(?, ?)').join(', ')})
UPDATE ${n.table} SET key_seq = CAST(v.s AS INTEGER),
  headers = json_set(headers, '$."${OUTBOX_HEADER_SEQUENCE}"', CAST(CAST(v.s AS INTEGER) AS TEXT))
FROM v WHERE ${n.table}.message_id = v.m`;
}
