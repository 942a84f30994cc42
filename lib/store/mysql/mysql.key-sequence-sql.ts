import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import type { MysqlTransactionGuard } from './mysql.sql';

// Sequence numbers per topic and key (ordering.sequence, shared-sql/key-sequence.ts) on MySQL/MariaDB.

/** Whether the table has the column, from the catalog (MySQL has no ADD COLUMN IF NOT EXISTS). */
async function hasColumn(
  run: Parameters<SchemaPartSql['has']>[0],
  n: OutboxTableNames,
): Promise<boolean> {
  const params = n.schema === null ? [n.tableName] : [n.schema, n.tableName];
  const rows = (await run(
    `SELECT 1 AS x FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ${n.schema === null ? 'DATABASE()' : '?'} AND TABLE_NAME = ? AND COLUMN_NAME = 'key_seq'`,
    params,
  )) as unknown[];
  return rows.length > 0;
}

/**
 * Schema step 6. The counter's topic and key are bytes: they compare exactly, trailing spaces
 * and case included, as the outbox's keys do (255 characters of utf8mb4 at most each; the two
 * take 2 040 bytes of InnoDB's 3 072-byte key).
 */
export const mysqlKeySequence: SchemaPartSql = {
  async ensure(run, n) {
    if (!(await hasColumn(run, n)))
      await run(`ALTER TABLE ${n.table} ADD COLUMN key_seq BIGINT NULL`);
    await run(`CREATE TABLE IF NOT EXISTS ${n.keySeqTable} (
  topic VARBINARY(1020) NOT NULL,
  message_key VARBINARY(1020) NOT NULL,
  last_seq BIGINT NOT NULL,
  PRIMARY KEY (topic, message_key)
) ENGINE=InnoDB`);
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
    if (await hasColumn(run, n)) await run(`ALTER TABLE ${n.table} DROP COLUMN key_seq`);
  },
};

/**
 * Raises `keys` counters ((topic, key, count) triples, in topic and key order) inside the caller's
 * transaction only (`guard`). ON DUPLICATE KEY UPDATE reads the counter's latest version under
 * its lock, which the transaction keeps until it ends.
 */
export function mysqlBumpCounters(
  n: OutboxTableNames,
  keys: number,
  guard: MysqlTransactionGuard,
): string {
  const values = Array.from({ length: keys }, (_, i) =>
    i === 0 ? 'SELECT ? AS t, ? AS k, ? AS c' : 'SELECT ?, ?, ?',
  ).join(' UNION ALL ');
  return `INSERT INTO ${n.keySeqTable} (topic, message_key, last_seq)
SELECT v.t, v.k, v.c FROM (${values}) AS v WHERE ${guard} ORDER BY v.t, v.k
ON DUPLICATE KEY UPDATE last_seq = last_seq + VALUES(last_seq)`;
}

/**
 * Writes `rows` rows' numbers, column and header alike: (message id, topic, key, back) rows,
 * `back` how many rows of the topic and key this enqueue wrote after the row, so its number is
 * the counter's new
 * value less `back`. The counter is read in the same statement: a multi-table UPDATE reads it
 * with a lock, that is the version this transaction just wrote and still holds.
 */
export function mysqlSetNumbers(
  n: OutboxTableNames,
  rows: number,
  guard: MysqlTransactionGuard,
): string {
  const values = Array.from({ length: rows }, (_, i) =>
    i === 0 ? 'SELECT ? AS m, ? AS t, ? AS k, ? AS b' : 'SELECT ?, ?, ?, ?',
  ).join(' UNION ALL ');
  return `UPDATE ${n.table} AS o
JOIN (${values}) AS v ON o.message_id = v.m
JOIN ${n.keySeqTable} AS s ON s.topic = v.t AND s.message_key = v.k
SET o.key_seq = s.last_seq - v.b,
  o.headers = JSON_SET(o.headers, '$."${OUTBOX_HEADER_SEQUENCE}"', CAST(s.last_seq - v.b AS CHAR))
WHERE ${guard}`;
}
