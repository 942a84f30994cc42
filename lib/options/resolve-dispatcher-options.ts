import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, DAY, fail, HOUR, MINUTE, section } from './outbox-option-checks';
import type { OutboxDispatcherOptions } from './outbox.options';

/**
 * How long past `dbTimeoutMs` the watchdog waits before giving up on a call: the server's own
 * statement timeout should fire first. Part of the lease budget (see resolveOutboxOptions).
 */
export function watchdogMarginMs(dbTimeoutMs: number): number {
  return Math.min(1_000, dbTimeoutMs);
}

export interface ResolvedDispatcherOptions {
  readonly batchSize: number;
  readonly batchesInFlight: number;
  readonly pollIntervalMs: number;
  readonly leaseMs: number;
  readonly publishTimeoutMs: number;
  readonly dbTimeoutMs: number;
  readonly listen: boolean;
  readonly ownerLock: boolean;
  readonly shutdownTimeoutMs: number;
  readonly maxOutagePauseMs: number;
  /** How often a batch still publishing renews its lease; `false`: never (it lapses). */
  readonly leaseRenewal: false | { readonly intervalMs: number };
  /**
   * How dispatchers share the table: row leases, or partitions of the key space; null where the
   * option was left out, and the table decides at bootstrap (`decideClaims`). Set by
   * `publishWindow` too, which streams partition owners' publishes.
   */
  readonly claims: 'leases' | 'partitions' | null;
  readonly partitionTimeoutMs: number;
  /** Messages unconfirmed at once across batches (`'partitions'`); undefined: batch by batch. */
  readonly publishWindow: number | undefined;
}

type Deadlines = Pick<
  ResolvedDispatcherOptions,
  'leaseMs' | 'publishTimeoutMs' | 'dbTimeoutMs' | 'leaseRenewal'
>;

const defaults = OUTBOX_DEFAULTS.dispatcher;
const { integer, bool } = checks;

// The lease and the two deadlines that must fit in it.
function resolveDeadlines(d: Partial<OutboxDispatcherOptions>): Deadlines {
  const leaseMs = integer(
    d.leaseMs,
    defaults.leaseMs.value,
    'dispatcher.leaseMs',
    1_000,
    DAY,
    ' ms',
  );
  const publishTimeoutMs = integer(
    d.publishTimeoutMs,
    defaults.publishTimeoutMs.rule({ leaseMs }),
    'dispatcher.publishTimeoutMs',
    100,
    DAY,
    ' ms',
  );
  const renewal = d.leaseRenewal ?? defaults.leaseRenewal.value;
  if (renewal === false) return fixedLease(d, leaseMs, publishTimeoutMs);
  if (renewal !== true && (renewal === null || typeof renewal !== 'object')) {
    fail(
      'dispatcher.leaseRenewal',
      `${checks.show(renewal)} is neither a boolean nor { intervalMs }`,
      'Use true (the default), false, or { intervalMs }.',
    );
  }
  const intervalMs = integer(
    renewal === true ? undefined : renewal.intervalMs,
    Math.floor(leaseMs / 3),
    'dispatcher.leaseRenewal.intervalMs',
    100,
    DAY,
    ' ms',
  );
  // A publish may outlast the lease: the lease, renewed, leaves the settle its room instead.
  if (publishTimeoutMs >= leaseMs && d.dbTimeoutMs === undefined) {
    fail(
      'dispatcher.dbTimeoutMs',
      `left to its default while publishTimeoutMs (${publishTimeoutMs} ms) is not below dispatcher.leaseMs (${leaseMs} ms), where the default (from leaseMs - publishTimeoutMs) comes to 100 ms`,
      `Set dbTimeoutMs with lease renewal and a publish longer than the lease, e.g. ${Math.min(10_000, Math.floor(leaseMs / 4))} (leaseMs / 4).`,
    );
  }
  const dbTimeoutMs = resolveDbTimeoutMs(d, leaseMs, publishTimeoutMs);
  const margin = watchdogMarginMs(dbTimeoutMs);
  // Each renewal is sent `intervalMs` after the one before and must answer while the lease
  // still leaves one database call for the settle. Checked where renewals are relied on (a
  // publish that may outlast the lease's room) or the interval was chosen: a lease that holds
  // the publish and the settle anyway is valid as it always was, renewed or not.
  const reliedOn = publishTimeoutMs + dbTimeoutMs + margin > leaseMs;
  const chosen = renewal !== true && renewal.intervalMs !== undefined;
  if ((reliedOn || chosen) && intervalMs + dbTimeoutMs + margin >= leaseMs) {
    fail(
      'dispatcher.leaseRenewal.intervalMs',
      `intervalMs (${intervalMs} ms) + dbTimeoutMs (${dbTimeoutMs} ms) + the database watchdog's margin (${margin} ms, min(1 s, dbTimeoutMs)) are not below dispatcher.leaseMs (${leaseMs} ms)`,
      'A renewal must land while the lease still leaves time to settle: lower leaseRenewal.intervalMs or dbTimeoutMs, or raise leaseMs.',
    );
  }
  return { leaseMs, publishTimeoutMs, dbTimeoutMs, leaseRenewal: { intervalMs } };
}

