import type { InboxTableNames } from '../../internal/sql-identifier';
import type { InboxRecorder, InboxSequenceSql } from '../outbox-database';
import { POSTGRES_OPEN_TRANSACTION } from './postgres.sql';

/** DDL of the inbox table on PostgreSQL 12+. */
export function postgresInboxTable(n: InboxTableNames): string[] {
  const schema = n.schema === null ? [] : [`CREATE SCHEMA IF NOT EXISTS ${n.quote(n.schema)}`];
  return [
    ...schema,
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  consumer varchar(128) NOT NULL,
  message_id varchar(255) NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
)`,
    // purge() deletes by age; without this index it would scan the whole table.
    `CREATE INDEX IF NOT EXISTS ${n.index} ON ${n.table} (received_at)`,
  ];
}

export function postgresInboxDrop(n: InboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.table}`];
}

/**
 * Records (consumer, message id); affects 0 rows when it is already there. A concurrent
 * transaction that inserted the same key and has not finished yet holds the index entry: this
 * INSERT waits for it, then does nothing if it committed (a duplicate) or inserts if it rolled
 * back. Under READ COMMITTED (the default) that is all; under REPEATABLE READ or SERIALIZABLE a
 * conflict with a row committed after this transaction's snapshot raises a serialization failure
 * instead, which rolls the handler back, so the message is redelivered and then seen as a duplicate.
 */
export function postgresInboxInsert(n: InboxTableNames): string {
  return `INSERT INTO ${n.table} (consumer, message_id) VALUES ($1, $2) ON CONFLICT (consumer, message_id) DO NOTHING`;
}

/** Deletes up to $2 rows received more than $1 ms ago (database clock). */
export function postgresInboxPurge(n: InboxTableNames): string {
  return `DELETE FROM ${n.table} WHERE (consumer, message_id) IN (
  SELECT consumer, message_id FROM ${n.table} WHERE received_at < now() - $1 * interval '1 millisecond' LIMIT $2)`;
}

/**
 * The insert of `recordOnce`, inside the caller's transaction only: a transaction that has
 * written has an id, a statement running on its own (after the app's ROLLBACK) has none, and the
 * insert reads it in the same statement (as the outbox's enqueue does, `postgres.sql.ts`). One
 * row answers: whether the transaction was open, and whether the id was written.
 */
export function postgresInboxRecord(n: InboxTableNames): string {
  return `WITH tx AS (SELECT txid_current_if_assigned() IS NOT NULL AS open),
w AS (INSERT INTO ${n.table} (consumer, message_id) SELECT $1::varchar, $2::varchar FROM tx WHERE tx.open
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING 1)
SELECT tx.open, (SELECT count(*) FROM w)::int AS written FROM tx`;
}

export function postgresInboxRecorder(n: InboxTableNames): InboxRecorder {
  const sql = postgresInboxRecord(n);
  return async (tx, consumer, messageId) => {
    const once = async () =>
      (await tx.query<{ open: unknown; written: unknown }>(sql, [consumer, messageId])).rows[0];
    let answer = await once();
    if (!isTrue(answer?.open)) {
      // A transaction that has not written yet has no id for the check to see: give it one and
      // try once more. Refused again, the caller's transaction had ended.
      await tx.query(POSTGRES_OPEN_TRANSACTION);
      answer = await once();
      if (!isTrue(answer?.open)) return 'ended';
    }
    return Number(answer?.written) === 1 ? 'written' : 'present';
  };
}

/** A boolean column as the libraries give it: true, 't' (text protocol) or 1. */
function isTrue(value: unknown): boolean {
  return value === true || value === 't' || value === 1 || value === 'true';
}

/** The inbox's gap guard on PostgreSQL (`InboxSequenceSql`). */
export const postgresInboxSequence: InboxSequenceSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.sequenceTable} (
  consumer varchar(128) NOT NULL,
  message_key varchar(255) NOT NULL,
  last_seq bigint NOT NULL,
  PRIMARY KEY (consumer, message_key)
)`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.sequenceTable}`],
  // DO NOTHING takes no lock on a row that is there: the read below does.
  seed: (n) => `INSERT INTO ${n.sequenceTable} (consumer, message_key, last_seq)
VALUES ($1, $2, 0) ON CONFLICT (consumer, message_key) DO NOTHING`,
  read: (n) =>
    `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = $1 AND message_key = $2 FOR UPDATE`,
  peek: (n) => `SELECT last_seq FROM ${n.sequenceTable} WHERE consumer = $1 AND message_key = $2`,
  write: (n) => `INSERT INTO ${n.sequenceTable} AS q (consumer, message_key, last_seq)
VALUES ($1, $2, $3) ON CONFLICT (consumer, message_key)
DO UPDATE SET last_seq = GREATEST(q.last_seq, EXCLUDED.last_seq)`,
};
