import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { KeyedRow, NewOutboxRow } from '../ports/outbox-store.port';

/**
 * Sequence numbers per destination and key (`ordering.sequence`,
 * docs/ordering-and-dead-letters.md). Each keyed message written by an enqueue gets the next
 * number of its (topic, key) counter from `<table>_key_seq`, in a
 * statement sent right after the insert, in the caller's transaction: the counter row stays
 * locked until that transaction ends, so a later writer of the key waits for the commit and
 * takes the next number, and a rollback gives the numbers back. A key's numbers on a topic are
 * therefore 1, 2, 3… in commit order with no gap among committed messages, and the counter
 * outlives the rows the cleaner deletes. The counter is per topic because a consumer reads one
 * destination: a key used on two topics (or a re-drive copy sent elsewhere) must not leave a
 * hole in the other topic's numbers.
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
      keyed.push({ messageId: row.messageId, topic: row.topic, key: row.key });
    }
  }
  return keyed;
}

/** A counter's identity in maps: its topic and key (any characters, so JSON, not a separator). */
const counterOf = (topic: string, key: string): string => JSON.stringify([topic, key]);

/**
 * How many rows of each (topic, key) counter, sorted by topic then key so that concurrent
 * writers lock counters alike.
 */
export function keyCounts(rows: readonly KeyedRow[]): [string, string, number][] {
  const counts = new Map<string, [string, string, number]>();
  for (const row of rows) {
    const id = counterOf(row.topic, row.key);
    const entry = counts.get(id);
    if (entry === undefined) counts.set(id, [row.topic, row.key, 1]);
    else entry[2] += 1;
  }
  const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  return [...counts.values()].sort(([ta, ka], [tb, kb]) => cmp(ta, tb) || cmp(ka, kb));
}

/**
 * Each row's number from its counter after the increment (`last`, by topic then key): a
 * counter's rows take the numbers up to `last` in the order they were written (their ids' order).
 */
export function numbersOf(
  rows: readonly KeyedRow[],
  last: (topic: string, key: string) => number | undefined,
): number[] {
  const after = rowsAfter(rows);
  return rows.map((row, i) => {
    const top = last(row.topic, row.key);
    if (top === undefined) {
      throw new Error(`no sequence counter came back for topic ${row.topic} key ${row.key}`);
    }
    return top - (after[i] ?? 0);
  });
}

/** For each row, how many rows of its counter (topic and key) come after it among `rows`. */
export function rowsAfter(rows: readonly KeyedRow[]): number[] {
  const counts = new Map<string, number>();
  for (const row of rows) {
    const id = counterOf(row.topic, row.key);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  const seen = new Map<string, number>();
  return rows.map((row) => {
    const id = counterOf(row.topic, row.key);
    const index = (seen.get(id) ?? 0) + 1;
    seen.set(id, index);
    return (counts.get(id) ?? 0) - index;
  });
}

/** The counter map `numbersOf` reads, from the rows a counter upsert returned. */
export function countersOf(
  counters: readonly { topic: string; message_key: string; last_seq: number | bigint | string }[],
): (topic: string, key: string) => number | undefined {
  const map = new Map(counters.map((c) => [counterOf(c.topic, c.message_key), Number(c.last_seq)]));
  return (topic, key) => map.get(counterOf(topic, key));
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
