import { Logger } from '@nestjs/common';
import { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import { BatchLease, type LeaseRenewalParts } from '../../lib/dispatch/leases/lease-renewal';

// The renewal timer of one batch's lease (BatchLease) on a fake clock: nothing written for a
// batch that settles before the first interval; each renewal moves the lease's end to leaseMs
// after it was sent; a renewal that finds fewer rows, renewals that keep failing until the end,
// or the owner lock's loss end the lease (its fence aborts) and stop the renewals.

class Lines extends Logger {
  readonly lines: string[] = [];
  override warn(message: unknown): void {
    this.lines.push(`warn ${String(message)}`);
  }
  override debug(): void {}
}

const LEASE_MS = 3_000;
const INTERVAL_MS = 1_000;
const DB_CALL_MS = 500;

interface Renewal {
  readonly sentAt: number;
  readonly ids: readonly string[];
  readonly token: string;
  readonly leaseMs: number;
}

/** How far this process's clock has jumped past the timers (a pause: SIGSTOP, a long GC). */
let pausedMs = 0;

function setup(answer: (call: number) => Promise<number>, ownerFence?: AbortSignal) {
  const logger = new Lines();
  const renewals: Renewal[] = [];
  const lost: string[] = [];
  const parts: LeaseRenewalParts = {
    renew: (ids, token, leaseMs) => {
      renewals.push({ sentAt: performance.now(), ids, token, leaseMs });
      return answer(renewals.length);
    },
    leaseMs: LEASE_MS,
    intervalMs: INTERVAL_MS,
    dbCallMs: DB_CALL_MS,
    log: new DispatcherLog(logger, 'default', 'abcd0123'),
    onLost: (reason) => lost.push(reason),
    now: () => performance.now() + pausedMs,
  };
  // The lease began now: its end is leaseMs away.
  const lease = new BatchLease(
    parts,
    'token-1',
    ['1', '2'],
    performance.now() + LEASE_MS,
    ownerFence,
  );
  return { lease, renewals, lost, logger };
}

const afterMs = (ms: number) => (): Promise<number> =>
  new Promise((resolve) => setTimeout(() => resolve(2), ms));

describe('BatchLease (lease renewal)', () => {
  beforeEach(() => {
    jest.useFakeTimers({ now: 0 });
    pausedMs = 0;
  });
  afterEach(() => jest.useRealTimers());

  it('writes nothing for a batch that settles before the first interval', async () => {
    const { lease, renewals } = setup(() => Promise.resolve(2));
    await jest.advanceTimersByTimeAsync(INTERVAL_MS - 1);
    lease.stop();
    await jest.advanceTimersByTimeAsync(10 * LEASE_MS);
    expect(renewals).toEqual([]);
    expect(lease.fence.aborted).toBe(false);
    expect(lease.leaseEnd).toBe(LEASE_MS);
  });

  it('renews every interval, fenced by the token, and moves the end to leaseMs after each send', async () => {
    // Each renewal answers 200 ms after it was sent: the end counts from the send.
    const { lease, renewals } = setup(afterMs(200));
    await jest.advanceTimersByTimeAsync(3_500);
    expect(renewals.map((r) => r.sentAt)).toEqual([1_000, 2_000, 3_000]);
    expect(renewals[0]).toMatchObject({ ids: ['1', '2'], token: 'token-1', leaseMs: LEASE_MS });
    expect(lease.leaseEnd).toBe(3_000 + LEASE_MS);
    expect(lease.publishBy).toBe(3_000 + LEASE_MS - DB_CALL_MS);
    expect(lease.holds()).toBe(true);
    // Well past the first lease's end, still held.
    await jest.advanceTimersByTimeAsync(10_000);
    expect(lease.holds()).toBe(true);
    expect(lease.fence.aborted).toBe(false);
    lease.stop();
    const sent = renewals.length;
    await jest.advanceTimersByTimeAsync(10_000);
    expect(renewals).toHaveLength(sent);
  });

  it('loses the lease when a renewal finds fewer rows than the batch (a takeover), and renews no more', async () => {
    const { lease, renewals, lost, logger } = setup((call) => Promise.resolve(call === 1 ? 2 : 1));
    await jest.advanceTimersByTimeAsync(2_100);
    expect(renewals).toHaveLength(2);
    expect(lease.fence.aborted).toBe(true);
    expect(lease.holds()).toBe(false);
    expect(lost).toEqual([
      '1 of its 2 message(s) no longer hold its lease (taken over after it expired, or released)',
    ]);
    expect(logger.lines.join('\n')).toMatch(/Lost the lease of a batch still publishing/);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(renewals).toHaveLength(2);
    // The end stays where the last renewal that succeeded left it.
    expect(lease.leaseEnd).toBe(1_000 + LEASE_MS);
  });

  it('keeps trying a renewal that fails, and loses the lease at its end less one database call, not before', async () => {
    const { lease, renewals, lost } = setup(() => Promise.reject(new Error('connection reset')));
    await jest.advanceTimersByTimeAsync(LEASE_MS - DB_CALL_MS - 1);
    expect(renewals.length).toBeGreaterThan(3);
    expect(lease.fence.aborted).toBe(false);
    expect(lease.holds()).toBe(true);
    await jest.advanceTimersByTimeAsync(1);
    expect(lease.fence.aborted).toBe(true);
    expect(lost).toEqual(['its end came without a renewal']);
    const sent = renewals.length;
    await jest.advanceTimersByTimeAsync(10_000);
    expect(renewals).toHaveLength(sent);
  });

  it('measures each renewal from its send, not its answer', async () => {
    // The first renewal answers 1.2 s after it was sent: the lease's end counts from the send
    // (the database wrote its own end after that), and the next renewal is due an interval
    // after that send, so it goes at once.
    const { lease, renewals } = setup((call) =>
      call === 1 ? afterMs(1_200)() : Promise.resolve(2),
    );
    await jest.advanceTimersByTimeAsync(2_200);
    expect(lease.leaseEnd).toBe(1_000 + LEASE_MS);
    await jest.advanceTimersByTimeAsync(100);
    const second = renewals[1]?.sentAt ?? 0;
    expect(second).toBeGreaterThanOrEqual(2_200);
    expect(second).toBeLessThanOrEqual(2_201);
    expect(lease.leaseEnd).toBe(second + LEASE_MS);
    lease.stop();
  });

  it('is lost on the clock when read past its end before its timers ran (a paused process)', async () => {
    const { lease, renewals } = setup(() => Promise.resolve(2));
    // The clock jumps past the lease's end without the timers running, as after SIGSTOP.
    pausedMs = LEASE_MS;
    expect(lease.holds()).toBe(false);
    expect(lease.fence.aborted).toBe(true);
    await jest.advanceTimersByTimeAsync(5_000);
    expect(renewals).toEqual([]);
  });

  it('takes no late answer for a lost lease: a renewal answering after the settle began changes nothing', async () => {
    // Sent at 1 s, answered at 1.5 s with no rows (the settle cleared the lease meanwhile).
    const { lease, renewals, lost, logger } = setup(
      () => new Promise((resolve) => setTimeout(() => resolve(0), 500)),
    );
    await jest.advanceTimersByTimeAsync(1_100);
    expect(renewals).toHaveLength(1);
    lease.stop();
    await jest.advanceTimersByTimeAsync(5_000);
    expect(lost).toEqual([]);
    expect(logger.lines).toEqual([]);
    expect(lease.fence.aborted).toBe(false);
    expect(renewals).toHaveLength(1);
  });

  it('sends no renewal when its timer first runs past the end (woken from a pause): the lease is lost', async () => {
    const { lease, renewals, lost } = setup(() => Promise.resolve(2));
    pausedMs = LEASE_MS;
    // The renewal's timer is the first to run on waking (due at 1 s, before the end's at 2.5 s).
    await jest.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(renewals).toEqual([]);
    expect(lease.fence.aborted).toBe(true);
    expect(lost).toEqual(['its end came without a renewal']);
  });

  it("ends with the owner lock's fence, without renewing after it", async () => {
    const owner = new AbortController();
    const { lease, renewals, lost } = setup(() => Promise.resolve(2), owner.signal);
    await jest.advanceTimersByTimeAsync(1_100);
    expect(renewals).toHaveLength(1);
    owner.abort(new Error('owner lock lost'));
    expect(lease.fence.aborted).toBe(true);
    expect(lease.fence.reason).toEqual(new Error('owner lock lost'));
    // Logged where the lock's loss is found, not as a lost renewal.
    expect(lost).toEqual([]);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(renewals).toHaveLength(1);
  });
});