// Without renewal, the publish and one settle must fit in the lease.
function fixedLease(
  d: Partial<OutboxDispatcherOptions>,
  leaseMs: number,
  publishTimeoutMs: number,
): Deadlines {
  if (publishTimeoutMs >= leaseMs) {
    fail(
      'dispatcher.publishTimeoutMs',
      `${publishTimeoutMs} ms is not below dispatcher.leaseMs (${leaseMs} ms)`,
      'A publish must time out before its lease expires, or two dispatchers could publish the same message: lower publishTimeoutMs, raise leaseMs, or turn dispatcher.leaseRenewal on.',
    );
  }
  // The settle must fit in the lease after the publish, including the watchdog's margin past
  // dbTimeoutMs: a settle that lands after the lease expired is fenced off and the batch is
  // published again.
  const dbTimeoutMs = resolveDbTimeoutMs(d, leaseMs, publishTimeoutMs);
  const margin = watchdogMarginMs(dbTimeoutMs);
  if (publishTimeoutMs + dbTimeoutMs + margin > leaseMs) {
    fail(
      'dispatcher.dbTimeoutMs',
      `publishTimeoutMs (${publishTimeoutMs} ms) + dbTimeoutMs (${dbTimeoutMs} ms) + the database watchdog's margin (${margin} ms, min(1 s, dbTimeoutMs)) exceed dispatcher.leaseMs (${leaseMs} ms)`,
      'A batch must be published and settled within its lease, or another dispatcher may publish it again: raise leaseMs or lower publishTimeoutMs/dbTimeoutMs.',
    );
  }
  return { leaseMs, publishTimeoutMs, dbTimeoutMs, leaseRenewal: false };
}

function resolveDbTimeoutMs(
  d: Partial<OutboxDispatcherOptions>,
  leaseMs: number,
  publishTimeoutMs: number,
): number {
  return integer(
    d.dbTimeoutMs,
    defaults.dbTimeoutMs.rule({ leaseMs, publishTimeoutMs }),
    'dispatcher.dbTimeoutMs',
    100,
    10 * MINUTE,
    ' ms',
  );
}

export function resolveDispatcherOptions(
  value: OutboxDispatcherOptions | undefined,
): ResolvedDispatcherOptions {
  const d = section(value, 'dispatcher');
  const { leaseMs, publishTimeoutMs, dbTimeoutMs, leaseRenewal } = resolveDeadlines(d);
  const pollIntervalMs = integer(
    d.pollIntervalMs,
    defaults.pollIntervalMs.value,
    'dispatcher.pollIntervalMs',
    10,
    HOUR,
    ' ms',
  );
  // `observe`, the 0.2 spelling of the delivery mode, is read by resolveDelivery.
  const given = resolveClaims(d.claims);
  const publishWindow = resolvePublishWindow(d.publishWindow, given);
  // The window streams the partition owners' publishes: where the mode is left to the table, the
  // window asks for partitions, and a table that cannot have them is refused at bootstrap.
  const claims = publishWindow === undefined ? given : 'partitions';
  return {
    batchSize: integer(d.batchSize, defaults.batchSize.value, 'dispatcher.batchSize', 1, 10_000),
    batchesInFlight: integer(
      d.batchesInFlight,
      defaults.batchesInFlight.value,
      'dispatcher.batchesInFlight',
      1,
      8,
    ),
    pollIntervalMs,
    leaseMs,
    publishTimeoutMs,
    dbTimeoutMs,
    listen: bool(d.listen, defaults.listen.value, 'dispatcher.listen'),
    ownerLock: bool(d.ownerLock, defaults.ownerLock.value, 'dispatcher.ownerLock'),
    shutdownTimeoutMs: integer(
      d.shutdownTimeoutMs,
      defaults.shutdownTimeoutMs.value,
      'dispatcher.shutdownTimeoutMs',
      0,
      10 * MINUTE,
      ' ms',
    ),
    maxOutagePauseMs: integer(
      d.maxOutagePauseMs,
      defaults.maxOutagePauseMs.rule({ pollIntervalMs }),
      'dispatcher.maxOutagePauseMs',
      pollIntervalMs,
      HOUR,
      ' ms',
    ),
    leaseRenewal,
    claims,
    partitionTimeoutMs: integer(
      d.partitionTimeoutMs,
      defaults.partitionTimeoutMs.value,
      'dispatcher.partitionTimeoutMs',
      500,
      MINUTE,
      ' ms',
    ),
    publishWindow,
  };
}

function resolvePublishWindow(
  value: number | undefined,
  claims: 'leases' | 'partitions' | null,
): number | undefined {
  if (value === undefined) return undefined;
  const window = integer(
    value,
    0,
    'dispatcher.publishWindow',
    1,
    10_000,
    '',
    'none: each batch publishes on its own',
  );
  if (claims === 'leases') {
    fail(
      'dispatcher.publishWindow',
      `${window} is set while dispatcher.claims is 'leases'`,
      "The window streams the partition owners' publishes: leave dispatcher.claims out or set it to 'partitions' (PostgreSQL, docs/delivery.md \"Partitions\"), or remove publishWindow.",
    );
  }
  return window;
}

function resolveClaims(value: unknown): 'leases' | 'partitions' | null {
  // Left out: decided at bootstrap (decideClaims), where the database and the table are known.
  if (value === undefined) return null;
  if (value === 'leases' || value === 'partitions') return value;
  return fail(
    'dispatcher.claims',
    `${JSON.stringify(value)} is neither 'leases' nor 'partitions'`,
    "Use 'leases' or 'partitions', or leave it out (the table's choice) (docs/delivery.md, \"Partitions\").",
  );
}
