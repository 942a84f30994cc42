import { OwnedBacklog } from '../../lib/dispatch/partitions/owned-backlog';
import { idAfter } from '../../lib/store/rows/outbox-row.mapper';
import { ReadFloor } from '../../lib/dispatch/partitions/read-floor';
import type { ClaimedRecord, OwnedRead } from '../../lib/store/ports/outbox-store.port';

const record = (id: number, key: string | null): ClaimedRecord =>
  ({ id: String(id), messageId: `m${id}`, key }) as unknown as ClaimedRecord;

/** A read's answer: rows as [id, key, previous id?], all in partition 7. */
function found(
  rows: readonly (readonly [number, string | null, number?])[],
  snapshot = { xmin: 10n, xid: 10n },
): OwnedRead {
  return {
    records: rows.map(([id, key]) => record(id, key)),
    partitions: new Map(rows.map(([id]) => [String(id), 7])),
    previous: new Map(
      rows.flatMap(([id, , prev]) => (prev === undefined ? [] : [[String(id), String(prev)]])),
    ),
    snapshot,
  };
}

const ids = (records: readonly ClaimedRecord[]): string[] => records.map((r) => r.id);

/** One read taken in: whether it asked for a key to be parked (a row held back, nothing of its key in memory). */
function readInto(
  backlog: OwnedBacklog,
  rows: readonly (readonly [number, string | null, number?])[],
): boolean {
  const read = backlog.open();
  try {
    return backlog.takeIn(read, found(rows)).length > 0;
  } finally {
    backlog.close(read);
  }
}
const readable = (partition: number): boolean => partition === 7;

