import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlParams } from './sql-params';
import type { MessageIdParam } from '../rows/message-id-codec';

/**
 * The statements of the admin API on one database. Each condition is a fixed fragment over the
 * alias `o`, its values bound through `SqlParams`; table names come validated and quoted.
 */
export interface AdminDialect {
  params(): SqlParams;
  /** Columns of a listed message (see `AdminRow`). */
  readonly summaryColumns: string;
  /** The summary columns plus payload, headers and lock token. */
  readonly detailColumns: string;
  /** Columns of an attempt-history row over the alias `o` (see `AttemptRow`). */
  readonly attemptColumns: string;
  statusIn(p: SqlParams, statuses: readonly string[]): string;
  /** `messageId` as the table binds it (see message-id-codec.ts). */
  messageIdIs(p: SqlParams, messageId: MessageIdParam): string;
  errorContains(p: SqlParams, text: string): string;
  createdBefore(p: SqlParams, at: Date): string;
  createdAtOrAfter(p: SqlParams, at: Date): string;
  createdOlderThan(p: SqlParams, ms: number): string;
  deliveredBefore(p: SqlParams, at: Date): string;
  deliveredAtOrAfter(p: SqlParams, at: Date): string;
  /**
   * The columns a re-drive copies from a delivered row over the alias `o` (see `RedriveRow`),
   * from the outbox (`origin` its id) or from its archive (`origin` the outbox id it had).
   */
  redriveColumns(origin: 'o.id' | 'o.outbox_id'): string;
  /**
   * A header of the row over the alias `o` as text (null when absent), read from the stored
   * headers: the gap repair finds a key's numbers by `x-outbox-sequence` in the outbox and its
   * archive alike (the archive has no `key_seq` column). `name` is one of the module's header
   * names, never user input.
   */
  headerText(name: string): string;
  /** Milliseconds since the row over the alias `o` was delivered (database clock), or null. */
  readonly deliveredAgeMs: string;
  idAfter(p: SqlParams, id: string): string;
  idAtMost(p: SqlParams, id: string): string;
  /**
   * The ORDER BY of a listing: `o.id`, or where `undeliveredOnly` (no delivered row can match) an
   * order the database takes from the matching rows rather than by walking the primary key.
   */
  listOrder(undeliveredOnly: boolean): string;
  /** `SELECT max(id) AS id` of the table, as text. */
  maxId(n: OutboxTableNames): string;
  /** Rows `topic, status, leased (0/1), n` for the rows matching `where`. */
  counts(n: OutboxTableNames, where: string): string;
  /**
   * Rows `topic, kind, n, oldest_ms`: per topic, messages delivered and dead-lettered in the last
   * `withinMs` (kind 'delivered', 'dead'), and the age of the oldest pending and parked one (kind
   * 'pending', 'waiting'). Each part reads one status through its index, never the history.
   */
  activity(n: OutboxTableNames, p: SqlParams, withinMs: number): string;
  /**
   * Keys whose head (first message in a blocking status) is dead or backing off with
   * undelivered messages behind it, in head order after `after`.
   */
  blockedKeys(
    n: OutboxTableNames,
    p: SqlParams,
    /** The queue's rules: which dead heads block their key (by type, where a policy says). */
    policy: OutboxQueuePolicy,
    after: string | null,
    limit: number,
  ): string;
  /**
   * The reads of delivery partitions (`dispatcher.claims: 'partitions'`, schema step 9) beside
   * the store's `owners()`; absent where the database has none.
   */
  readonly deliveryPartitions?: {
    /** Rows `partition, owner, generation (text), since`, in partition order. */
    partitions(n: OutboxTableNames): string;
    /**
     * Rows `instance, label, valid_ms, working, joined_at, heartbeat_age_ms` (database clock),
     * one per dispatcher process the table knows.
     */
    dispatchers(n: OutboxTableNames): string;
  };
  /** Pending rows whose lease expired, or (given `longerThanMs`) was taken that long ago. */
  stuckLeases(
    n: OutboxTableNames,
    p: SqlParams,
    longerThanMs: number | null,
    after: string | null,
    limit: number,
  ): string;
}

/**
 * `AdminDialect.activity` in its dialect's words: `since()` the window's start (binding its value
 * each time it is written), `oldest` the age in milliseconds of `min(o.created_at)`. Parked rows
 * always have a key (only a key's order parks a message), which lets the key index find them.
 */
export function activityParts(table: string, since: () => string, oldest: string): string {
  const part = (kind: string, where: string, n: string, age: string): string =>
    `SELECT o.topic, '${kind}' AS kind, ${n} AS n, ${age} AS oldest_ms FROM ${table} AS o WHERE ${where} GROUP BY o.topic`;
  // The ages first: PostgreSQL types a UNION's column from its first parts, and NULL alone is text.
  return [
    part('pending', `o.status = 'pending'`, '0', oldest),
    part('waiting', `o.status = 'waiting' AND o.message_key IS NOT NULL`, '0', oldest),
    part('delivered', `o.status = 'delivered' AND o.delivered_at > ${since()}`, 'count(*)', 'NULL'),
    part('dead', `o.status = 'dead' AND o.dead_at > ${since()}`, 'count(*)', 'NULL'),
  ].join('\nUNION ALL\n');
}
