import { OptionChecks } from '../../options/option-checks';

/** What `OutboxHealthIndicator.isHealthy()` checks, and its limits. */
export interface OutboxHealthOptions {
  /**
   * Down when the oldest message waiting for delivery is older than this; null does not check.
   * @default 300000 (5 minutes)
   */
  maxOldestPendingAgeMs?: number | null;
  /** Down when more messages than this are dead-lettered; null does not check. @default null */
  maxDead?: number | null;
  /** Down when this app has a dispatcher (workers on) that is not started. @default true */
  requireDispatcher?: boolean;
  /**
   * Down when one dispatcher run (claim, publish, settle, until nothing is due) has lasted
   * longer than this: a stuck loop. A long backlog drain is one run, so keep it generous; null
   * does not check. @default 600000 (10 minutes)
   */
  maxRunMs?: number | null;
  /** Down when the publisher's `ping()` takes longer than this. @default 3000 */
  pingTimeoutMs?: number;
  /** Down when `stats()` takes longer than this (the database is not answering). @default 5000 */
  statsTimeoutMs?: number;
  /**
   * Reuse a `stats()` reading for this long: it counts the table, and probes of every replica
   * every few seconds would otherwise count it again each time. 0 reads it on every check.
   * @default 10000
   */
  statsMaxAgeMs?: number;
  /**
   * With log tailing (`delivery: logTailing()`), down when the replication slot keeps more WAL than
   * this many bytes (a reader behind, or none), or when this process stands by and no process
   * reads the slot; null does not check. @default 1073741824 (1 GiB)
   */
  maxLogRetainedBytes?: number | null;
}

/** {@link OutboxHealthOptions} with the defaults applied and every value checked. */
export interface ResolvedOutboxHealthOptions {
  readonly maxOldestPendingAgeMs: number | null;
  readonly maxDead: number | null;
  readonly requireDispatcher: boolean;
  readonly maxRunMs: number | null;
  readonly pingTimeoutMs: number;
  readonly statsTimeoutMs: number;
  readonly statsMaxAgeMs: number;
  readonly maxLogRetainedBytes: number | null;
}

const checks = new OptionChecks('OutboxHealthIndicator');
const OPTION_KEYS = {
  '': {
    maxOldestPendingAgeMs: true,
    maxDead: true,
    requireDispatcher: true,
    maxRunMs: true,
    pingTimeoutMs: true,
    statsTimeoutMs: true,
    statsMaxAgeMs: true,
    maxLogRetainedBytes: true,
  },
} as const satisfies { '': Record<keyof OutboxHealthOptions, true> };
const DAY = 86_400_000;

/** Applies the defaults and rejects bad values with an `OutboxOptionsError` that says how to fix them. */
export function resolveOutboxHealthOptions(
  options: OutboxHealthOptions = {},
): ResolvedOutboxHealthOptions {
  if (options === null || typeof options !== 'object') {
    checks.fail(
      'options',
      `${checks.show(options)} is not an object`,
      'Pass e.g. { maxDead: 0 } or nothing.',
    );
  }
  checks.knownKeys(options, OPTION_KEYS);
  const { maxOldestPendingAgeMs, maxDead } = options;
  return {
    maxOldestPendingAgeMs:
      maxOldestPendingAgeMs === null
        ? null
        : checks.integer(
            maxOldestPendingAgeMs,
            300_000,
            'maxOldestPendingAgeMs',
            1,
            3650 * DAY,
            ' ms',
          ),
    maxDead:
      maxDead === null || maxDead === undefined
        ? null
        : checks.integer(maxDead, 0, 'maxDead', 0, Number.MAX_SAFE_INTEGER),
    requireDispatcher: checks.bool(options.requireDispatcher, true, 'requireDispatcher'),
    maxRunMs:
      options.maxRunMs === null
        ? null
        : checks.integer(options.maxRunMs, 600_000, 'maxRunMs', 1_000, 3650 * DAY, ' ms'),
    pingTimeoutMs: checks.integer(options.pingTimeoutMs, 3_000, 'pingTimeoutMs', 1, 60_000, ' ms'),
    statsTimeoutMs: checks.integer(
      options.statsTimeoutMs,
      5_000,
      'statsTimeoutMs',
      1,
      60_000,
      ' ms',
    ),
    statsMaxAgeMs: checks.integer(options.statsMaxAgeMs, 10_000, 'statsMaxAgeMs', 0, DAY, ' ms'),
    maxLogRetainedBytes:
      options.maxLogRetainedBytes === null
        ? null
        : checks.integer(
            options.maxLogRetainedBytes,
            1_073_741_824,
            'maxLogRetainedBytes',
            0,
            Number.MAX_SAFE_INTEGER,
            ' bytes',
          ),
  };
}