describe('OwnedBacklog (per-key order in memory for a partition owner)', () => {
  it('orders ids of any length by number', () => {
    expect(idAfter('10', '9')).toBe(true);
    expect(idAfter('9', '10')).toBe(false);
    expect(idAfter('11', '11')).toBe(false);
  });

  it("picks each key's queued run once nothing of the key is in flight, in id order", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    const read = backlog.open();
    expect(
      backlog.takeIn(
        read,
        found([
          [1, 'a'],
          [2, 'b'],
          [3, 'a', 1],
          [4, null],
        ]),
      ),
    ).toEqual([]);
    backlog.close(read);
    const first = backlog.pick(10, readable);
    expect(ids(first.records)).toEqual(['1', '2', '3', '4']);
    expect(backlog.busy(7)).toBe(true);
    // A later row of an in-flight key is read behind it, and waits for it.
    readInto(backlog, [[5, 'a', 3]]);
    expect(ids(backlog.pick(10, readable).records)).toEqual([]);
    backlog.end(first.records, new Set(['1', '2', '3', '4']));
    expect(backlog.busy(7)).toBe(false);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['5']);
  });

  it('refuses a row whose earlier row of its key is not in memory, and skips the key until forgotten', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    const read = backlog.open();
    // Row 9 of key a follows row 3, which this owner never read (it backs off).
    expect(
      backlog.takeIn(
        read,
        found([
          [9, 'a', 3],
          [10, 'a', 9],
          [11, 'b'],
        ]),
      ),
    ).toEqual(['a']);
    backlog.close(read);
    expect(backlog.held).toEqual(['a']);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['11']);
    backlog.forgetHeld();
    expect(backlog.held).toEqual([]);
  });

  it("drops a key's queued rows when its row in flight ends other than delivered", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    readInto(backlog, [[1, 'a']]);
    const batch = backlog.pick(10, readable);
    const later = backlog.open();
    backlog.takeIn(
      later,
      found([
        [2, 'a', 1],
        [3, 'b'],
      ]),
    );
    backlog.close(later);
    backlog.end(batch.records, new Set());
    expect(backlog.queued).toBe(1);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['3']);
    // Read again behind row 1 (pending again): refused until row 1 is in memory.
    const again = backlog.open();
    expect(backlog.takeIn(again, found([[2, 'a', 1]]))).toEqual(['a']);
    backlog.close(again);
  });

  it("holds a key whose chain is in memory without parking it: the park would take the chain's own rows, whose settle would then change nothing (published again)", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    const read = backlog.open();
    // 3 and 4 join key a's chain; 6 waits behind 5, a row not in memory (due later).
    expect(
      backlog.takeIn(
        read,
        found([
          [3, 'a'],
          [4, 'a', 3],
          [6, 'a', 5],
        ]),
      ),
    ).toEqual([]);
    backlog.close(read);
    expect(backlog.held).toContain('a');
    const batch = backlog.pick(10, readable);
    expect(ids(batch.records)).toEqual(['3', '4']);
    backlog.end(batch.records, new Set(['3', '4']));
    // Nothing of the key in memory any more: the same refusal parks its rows.
    const again = backlog.open();
    expect(backlog.takeIn(again, found([[6, 'a', 5]]))).toEqual(['a']);
    backlog.close(again);
  });

  it('takes a row whose earlier row was delivered after the read began (an older snapshot)', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    readInto(backlog, [[1, 'a']]);
    const batch = backlog.pick(10, readable);
    const read = backlog.open();
    backlog.end(batch.records, new Set(['1']));
    expect(backlog.takeIn(read, found([[2, 'a', 1]]))).toEqual([]);
    backlog.close(read);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['2']);
  });

  it('refuses such a row when the earlier one ended other than delivered', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    readInto(backlog, [[1, 'a']]);
    const batch = backlog.pick(10, readable);
    const read = backlog.open();
    backlog.end(batch.records, new Set());
    expect(backlog.takeIn(read, found([[2, 'a', 1]]))).toEqual(['a']);
    backlog.close(read);
  });

  it('drops queued rows of a partition no longer readable', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    readInto(backlog, [[1, 'a']]);
    expect(ids(backlog.pick(10, (p) => p === 8).records)).toEqual([]);
    expect(backlog.queued).toBe(0);
  });

  it("drops a queued key's whole chain with its head when its partition is no longer readable", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 1 });
    readInto(backlog, [
      [1, 'a'],
      [2, 'a', 1],
      [3, 'a', 2],
      [4, 'b'],
    ]);
    expect(ids(backlog.pick(10, (p) => p === 8).records)).toEqual([]);
    expect(backlog.queued).toBe(0);
    // Read again once the partition is back: the key starts over from its first row.
    readInto(backlog, [
      [1, 'a'],
      [2, 'a', 1],
    ]);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['1']);
  });

  it("has nothing pickable while a key's later rows wait behind its run in flight, its partition readable or not", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 1 });
    readInto(backlog, [
      [1, 'a'],
      [2, 'a', 1],
    ]);
    const run = backlog.pick(10, readable);
    expect(ids(run.records)).toEqual(['1']);
    expect(backlog.queued).toBe(1);
    expect(backlog.pickable).toBe(false);
    expect(ids(backlog.pick(10, () => false).records)).toEqual([]);
    expect(backlog.pickable).toBe(false);
    // The run ends while the partition is no longer readable: its next row is dropped.
    backlog.end(run.records, new Set(['1']));
    expect(backlog.pickable).toBe(true);
    expect(ids(backlog.pick(10, () => false).records)).toEqual([]);
    expect(backlog.queued).toBe(0);
    expect(backlog.pickable).toBe(false);
  });

  it('picks a row a sweep brings below the rows held, in id order with them', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    readInto(backlog, [
      [20, 'a'],
      [30, 'b'],
    ]);
    // A sweep from the start of the table finds a retry fallen due, and a key's older row.
    readInto(backlog, [
      [5, 'c'],
      [25, null],
      [10, 'd'],
    ]);
    expect(ids(backlog.pick(3, readable).records)).toEqual(['5', '10', '20']);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['25', '30']);
  });

  it("makes a key's next row pickable only once its whole run in flight ended", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 2 });
    readInto(backlog, [
      [1, 'a'],
      [2, 'a', 1],
      [3, 'a', 2],
    ]);
    const run = backlog.pick(10, readable);
    expect(ids(run.records)).toEqual(['1', '2']);
    expect(ids(backlog.pick(10, readable).records)).toEqual([]);
    backlog.end(run.records, new Set(['1', '2']));
    expect(ids(backlog.pick(10, readable).records)).toEqual(['3']);
  });

  it("cuts a key's run at maxRun: the rest waits for the run to end", () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 2 });
    readInto(backlog, [
      [1, 'a'],
      [2, 'a', 1],
      [3, 'a', 2],
      [4, 'b'],
    ]);
    const first = backlog.pick(10, readable);
    expect(ids(first.records)).toEqual(['1', '2', '4']);
    expect(ids(backlog.pick(10, readable).records)).toEqual([]);
    backlog.end(first.records, new Set(['1', '2', '4']));
    expect(ids(backlog.pick(10, readable).records)).toEqual(['3']);
  });

  it('without per-key order, every row goes on its own, whatever its key', () => {
    const backlog = new OwnedBacklog({ ordered: false, maxRun: 50 });
    // Row 9 of key a follows row 3, which this owner never read: taken all the same.
    expect(readInto(backlog, [[9, 'a', 3]])).toBe(false);
    readInto(backlog, [[10, 'a', 9]]);
    const first = backlog.pick(1, readable);
    expect(ids(first.records)).toEqual(['9']);
    expect(ids(backlog.pick(10, readable).records)).toEqual(['10']);
    // Row 9 retried: row 10 stays, nothing of it dropped.
    backlog.end(first.records, new Set());
    expect(backlog.queued).toBe(0);
  });

  it('picks at most the limit, cutting a run', () => {
    const backlog = new OwnedBacklog({ ordered: true, maxRun: 50 });
    const read = backlog.open();
    backlog.takeIn(
      read,
      found([
        [1, 'a'],
        [2, 'a', 1],
        [3, 'a', 2],
      ]),
    );
    backlog.close(read);
    expect(ids(backlog.pick(2, readable).records)).toEqual(['1', '2']);
  });
});

