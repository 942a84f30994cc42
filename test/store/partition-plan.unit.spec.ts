import {
  maintenanceReport,
  missingRanges,
  pastRetention,
  planMaintenance,
  planStatus,
  recheckDrops,
  skippedReport,
  type ListedPartition,
  type PartitionFrame,
} from '../../lib/store/partitions/partition-plan';
import { partitionSuffix, rangeOfPartition } from '../../lib/store/partitions/partition-range';
import type { PartitionBlockers } from '../../lib/store/ports/outbox-partitions.port';

const DAY = 86_400_000;
const now = new Date('2026-11-26T12:00:00Z');
const policy = { premake: 2, retentionMs: 2 * DAY, deadRetentionMs: 7 * DAY };

const day = (yyyymmdd: string): ListedPartition => {
  const range = rangeOfPartition('t', `t_p${yyyymmdd}`, 'day');
  if (range === undefined) throw new Error(`not a day: ${yyyymmdd}`);
  return { name: `t_p${yyyymmdd}`, range, bytes: 8192 };
};
const catchAll: ListedPartition = { name: 't_pdefault', range: null, bytes: 0 };

const frame = (
  listed: readonly ListedPartition[],
  placement: PartitionFrame['placement'] = 'any-gap',
): PartitionFrame => ({
  listed,
  interval: 'day',
  policy,
  now,
  placement,
  nameOf: (r) => `t_${partitionSuffix(r.from)}`,
});

const free: PartitionBlockers = {
  pending: false,
  leased: false,
  waiting: false,
  retainedDead: false,
  recentDelivered: false,
};

describe('partition plan', () => {
  const old = [day('20261120'), day('20261121'), day('20261124')];
  const listed = [...old, day('20261126'), catchAll];

  it('wants the current period and premake ahead, filling gaps where the database can', () => {
    expect(missingRanges(frame(listed)).map((r) => partitionSuffix(r.from))).toEqual([
      'p20261127',
      'p20261128',
    ]);
    const gap = [day('20261120'), day('20261128'), catchAll];
    expect(missingRanges(frame(gap)).map((r) => partitionSuffix(r.from))).toEqual([
      'p20261126',
      'p20261127',
    ]);
  });

  it('adds only above the last partition where the database splits the catch-all', () => {
    const gap = [day('20261120'), day('20261127'), catchAll];
    expect(missingRanges(frame(gap, 'above-last')).map((r) => partitionSuffix(r.from))).toEqual([
      'p20261128',
    ]);
  });

  it('probes only partitions whose whole range is past the retention, never the catch-all', () => {
    expect(pastRetention(listed, now, policy).map((p) => p.name)).toEqual([
      't_p20261120',
      't_p20261121',
    ]);
  });

  it('drops the free partitions past retention and keeps the blocked ones, saying why', () => {
    const blockers = new Map([
      ['t_p20261120', free],
      ['t_p20261121', { ...free, pending: true, leased: true, retainedDead: true }],
    ]);
    const plan = planMaintenance(frame(listed), blockers);
    expect(plan.drop.map((p) => p.name)).toEqual(['t_p20261120']);
    expect(plan.kept).toEqual([
      {
        name: 't_p20261121',
        reason:
          'holds pending messages, some leased (being published), holds dead letters within cleaner.deadRetentionMs',
      },
    ]);
    expect(plan.create.map((r) => partitionSuffix(r.from))).toEqual(['p20261127', 'p20261128']);
    expect(plan.notCreated).toEqual([]);
  });

  it('does not create a range whose rows sit in the catch-all, and names it', () => {
    const plan = planMaintenance(frame(listed), new Map(), new Set(['t_p20261127']));
    expect(plan.create.map((r) => partitionSuffix(r.from))).toEqual(['p20261128']);
    expect(plan.notCreated).toEqual([
      {
        name: 't_p20261127',
        reason:
          't_pdefault holds rows of its range (the maintainer fell behind): move them by hand (docs/partitioning.md)',
      },
    ]);
  });

  it('keeps a partition that gained a blocker by the time the table is locked', () => {
    const plan = planMaintenance(
      frame(listed),
      new Map([
        ['t_p20261120', free],
        ['t_p20261121', free],
      ]),
    );
    const checked = recheckDrops(
      plan,
      new Map([
        ['t_p20261120', free],
        ['t_p20261121', { ...free, waiting: true }],
      ]),
      now,
      policy,
    );
    expect(checked.drop.map((p) => p.name)).toEqual(['t_p20261120']);
    expect(checked.kept).toEqual([
      { name: 't_p20261121', reason: 'holds waiting messages (queued behind their key)' },
    ]);
  });

  it('reports a plan, dry or not, and a skipped run', () => {
    const plan = planMaintenance(frame(listed), new Map([['t_p20261120', free]]));
    expect(maintenanceReport(plan, true, frame(listed).nameOf)).toEqual({
      dryRun: true,
      skipped: null,
      created: ['t_p20261127', 't_p20261128'],
      dropped: ['t_p20261120'],
      // Never probed: kept rather than dropped unchecked.
      kept: [{ name: 't_p20261121', reason: 'not checked for the messages it holds' }],
      notCreated: [],
    });
    expect(skippedReport(false, 'locked')).toEqual({
      dryRun: false,
      skipped: 'locked',
      created: [],
      dropped: [],
      kept: [],
      notCreated: [],
    });
  });

  it('shows each partition with its range, rows and why it is kept', () => {
    const status = planStatus(
      frame(listed),
      new Map([
        ['t_p20261120', free],
        ['t_p20261121', { ...free, recentDelivered: true }],
      ]),
      new Map([['t_p20261126', { pending: 3, waiting: 0, delivered: 1, dead: 0 }]]),
    );
    expect(status.missing).toEqual(['t_p20261127', 't_p20261128']);
    expect(status.partitions.map((p) => [p.name, p.droppable, p.keptBecause])).toEqual([
      ['t_p20261120', true, null],
      ['t_p20261121', false, 'holds messages delivered within the retention'],
      ['t_p20261124', false, 'within retention'],
      ['t_p20261126', false, 'within retention'],
      ['t_pdefault', false, 'the catch-all partition is never dropped'],
    ]);
    expect(status.partitions[3]).toMatchObject({
      from: new Date('2026-11-26T00:00:00Z'),
      to: new Date('2026-11-27T00:00:00Z'),
      bytes: 8192,
      rows: { pending: 3, waiting: 0, delivered: 1, dead: 0 },
    });
    expect(status.partitions[4]).toMatchObject({ from: null, to: null, rows: null });
  });
});
