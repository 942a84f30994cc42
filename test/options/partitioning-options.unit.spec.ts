import { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxModuleOptions, type OutboxPublisher } from '../../lib';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';
import {
  nextPeriod,
  periodStart,
  rangeOfPartition,
  rangesAhead,
} from '../../lib/store/partitions/partition-range';

const publisher: OutboxPublisher = {
  publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
};
const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });

function resolve(partitioning: unknown, leaseMs?: number) {
  return resolveOutboxOptions({
    dataSource,
    publisher,
    partitioning,
    ...(leaseMs === undefined ? {} : { dispatcher: { leaseMs } }),
  } as OutboxModuleOptions);
}

function errorOf(partitioning: unknown, leaseMs?: number): OutboxOptionsError {
  try {
    resolve(partitioning, leaseMs);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('partitioning options', () => {
  it('is off unless given, and takes its defaults', () => {
    expect(resolve(undefined).partitioning).toBeNull();
    expect(resolve({ interval: 'week' }).partitioning).toEqual({
      interval: 'week',
      retentionMs: 7 * 86_400_000,
      premake: 3,
      maintainIntervalMs: 3_600_000,
    });
  });

  it.each([
    ['30d', 30 * 86_400_000],
    ['12h', 12 * 3_600_000],
    ['2w', 14 * 86_400_000],
    ['90m', 90 * 60_000],
    [172_800_000, 172_800_000],
  ])('reads the retention %j', (retention, ms) => {
    expect(resolve({ interval: 'day', retention }).partitioning?.retentionMs).toBe(ms);
  });

  it.each([
    [{ interval: 'hour' }, 'partitioning.interval', "Use 'day', 'week' or 'month'"],
    [{}, 'partitioning.interval', "Use 'day', 'week' or 'month'"],
    [{ interval: 'day', premake: 0 }, 'partitioning.premake', 'from 1 to 1000'],
    [{ interval: 'day', premake: 1001 }, 'partitioning.premake', 'from 1 to 1000'],
    [{ interval: 'day', retention: '30 days' }, 'partitioning.retention', "('12h', '30d', '2w')"],
    [{ interval: 'day', retention: -5 }, 'partitioning.retention', 'Give milliseconds'],
    [{ interval: 'day', typo: 1 }, 'partitioning.typo', 'is not an option'],
    ['day', 'partitioning', 'is not an object'],
  ])('refuses %j at bootstrap, saying how to fix it', (partitioning, option, fix) => {
    const error = errorOf(partitioning);
    expect(error.option).toBe(option);
    expect(error.message).toContain(fix);
  });

  it('refuses a retention shorter than the lease', () => {
    const error = errorOf({ interval: 'day', retention: '1m' }, 120_000);
    expect(error.option).toBe('partitioning.retention');
    expect(error.message).toContain('shorter than dispatcher.leaseMs (120000 ms)');
    expect(error.message).toContain('Keep the retention at least dispatcher.leaseMs');
  });
});

describe('partition ranges', () => {
  const at = new Date('2026-11-25T17:30:00Z'); // a Wednesday

  it('starts days at UTC midnight, weeks on Monday, months on the 1st', () => {
    expect(periodStart('day', at).toISOString()).toBe('2026-11-25T00:00:00.000Z');
    expect(periodStart('week', at).toISOString()).toBe('2026-11-23T00:00:00.000Z');
    expect(periodStart('month', at).toISOString()).toBe('2026-11-01T00:00:00.000Z');
    expect(nextPeriod('month', new Date('2026-12-01T00:00:00Z')).toISOString()).toBe(
      '2027-01-01T00:00:00.000Z',
    );
  });

  it('lists the current range and `premake` more', () => {
    expect(rangesAhead('week', at, 2).map((r) => r.from.toISOString().slice(0, 10))).toEqual([
      '2026-11-23',
      '2026-11-30',
      '2026-12-07',
    ]);
  });

  it('recognises only its own partition names for the interval', () => {
    expect(rangeOfPartition('outbox', 'outbox_p20261123', 'week')?.to.toISOString()).toBe(
      '2026-11-30T00:00:00.000Z',
    );
    // Not a Monday, not a date, another table's, a first of the month for 'month' only.
    expect(rangeOfPartition('outbox', 'outbox_p20261125', 'week')).toBeUndefined();
    expect(rangeOfPartition('outbox', 'outbox_p20261131', 'day')).toBeUndefined();
    expect(rangeOfPartition('outbox', 'other_p20261123', 'day')).toBeUndefined();
    expect(rangeOfPartition('outbox', 'outbox_p20261101', 'month')).toBeDefined();
    expect(rangeOfPartition('outbox', 'outbox_p20261102', 'month')).toBeUndefined();
  });
});