describe('ReadFloor (where an owner reads from)', () => {
  it("moves past a read once a later snapshot's xmin reaches the transaction id the read was given", () => {
    const floor = new ReadFloor();
    floor.saw('0', found([[5, 'a']], { xmin: 100n, xid: 105n }));
    expect(floor.after).toBe('0');
    // Transaction 103 was still running: a row of it below 5 could still commit.
    floor.saw('0', found([[6, 'b']], { xmin: 103n, xid: 110n }));
    expect(floor.after).toBe('0');
    floor.saw('0', found([], { xmin: 105n, xid: 112n }));
    expect(floor.after).toBe('5');
    floor.saw('5', found([], { xmin: 112n, xid: 112n }));
    expect(floor.after).toBe('6');
  });

  it('does not pass a row of a transaction its snapshot did not list: one given a higher id than the newest ended one runs unlisted', () => {
    const floor = new ReadFloor();
    // Transaction 100 took row 4, then row 5 committed in 99; the snapshot's xmax was 100 (one
    // past the newest ended) and listed no running transaction, so xmin is 100 too. The read
    // itself was given 101.
    floor.saw('0', found([[5, 'a']], { xmin: 100n, xid: 101n }));
    expect(floor.after).toBe('0');
    // 100 still runs: a later read (given 102) still starts below row 5.
    floor.saw('0', found([[9, 'b']], { xmin: 100n, xid: 102n }));
    expect(floor.after).toBe('0');
    // 100 committed: the next read from the floor finds row 4, and only now the floor moves.
    floor.saw('0', found([[4, 'c']], { xmin: 103n, xid: 103n }));
    expect(floor.after).toBe('9');
  });

  it('moves past a read at once when nothing was given a transaction id between its snapshot and its own', () => {
    const floor = new ReadFloor();
    floor.saw('0', found([[5, 'a']], { xmin: 100n, xid: 100n }));
    expect(floor.after).toBe('5');
  });

  it('does not move for a read that started above it', () => {
    const floor = new ReadFloor();
    floor.saw('50', found([[60, 'a']], { xmin: 1n, xid: 1n }));
    floor.saw('0', found([], { xmin: 5n, xid: 5n }));
    expect(floor.after).toBe('0');
  });
});
