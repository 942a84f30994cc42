import {
  summarizeDeliveryPartitions,
  partitionRanges,
  type DeliveryDispatcherRow,
  type DeliveryPartitionRow,
} from '../../lib/module/admin/delivery-partitions.summary';

// The operator's view of delivery partitions, from the rows the admin reads (the integration
// specs read them from a real table: test/operations/outbox-admin.spec.ts).

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

function partitions(owner: (p: number) => string | null, generation = 1): DeliveryPartitionRow[] {
  return Array.from({ length: 256 }, (_, p) => ({
    partition: p,
    owner: owner(p),
    generation: String(generation),
    since: at(p % 10),
  }));
}

const row = (
  instance: string,
  ageMs: number,
  working = true,
  validMs = 1_500,
): DeliveryDispatcherRow => ({
  instance,
  label: instance.split('#')[0] ?? null,
  valid_ms: validMs,
  working,
  joined_at: at(0),
  heartbeat_age_ms: String(ageMs),
});

describe('the delivery partitions summary', () => {
  it('writes partition numbers as ranges', () => {
    expect(partitionRanges([])).toBe('');
    expect(partitionRanges([7])).toBe('7');
    expect(partitionRanges([0, 1, 2, 5, 7, 8, 255])).toBe('0-2, 5, 7-8, 255');
  });

  it('is null when no partition has an owner and no heartbeat holds: not in use', () => {
    expect(
      summarizeDeliveryPartitions(
        [],
        partitions(() => null, 0),
        [],
      ),
    ).toBeNull();
    // A process that stopped beating long ago, holding nothing.
    expect(
      summarizeDeliveryPartitions(
        [],
        partitions(() => null),
        [row('a#1', 60_000)],
      ),
    ).toBeNull();
  });

  it("names each process's state: delivering, waiting for the 'leases' mode, or gone while others take over", () => {
    const owner = (p: number) => (p < 128 ? 'a#1' : p < 250 ? 'b#2' : null);
    const view = summarizeDeliveryPartitions(
      [
        { owner: 'a#1', label: 'a', partitions: 128, heartbeatAgeMs: 200, live: true },
        { owner: 'b#2', label: 'b', partitions: 122, heartbeatAgeMs: 9_000, live: false },
        { owner: null, label: null, partitions: 6, heartbeatAgeMs: null, live: false },
      ],
      partitions(owner, 2),
      [row('a#1', 200), row('b#2', 9_000), row('c#3', 100, false)],
    );
    expect(view).toMatchObject({
      inUse: true,
      total: 256,
      unowned: 6,
      moves: {
        total: 512,
        lastAt: at(9),
        latest: expect.arrayContaining([
          {
            at: at(9),
            owner: 'a#1',
            partitions: 12,
            ranges: expect.stringMatching(/^9, 19, /) as string,
          },
          { at: at(5), owner: null, partitions: 1, ranges: '255' },
        ]) as unknown,
      },
      dispatchers: [
        {
          id: 'a#1',
          instanceId: 'a',
          state: 'delivering',
          partitions: 128,
          share: 0.5,
          ranges: '0-127',
        },
        {
          id: 'b#2',
          instanceId: 'b',
          state: 'gone',
          partitions: 122,
          ranges: '128-249',
          heartbeatAgeMs: 9_000,
        },
        {
          id: 'c#3',
          instanceId: 'c',
          state: 'waiting',
          partitions: 0,
          share: 0,
          ranges: '',
          lastTakenAt: null,
        },
      ],
    });
    expect(view?.dispatchers[0]?.lastTakenAt).toEqual(at(9));
    // Latest first; one moment's partitions of one owner together, every moved one once.
    const latest = view?.moves.latest ?? [];
    const times = latest.map((m) => m.at.getTime());
    expect(times).toEqual([...times].sort((a, b) => b - a));
    expect(new Set(latest.map((m) => `${m.at.getTime()} ${m.owner}`)).size).toBe(latest.length);
    expect(latest.reduce((n, m) => n + m.partitions, 0)).toBe(256);
  });
});
