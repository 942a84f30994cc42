import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { KeyedRow, NewOutboxRow } from '../ports/outbox-store.port';

/**
 * Sequence numbers per key (`ordering.sequence`, docs/ordering-and-dead-letters.md). Each keyed
 * message written by an enqueue gets the next number of its key from `<table>_key_seq`, in a
 * statement sent right after the insert, in the caller's transaction: the counter row stays
 * locked until that transaction ends, so a later writer of the key waits for the commit and
 * takes the next number, and a rollback gives the numbers back. A key's numbers are therefore
 * 1, 2, 3… in commit order with no gap among committed messages, and the counter outlives the
 * rows the cleaner deletes.
 *
 * Numbered after the insert, not in it: only the rows the insert wrote are numbered (an
 * idempotent duplicate it skipped takes none), without a second look at which were written.
 */

/** The keyed rows of `rows` the insert wrote: a duplicate it skipped takes no number. */
export function writtenKeyedRows(
  rows: readonly NewOutboxRow[],
  duplicates: Iterable<string>,
): KeyedRow[] {
  const skipped = new Set(duplicates);
  const keyed: KeyedRow[] = [];
  for (const row of rows) {
    if (row.key !== null && !skipped.has(row.messageId)) {
      keyed.push({ messageId: row.messageId, key: row.key });
    }
  }
  return keyed;
}

/** How many rows of each key, keys sorted so that concurrent writers lock counters alike. */
export function keyCounts(rows: readonly KeyedRow[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const row of rows) counts.set(row.key, (counts.get(row.key) ?? 0) + 1);
  return [...counts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Each row's number from its key's counter after the increment (`last`): a key's rows take the
 * numbers up to `last` in the order they were written (their ids' order).
 */
export function numbersOf(rows: readonly KeyedRow[], last: ReadonlyMap<string, number>): number[] {
  const counts = new Map(keyCounts(rows));
  const seen = new Map<string, number>();
  return rows.map((row) => {
    const index = (seen.get(row.key) ?? 0) + 1;
    seen.set(row.key, index);
    const top = last.get(row.key);
    if (top === undefined) throw new Error(`no sequence counter came back for key ${row.key}`);
    return top - (counts.get(row.key) ?? 0) + index;
  });
}

/** For each row, how many rows of its key come after it among `rows`. */
export function rowsAfter(rows: readonly KeyedRow[]): number[] {
  const counts = new Map(keyCounts(rows));
  const seen = new Map<string, number>();
  return rows.map((row) => {
    const index = (seen.get(row.key) ?? 0) + 1;
    seen.set(row.key, index);
    return (counts.get(row.key) ?? 0) - index;
  });
}

/**
 * A read that fails unless the table has step 6 (the column and the counter table); run at app
 * start when `ordering.sequence` is on.
 */
export function keySequenceProbes(n: OutboxTableNames): string[] {
  return [
    `SELECT 1 FROM ${n.table} WHERE 1 = 0 AND key_seq IS NULL`,
    `SELECT 1 FROM ${n.keySeqTable} WHERE 1 = 0`,
  ];
}
