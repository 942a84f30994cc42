import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';

// Sequence numbers per topic and key (ordering.sequence, shared-sql/key-sequence.ts) on PostgreSQL.

/** Schema step 6: the column (nullable, no default: instant on a large table) and the counters. */
export const postgresKeySequence: SchemaPartSql = {
  async ensure(run, n) {
    await run(`ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS key_seq bigint`);
    await run(`CREATE TABLE IF NOT EXISTS ${n.keySeqTable} (
  topic varchar(255) NOT NULL,
  message_key varchar(255) NOT NULL,
  last_seq bigint NOT NULL,
  CONSTRAINT ${n.quote(`${n.tableName}_key_seq_pkey`)} PRIMARY KEY (topic, message_key)
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
    await run(`ALTER TABLE ${n.table} DROP COLUMN IF EXISTS key_seq`);
  },
};

/**
 * $1 the message ids (uuid[]) an enqueue just wrote with a key, $2 their topics and $3 their
 * keys (text[] each, the key a re-drive copy in a lane of its own is numbered by rather than
 * its stored lane, rows/redrive-lane.ts): numbers them in one statement,
 * inside the caller's transaction only (the insert before it gave the transaction its id, so a
 * statement that runs on its own after a ROLLBACK numbers nothing). Each key's counter goes up
 * by its rows, in (topic, key) order (two writers of several keys lock counters alike), and
 * answers the new value under the row's lock, read from its latest version as ON CONFLICT DO
 * UPDATE does whatever the statement's snapshot. The rows of a topic and key take the numbers
 * up to it in id order;
 * the header is written beside the column so that every publisher sends it.
 */
export function postgresNumberKeys(n: OutboxTableNames): string {
  const t = n.table;
  const number = 's.last_seq - r.c + r.rn';
  return `WITH tx AS (SELECT txid_current_if_assigned() IS NOT NULL AS open),
r AS MATERIALIZED (
  SELECT o.id, m.topic, m.message_key,
    row_number() OVER (PARTITION BY m.topic, m.message_key ORDER BY o.id) AS rn,
    count(*) OVER (PARTITION BY m.topic, m.message_key) AS c
  FROM tx CROSS JOIN unnest($1::uuid[], $2::text[], $3::text[]) AS m(id, topic, message_key)
  JOIN ${t} AS o ON o.message_id = m.id
  WHERE tx.open AND m.message_key IS NOT NULL AND o.key_seq IS NULL),
s AS (
  INSERT INTO ${n.keySeqTable} AS q (topic, message_key, last_seq)
  SELECT r.topic, r.message_key, max(r.c) FROM r GROUP BY r.topic, r.message_key
  ORDER BY r.topic, r.message_key
  ON CONFLICT (topic, message_key) DO UPDATE SET last_seq = q.last_seq + EXCLUDED.last_seq
  RETURNING q.topic, q.message_key, q.last_seq)
UPDATE ${t} AS o
SET key_seq = ${number},
  headers = (o.headers::jsonb || jsonb_build_object('${OUTBOX_HEADER_SEQUENCE}', (${number})::text))::json
FROM r JOIN s ON s.topic = r.topic AND s.message_key = r.message_key
WHERE o.id = r.id`;
}
