import {
  ALL_PARTITIONS,
  namesEveryPartition,
} from '../../lib/store/shared-sql/delivery-partitions';

// A read that names every partition is written without the list (postgresReadOwned's `every`):
// only a list of each partition once may be read so.
describe('namesEveryPartition', () => {
  it('is true for every partition once, in any order', () => {
    expect(namesEveryPartition(ALL_PARTITIONS)).toBe(true);
    expect(namesEveryPartition([...ALL_PARTITIONS].reverse())).toBe(true);
  });

  it('is false for fewer, a repeat in place of one, or one out of range', () => {
    expect(namesEveryPartition(ALL_PARTITIONS.slice(1))).toBe(false);
    expect(namesEveryPartition([0, ...ALL_PARTITIONS.slice(1, -1), 0])).toBe(false);
    expect(namesEveryPartition([...ALL_PARTITIONS.slice(0, -1), 256])).toBe(false);
    expect(namesEveryPartition([...ALL_PARTITIONS.slice(0, -1), 254.5])).toBe(false);
    expect(namesEveryPartition([])).toBe(false);
  });
});
