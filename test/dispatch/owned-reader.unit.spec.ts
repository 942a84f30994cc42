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
    snapshot: { xmin: 10n, xmax: 10n },
  };
}

/** A reader over a store whose reads answer when the test says. */
function reader(): { reader: OwnedReader; answerNext: (ids: readonly number[]) => void } {
  let respond: (read: OwnedRead) => void = () => undefined;
  const parts = {
    store: {
      readOwned: () => new Promise<OwnedRead>((resolve) => (respond = resolve)),
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
    wake: () => undefined,
  } as unknown as OwnedReaderParts;
  return { reader: new OwnedReader(parts), answerNext: (ids) => respond(answer(ids)) };
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
});
