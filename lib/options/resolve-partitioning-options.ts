import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, DAY, fail, HOUR, MINUTE, section } from './outbox-option-checks';
import type { OutboxPartitioningOptions } from './outbox.options';

/** The spans of time a partition may cover. */
export const PARTITION_INTERVALS = ['day', 'week', 'month'] as const;
export type PartitionInterval = (typeof PARTITION_INTERVALS)[number];

export interface ResolvedPartitioningOptions {
  readonly interval: PartitionInterval;
  readonly retentionMs: number;
  readonly premake: number;
  readonly maintainIntervalMs: number;
}

const UNITS: Readonly<Record<string, number>> = { m: MINUTE, h: HOUR, d: DAY, w: 7 * DAY };
const MAX_RETENTION_MS = 3650 * DAY;

/** `'30d'` → ms; undefined when the text is not a count and a unit. */
export function parseRetention(text: string): number | undefined {
  const match = /^(\d{1,6})\s*([mhdw])$/.exec(text.trim());
  const unit = match === null ? undefined : UNITS[match[2] ?? ''];
  return match === null || unit === undefined ? undefined : Number(match[1]) * unit;
}

/**
 * `partitioning`, checked against the lease: a partition may be dropped `retention` after its
 * range ends, so a retention under the lease could drop rows a dispatcher still holds.
 */
export function resolvePartitioningOptions(
  value: OutboxPartitioningOptions | undefined,
  leaseMs: number,
): ResolvedPartitioningOptions | null {
  if (value === undefined || value === null) return null;
  const defaults = OUTBOX_DEFAULTS.partitioning;
  const p = section(value, 'partitioning');
  const interval = p.interval;
  if (!PARTITION_INTERVALS.includes(interval as PartitionInterval)) {
    fail(
      'partitioning.interval',
      `${checks.show(interval)} is not a partition interval`,
      "Use 'day', 'week' or 'month' (the span of time one partition holds).",
    );
  }
  const retention = p.retention ?? defaults.retention.value;
  const retentionMs =
    typeof retention === 'string'
      ? parseRetention(retention)
      : typeof retention === 'number' && Number.isInteger(retention)
        ? retention
        : undefined;
  if (retentionMs === undefined || retentionMs <= 0 || retentionMs > MAX_RETENTION_MS) {
    fail(
      'partitioning.retention',
      `${checks.show(retention)} is not a retention`,
      "Give milliseconds or a count with a unit ('12h', '30d', '2w'), up to 3650 days.",
    );
  }
  if (retentionMs < leaseMs) {
    fail(
      'partitioning.retention',
      `${checks.show(retention)} (${retentionMs} ms) is shorter than dispatcher.leaseMs (${leaseMs} ms), so a partition could be dropped while a dispatcher holds one of its rows`,
      `Keep the retention at least dispatcher.leaseMs (days are usual: '7d').`,
    );
  }
  return {
    interval: interval as PartitionInterval,
    retentionMs,
    premake: checks.integer(p.premake, defaults.premake.value, 'partitioning.premake', 1, 1000),
    maintainIntervalMs: checks.integer(
      p.maintainIntervalMs,
      defaults.maintainIntervalMs.value,
      'partitioning.maintainIntervalMs',
      1_000,
      DAY,
      ' ms',
    ),
  };
}
