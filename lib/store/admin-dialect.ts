import type { OutboxTableNames } from './sql-identifier';
import type { SqlParams } from './sql-params';

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
  messageIdIs(p: SqlParams, messageId: string): string;
  errorContains(p: SqlParams, text: string): string;
  createdBefore(p: SqlParams, at: Date): string;
  createdAtOrAfter(p: SqlParams, at: Date): string;
  createdOlderThan(p: SqlParams, ms: number): string;
  idAfter(p: SqlParams, id: string): string;
  idAtMost(p: SqlParams, id: string): string;
  /** `SELECT max(id) AS id` of the table, as text. */
  maxId(n: OutboxTableNames): string;
  /** Rows `topic, status, leased (0/1), n` for the rows matching `where`. */
  counts(n: OutboxTableNames, where: string): string;
  /**
   * Keys whose head (first message in a blocking status) is dead or backing off with
   * undelivered messages behind it, in head order after `after`.
   */
  blockedKeys(
    n: OutboxTableNames,
    p: SqlParams,
    deadBlocksKey: boolean,
    after: string | null,
    limit: number,
  ): string;
  /** Pending rows whose lease expired, or (given `longerThanMs`) was taken that long ago. */
  stuckLeases(
    n: OutboxTableNames,
    p: SqlParams,
    longerThanMs: number | null,
    after: string | null,
    limit: number,
  ): string;
}

/** The statuses that hold back the later messages of a key (as in the store). */
export function blockingStatuses(deadBlocksKey: boolean): string {
  return deadBlocksKey ? `('pending', 'waiting', 'dead')` : `('pending', 'waiting')`;
}
