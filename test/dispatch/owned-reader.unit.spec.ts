import { OwnedBacklog } from '../../lib/dispatch/partitions/owned-backlog';
import { OwnedReader, type OwnedReaderParts } from '../../lib/dispatch/partitions/owned-reader';
import type { ClaimedRecord, OwnedRead } from '../../lib/store/ports/outbox-store.port';

const record = (id: number): ClaimedRecord =>
  ({ id: String(id), messageId: `m${id}`, key: `k${id}` }) as unknown as ClaimedRecord;

function answer(ids: readonly number[]): OwnedRead {
  return {
    records: ids.map(record),
    partitions: new Map(ids.map((id) => [String(id), 7])),
    previous: new Map(),
    snapshot: { xmin: 10n, xid: 10n },
  };
}

/** A reader over a store whose reads answer when the test says. */
function reader(wake: () => void = () => undefined): {
  reader: OwnedReader;
  answerNext: (ids: readonly number[]) => void;
  /** One read, answered with `ids`. */
  readAnswering: (ids: readonly number[]) => Promise<void>;
  /** Where each read started (`after`), in order. */
  afters: string[];
  /** How many rows each read asked for, in order. */
  limits: number[];
} {
  let respond: (read: OwnedRead) => void = () => undefined;
  const afters: string[] = [];
  const limits: number[] = [];
  const parts = {
    store: {
      readOwned: (_partitions: unknown, limit: number, range: { after: string }) => {
        afters.push(range.after);
        limits.push(limit);
        return new Promise<OwnedRead>((resolve) => (respond = resolve));
      },
      promoteOrphans: () => Promise.resolve(0),
    },
    park: () => Promise.resolve(0),
    backlog: new OwnedBacklog({ ordered: true, maxRun: 100 }),
    ownership: { readable: () => [7] },
    pipeline: {
      watchdog: { run: <T>(_what: string, fn: () => Promise<T>) => fn() },
      dbCallMs: 1_000,
      pause: () => undefined,
    },
    options: {
      dispatcher: { batchSize: 10, pollIntervalMs: 1_000 },
      unlocker: { intervalMs: 1_000 },
    },
    log: { warn: () => undefined, log: () => undefined },
    wake,
    sweepIntervalMs: 60_000,
  } as unknown as OwnedReaderParts;
  const owned = new OwnedReader(parts);
  return {
    reader: owned,
    answerNext: (ids) => respond(answer(ids)),
    readAnswering: async (ids) => {
      const read = owned.read();
      respond(answer(ids));
      await read;
    },
    afters,
    limits,
  };
}

