import { hashKey, sortedKeyLocks } from '../../lib/store/rows/outbox-row.mapper';

// Every locker (enqueue, park, promotion, settle) takes its keys' locks in one order, or two of
// them can deadlock: the ids must come out distinct and ascending, whatever the keys' order.

describe('sortedKeyLocks', () => {
  const keys = Array.from({ length: 300 }, (_, i) => (i % 7 === 0 ? null : `order-${i % 120}`));

  it('gives each key once, ascending, skipping messages without a key', () => {
    const ids = sortedKeyLocks(keys);
    const expected = [
      ...new Set(keys.filter((k): k is string => k !== null).map((k) => hashKey(k))),
    ].sort((a, b) => a - b);
    expect(ids).toEqual(expected);
    expect(ids.length).toBe(new Set(keys.filter((k) => k !== null)).size);
  });

  it('gives the same ids whatever the order of the keys', () => {
    expect(sortedKeyLocks([...keys].reverse())).toEqual(sortedKeyLocks(keys));
  });

  it('folds keys into buckets, each bucket once', () => {
    const buckets = sortedKeyLocks(keys, 16);
    expect(buckets.every((b) => Number.isInteger(b) && b >= 0 && b < 16)).toBe(true);
    expect(buckets).toEqual([...new Set(buckets)].sort((a, b) => a - b));
    expect(buckets).toEqual(
      [...new Set(keys.flatMap((k) => (k === null ? [] : [hashKey(k) % 16])))].sort(
        (a, b) => a - b,
      ),
    );
  });

  it('is empty for no keys, or only messages without one', () => {
    expect(sortedKeyLocks([])).toEqual([]);
    expect(sortedKeyLocks([null, null])).toEqual([]);
  });
});
