import { OutboxOptionsError } from '../../lib';
import { GapRepairAsker } from '../../lib/inbox/gap-repair-asker';
import type { GapRepairAnswer, GapRepairRequest } from '../../lib/inbox';
import { GapRepairRate } from '../../lib/module/admin/gap-repair-rate';

// The pure parts of gap repair: which numbers a held message asks for, and the producer's rate.

const answered: GapRepairAnswer = {
  status: 'answered',
  resent: [],
  pending: [],
  dead: [],
  gone: [],
  repairId: null,
  retryAfterMs: null,
};

function asker(options: Partial<ConstructorParameters<typeof GapRepairAsker>[0]> = {}) {
  const requests: GapRepairRequest[] = [];
  const a = new GapRepairAsker(
    {
      client: {
        request: (r) => {
          requests.push(r);
          return Promise.resolve(answered);
        },
      },
      topic: 'orders',
      ...options,
    },
    'hold',
  );
  return { a, requests };
}

describe('GapRepairAsker', () => {
  it('asks for the open numbers not held here, lowest first, up to maxSequences', () => {
    const { a } = asker({ maxSequences: 2 });
    const release = a.markHeld('c', { key: 'k', sequence: 3 });
    const before = a.snapshot('c', 'k');
    const open = a.open(1, 6, new Set([4]));
    expect(open).toEqual([2, 3, 5]);
    expect(a.toAsk('c', 'k', 1, open, before)).toEqual([2, 5]);
    // Another consumer name holds its own numbers.
    expect(a.toAsk('other', 'k', 1, open, a.snapshot('other', 'k'))).toEqual([2, 3]);
    release();
  });

  it('reads again rather than asking when a delivery of the key ended since the snapshot', () => {
    const { a } = asker();
    const asking = a.markHeld('c', { key: 'k', sequence: 5 });
    const handled = a.markHeld('c', { key: 'k', sequence: 4 });
    const before = a.snapshot('c', 'k');
    handled();
    expect(a.toAsk('c', 'k', 3, [4], before)).toBeNull();
    expect(a.toAsk('c', 'k', 3, [4], a.snapshot('c', 'k'))).toEqual([4]);
    asking();
  });

  it('asks nothing for a key never seen unless fromFirst', () => {
    expect(asker().a.toAsk('c', 'k', undefined, [1, 2], { numbers: new Set(), ended: 0 })).toEqual(
      [],
    );
    expect(
      asker({ fromFirst: true }).a.toAsk('c', 'k', undefined, [1, 2], {
        numbers: new Set(),
        ended: 0,
      }),
    ).toEqual([1, 2]);
  });

  it('sends the topic of the consumer, and reports a failed request as no answer', async () => {
    const { a, requests } = asker({ topic: (consumer) => `${consumer}.topic` });
    expect(await a.ask('billing', 'k', [2])).toEqual(answered);
    expect(requests).toEqual([
      { topic: 'billing.topic', key: 'k', consumer: 'billing', sequences: [2] },
    ]);
    const errors: unknown[] = [];
    const failing = new GapRepairAsker(
      {
        client: { request: () => Promise.reject(new Error('down')) },
        topic: 'orders',
        onError: (_r, e) => errors.push(e),
      },
      'reject',
    );
    expect(await failing.ask('c', 'k', [1])).toBeNull();
    expect(errors).toHaveLength(1);
  });

  it('refuses options that cannot work', () => {
    const client = { request: () => Promise.resolve(answered) };
    expect(() => new GapRepairAsker({ client, topic: 'orders' }, 'accept')).toThrow(
      OutboxOptionsError,
    );
    expect(() => new GapRepairAsker({ client, topic: '' }, 'hold')).toThrow(
      /sequence.repair.topic/,
    );
    expect(() => new GapRepairAsker({ client, topic: 'o', afterMs: 0 }, 'hold')).toThrow(
      /sequence.repair.afterMs/,
    );
    expect(() => new GapRepairAsker({ client: {} as never, topic: 'o' }, 'hold')).toThrow(
      /sequence.repair.client/,
    );
  });
});

describe('GapRepairRate', () => {
  it('answers a burst at once, then one per 1/rate seconds', () => {
    let now = 0;
    const rate = new GapRepairRate(2, 3, () => now);
    expect([rate.take(), rate.take(), rate.take()]).toEqual([0, 0, 0]);
    expect(rate.take()).toBe(500);
    now += 250;
    expect(rate.take()).toBe(250);
    now += 250;
    expect(rate.take()).toBe(0);
    now += 10_000;
    expect([rate.take(), rate.take(), rate.take(), rate.take()]).toEqual([0, 0, 0, 500]);
  });
});
