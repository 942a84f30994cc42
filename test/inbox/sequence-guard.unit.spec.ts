import { OUTBOX_HEADER_KEY, OUTBOX_HEADER_SEQUENCE, OutboxOptionsError } from '../../lib';
import {
  InvalidSequenceError,
  SequenceGapError,
  SequenceGuard,
  sequenceOf,
  type SequenceStore,
} from '../../lib/inbox';

// SequenceGuard: the gap check for consumers without the inbox, in memory or over a store.

const m = (key: string, sequence: number) => ({ key, sequence });

describe('SequenceGuard', () => {
  it('reports next, duplicate, gap and out-of-order against the last accepted number of each key', async () => {
    const guard = new SequenceGuard();
    expect(await guard.check(m('a', 1))).toEqual({ status: 'next', expected: 1 });
    expect(await guard.check(m('a', 2))).toEqual({ status: 'gap', expected: 1 });
    expect(await guard.accept(m('a', 1))).toEqual({ status: 'next', expected: 1 });
    expect(await guard.accept(m('a', 2))).toEqual({ status: 'next', expected: 2 });
    expect(await guard.accept(m('a', 2))).toEqual({ status: 'duplicate', expected: 3 });
    expect(await guard.accept(m('a', 1))).toEqual({ status: 'out-of-order', expected: 3 });
    // The default policy accepts a gap at once and moves the key past it.
    expect(await guard.accept(m('a', 5))).toEqual({ status: 'gap', expected: 3 });
    expect(await guard.check(m('a', 6))).toEqual({ status: 'next', expected: 6 });
    // Keys are apart.
    expect(await guard.check(m('b', 1))).toEqual({ status: 'next', expected: 1 });
  });

  it('rejects a gap with SequenceGapError under onGap reject, recording nothing', async () => {
    const guard = new SequenceGuard({ onGap: 'reject' });
    await guard.accept(m('k', 1));
    const refused = guard.accept(m('k', 3));
    await expect(refused).rejects.toBeInstanceOf(SequenceGapError);
    await expect(refused).rejects.toMatchObject({ key: 'k', expected: 2, received: 3 });
    expect(await guard.check(m('k', 2))).toEqual({ status: 'next', expected: 2 });
  });

  it('holds a message until its predecessor is accepted, and lets it through as next', async () => {
    const guard = new SequenceGuard({ onGap: 'hold', holdMs: 5_000 });
    await guard.accept(m('k', 1));
    const started = Date.now();
    const third = guard.accept(m('k', 3));
    const order: number[] = [];
    void third.then(() => order.push(3));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await guard.accept(m('k', 2)).then(() => order.push(2));
    expect(await third).toEqual({ status: 'next', expected: 3 });
    expect(order).toEqual([2, 3]);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('holds when the call gives a hold time, whatever the guard policy', async () => {
    const guard = new SequenceGuard();
    await guard.accept(m('k', 1));
    const started = Date.now();
    expect(await guard.accept(m('k', 3), { holdMs: 100 })).toEqual({ status: 'gap', expected: 2 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
  });

  it('holds a gap no longer than holdMs, then accepts it as a gap', async () => {
    const guard = new SequenceGuard({ onGap: 'hold', holdMs: 150 });
    await guard.accept(m('k', 1));
    const started = Date.now();
    expect(await guard.accept(m('k', 4))).toEqual({ status: 'gap', expected: 2 });
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(140);
    expect(waited).toBeLessThan(1_500);
    expect(await guard.check(m('k', 5))).toEqual({ status: 'next', expected: 5 });
  });

  it('keeps its numbers in a store of the caller', async () => {
    const saved = new Map<string, number>([['k', 41]]);
    const store: SequenceStore = {
      lastSeen: (key) => Promise.resolve(saved.get(key)),
      record: (key, sequence) => {
        saved.set(key, sequence);
        return Promise.resolve();
      },
    };
    const guard = new SequenceGuard({ store });
    expect(await guard.accept(m('k', 42))).toEqual({ status: 'next', expected: 42 });
    expect(saved.get('k')).toBe(42);
  });

  it('refuses bad numbers and options with typed errors', async () => {
    const guard = new SequenceGuard();
    await expect(guard.check(m('k', 0))).rejects.toBeInstanceOf(InvalidSequenceError);
    await expect(guard.check(m('', 1))).rejects.toBeInstanceOf(InvalidSequenceError);
    await expect(guard.check(m('k', 1.5))).rejects.toBeInstanceOf(InvalidSequenceError);
    expect(() => new SequenceGuard({ holdMs: 0 })).toThrow(OutboxOptionsError);
    expect(() => new SequenceGuard({ onGap: 'wait' as never })).toThrow(
      /'accept', 'hold' or 'reject'/,
    );
  });

  it('reads key and number from text, byte and number headers, null without a number', () => {
    expect(sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: '7' })).toEqual(
      m('k', 7),
    );
    expect(
      sequenceOf({
        [OUTBOX_HEADER_KEY]: Buffer.from('k'),
        [OUTBOX_HEADER_SEQUENCE]: Buffer.from('12'),
      }),
    ).toEqual(m('k', 12));
    expect(sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: 3 })).toEqual(
      m('k', 3),
    );
    expect(sequenceOf({ [OUTBOX_HEADER_KEY]: 'k' })).toBeNull();
    expect(sequenceOf(undefined)).toBeNull();
    // A number the guard cannot use is refused rather than read as none (sequence-of.unit.spec.ts).
    expect(() => sequenceOf({ [OUTBOX_HEADER_SEQUENCE]: '1' })).toThrow(InvalidSequenceError);
    expect(() => sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: '0' })).toThrow(
      InvalidSequenceError,
    );
  });
});
