import type { PartitionInterval } from '../../options/resolve-partitioning-options';

// Partition ranges are whole UTC days, ISO weeks (from Monday) or calendar months, named by
// their first day: `<table>_p20261123`. The name alone gives the range, so the maintainer can
// recognise its own partitions and refuse anything else.

/** One partition's range: from `from` (inclusive) to `to` (exclusive), both UTC. */
export interface PartitionRange {
  readonly from: Date;
  readonly to: Date;
}

const DAY_MS = 86_400_000;

/** The start of the period holding `at`. */
export function periodStart(interval: PartitionInterval, at: Date): Date {
  const day = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate());
  if (interval === 'day') return new Date(day);
  if (interval === 'week') {
    const sinceMonday = (new Date(day).getUTCDay() + 6) % 7;
    return new Date(day - sinceMonday * DAY_MS);
  }
  return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1));
}

/** The start of the period after the one starting at `from`. */
export function nextPeriod(interval: PartitionInterval, from: Date): Date {
  if (interval === 'day') return new Date(from.getTime() + DAY_MS);
  if (interval === 'week') return new Date(from.getTime() + 7 * DAY_MS);
  return new Date(Date.UTC(from.getUTCFullYear(), from.getUTCMonth() + 1, 1));
}

/** The range of the period holding `at`, and the `ahead` periods after it. */
export function rangesAhead(
  interval: PartitionInterval,
  at: Date,
  ahead: number,
): PartitionRange[] {
  const ranges: PartitionRange[] = [];
  let from = periodStart(interval, at);
  for (let i = 0; i <= ahead; i++) {
    const to = nextPeriod(interval, from);
    ranges.push({ from, to });
    from = to;
  }
  return ranges;
}

/** `p20261123`: the suffix of the partition starting at `from`. */
export function partitionSuffix(from: Date): string {
  return `p${from.toISOString().slice(0, 10).replace(/-/g, '')}`;
}

/** The range a partition name stands for under `interval`, or undefined if it is not one of ours. */
export function rangeOfPartition(
  tableName: string,
  partition: string,
  interval: PartitionInterval,
): PartitionRange | undefined {
  const prefix = `${tableName}_p`;
  if (!partition.startsWith(prefix)) return undefined;
  const match = /^(\d{4})(\d{2})(\d{2})$/.exec(partition.slice(prefix.length));
  if (match === null) return undefined;
  const from = new Date(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])));
  if (
    Number.isNaN(from.getTime()) ||
    partitionSuffix(from) !== partition.slice(tableName.length + 1)
  )
    return undefined;
  if (periodStart(interval, from).getTime() !== from.getTime()) return undefined;
  return { from, to: nextPeriod(interval, from) };
}

/** The tag a partitioned outbox table carries (as its comment) to say how it is partitioned. */
export function layoutTag(interval: PartitionInterval): string {
  return `nestjs-outbox partitioned by ${interval}`;
}

/** The interval a table comment names, or undefined when it is not one of our tags. */
export function intervalOfTag(comment: string | null): PartitionInterval | undefined {
  const match = /^nestjs-outbox partitioned by (day|week|month)$/.exec(comment ?? '');
  return match === null ? undefined : (match[1] as PartitionInterval);
}
