import type { InboxTableNames } from '../../internal/sql-identifier';

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