describe('OwnedReader (reads of the owned partitions)', () => {
  it('has nothing more to read after a read that did not fill its limit', async () => {
    const { reader: r, answerNext } = reader();
    r.woke();
    const read = r.read();
    answerNext([1, 2]);
    expect(await read).toBe(2);
    expect(r.wantsRead).toBe(false);
  });

  it('after partitions are gained, sweeps from the start at once, the first read a tenth of a batch and the next ones whole', async () => {
    const { reader: r, answerNext, afters, limits } = reader();
    r.woke();
    const first = r.read();
    answerNext([]);
    await first;
    r.gained();
    await r.sweepIfDue();
    expect(r.sweeping).toBe(true);
    const short = r.read();
    // It filled its limit (1 of a batch of 10): the sweep goes on after it.
    answerNext([4]);
    expect(await short).toBe(1);
    expect(r.sweeping).toBe(true);
    const whole = r.read();
    answerNext([5, 6]);
    expect(await whole).toBe(2);
    expect(r.sweeping).toBe(false);
    expect(limits).toEqual([10, 1, 10]);
    expect(afters.slice(1)).toEqual(['0', '4']);
  });

  it('keeps a wake-up that came while a read ran: a commit after its snapshot is read next', async () => {
    const { reader: r, answerNext } = reader();
    r.woke();
    const read = r.read();
    // A commit's wake-up while the statement runs: its row may not be in this read's snapshot.
    r.woke();
    answerNext([1]);
    expect(await read).toBe(1);
    expect(r.wantsRead).toBe(true);
  });

  it('reads from a row the log named once its floor has passed it (its id was taken before its transaction had an id), and from the floor otherwise', async () => {
    const { reader: r, readAnswering, afters } = reader();
    r.woke();
    // Nothing given a transaction id between its snapshot and its own: the floor passes 6 and 7
    // at once.
    await readAnswering([6, 7]);
    // Row 5 commits now; the log names it.
    r.named('5');
    await readAnswering([5]);
    r.woke();
    await readAnswering([]);
    // A row above the floor: read from the floor, as any wake-up.
    r.named('9');
    await readAnswering([9]);
    expect(afters).toEqual(['0', '4', '7', '7']);
  });

  describe('a row the log named that a new snapshot does not show yet', () => {
    beforeEach(() => jest.useFakeTimers());
    afterEach(() => jest.useRealTimers());

    it('is read from again 25 ms, 250 ms and 2.5 s after it was named, each look waking the owner, and not after', async () => {
      const wake = jest.fn();
      const { reader: r, readAnswering, afters } = reader(wake);
      r.woke();
      await readAnswering([6, 7]);
      // Row 5's commit is in the log, but the read's snapshot does not show it yet.
      r.named('5');
      await readAnswering([]);
      // Any other read goes on from the floor.
      r.woke();
      await readAnswering([]);
      expect(afters).toEqual(['0', '4', '7']);

      await jest.advanceTimersByTimeAsync(24);
      expect(wake).not.toHaveBeenCalled();
      await jest.advanceTimersByTimeAsync(1);
      expect(wake).toHaveBeenCalledTimes(1);
      expect(r.wantsRead).toBe(true);
      await readAnswering([]);
      await jest.advanceTimersByTimeAsync(225);
      expect(wake).toHaveBeenCalledTimes(2);
      await readAnswering([]);
      await jest.advanceTimersByTimeAsync(2_250);
      expect(wake).toHaveBeenCalledTimes(3);
      await readAnswering([5]);
      expect(afters).toEqual(['0', '4', '7', '4', '4', '4']);

      await jest.advanceTimersByTimeAsync(60_000);
      expect(wake).toHaveBeenCalledTimes(3);
    });

    it('makes names within one delay of each other one look, from the lowest of them', async () => {
      const wake = jest.fn();
      const { reader: r, readAnswering, afters } = reader(wake);
      r.woke();
      await readAnswering([6, 7, 8]);
      r.named('6');
      await jest.advanceTimersByTimeAsync(20);
      r.named('5');
      await readAnswering([]);
      await jest.advanceTimersByTimeAsync(25);
      expect(wake).toHaveBeenCalledTimes(1);
      await readAnswering([5]);
      expect(afters).toEqual(['0', '4', '4']);
      r.stop();
      await jest.advanceTimersByTimeAsync(10_000);
      expect(wake).toHaveBeenCalledTimes(1);
    });
  });

  describe('sweeps asked for (retries and delayed messages falling due)', () => {
    beforeEach(() => jest.useFakeTimers());
    afterEach(() => jest.useRealTimers());

    /** Starts the sweep that is due, and ends it with a read that finds nothing. */
    async function sweep(r: OwnedReader, answerNext: (ids: readonly number[]) => void) {
      await r.sweepIfDue();
      expect(r.sweeping).toBe(true);
      const read = r.read();
      answerNext([]);
      await read;
      expect(r.sweeping).toBe(false);
    }

    it('keeps one asked for later than another: each wakes the owner and is swept for in its turn', async () => {
      const wake = jest.fn();
      const { reader: r, answerNext } = reader(wake);
      // The sweep of a start, then none due on the timer for a minute.
      await sweep(r, answerNext);
      r.sweepSoon(100);
      r.sweepSoon(300);
      await r.sweepIfDue();
      expect(r.sweeping).toBe(false);

      await jest.advanceTimersByTimeAsync(100);
      expect(wake).toHaveBeenCalledTimes(1);
      await sweep(r, answerNext);

      await jest.advanceTimersByTimeAsync(150);
      await r.sweepIfDue();
      expect(r.sweeping).toBe(false);
      await jest.advanceTimersByTimeAsync(50);
      expect(wake).toHaveBeenCalledTimes(2);
      await sweep(r, answerNext);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(wake).toHaveBeenCalledTimes(2);
    });
  });
});
