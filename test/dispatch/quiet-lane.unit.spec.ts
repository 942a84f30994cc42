import type { DeliveryBatch } from '../../lib/dispatch/pipeline/delivery-batch';
import type { ClaimResult, LeasedBatch } from '../../lib/dispatch/poll/claimer';
import { QuietLane } from '../../lib/dispatch/poll/quiet-lane';
import { WakeUps } from '../../lib/dispatch/wake-ups';
import type { ClaimedRecord } from '../../lib/store/ports/outbox-store.port';
import type { OutboxBatchReport } from '../../lib/observers/outbox-observer.interface';
import { OUTBOX_HEADER_TENANT } from '../../lib';
import { unusedHold } from '../support/unused-hold';

// The quiet lane's decisions, on a scripted claimer: it claims only on a wake-up (or one that
// came during the loop's last claim), excluding the tenants of the batches in flight, and holds
// one batch at most.

const record = (tenant: string | null): ClaimedRecord =>
  ({
    messageId: `m-${tenant ?? 'none'}`,
    headers: tenant === null ? {} : { [OUTBOX_HEADER_TENANT]: tenant },
  }) as unknown as ClaimedRecord;

const batch = (token: string, tenants: (string | null)[]): LeasedBatch => ({
  token,
  records: tenants.map(record),
  blockedKeys: [],
  inFlightKeys: 0,
  claimedAt: 0,
  hold: unusedHold,
});

const report = (published: number): OutboxBatchReport => ({
  claimed: published,
  published,
  retried: 0,
  deadLettered: 0,
  released: 0,
  fenced: 0,
  durationMs: 1,
});

/** A promise and the function that resolves it. */
function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

function scripted(results: ClaimResult[], woken = false) {
  const busySeen: (string | null)[][] = [];
  const delivered: string[] = [];
  const wakeUps = new WakeUps(() => undefined, 1_000);
  const lane = new QuietLane({
    claimer: {
      claim: (busy?: ReadonlySet<string | null>) => {
        busySeen.push([...(busy ?? [])]);
        return Promise.resolve(results.shift() ?? 'idle');
      },
    },
    wakeUps,
    pipeline: {
      deliver: (leased: DeliveryBatch) => {
        delivered.push(leased.token);
        return Promise.resolve(report(leased.records.length));
      },
    },
    pollIntervalMs: 60_000,
    stopping: () => false,
    woken: () => woken,
  });
  return { lane, wakeUps, busySeen, delivered };
}

describe('QuietLane', () => {
  it('claims nothing without a wake-up, and returns when the oldest batch settles', async () => {
    const { lane, busySeen } = scripted([batch('q1', ['B'])]);
    const oldest = deferred<OutboxBatchReport>();
    const waiting = lane.whileFull(oldest.promise);
    oldest.resolve(report(1));
    await waiting;
    expect(busySeen).toEqual([]);
    expect(lane.state).toBe('free');
  });

  it('on a wake-up, claims without the tenants of the batches in flight, and holds one batch at most', async () => {
    const { lane, wakeUps, busySeen, delivered } = scripted([
      batch('q1', ['B', null]),
      batch('q2', ['C']),
    ]);
    const inFlight = deferred<OutboxBatchReport>();
    const tracked = lane.track([record('A'), record('A')], inFlight.promise);
    const waiting = lane.whileFull(tracked);
    wakeUps.woke();
    await waiting;
    expect(busySeen).toEqual([['A']]);
    expect(delivered).toEqual(['q1']);
    inFlight.resolve(report(2));
    await tracked;
    await lane.settle();
    expect(lane.published).toBe(2);
    expect(lane.state).toBe('free');
  });

  it('claims at once for a wake-up that came during the claim that filled the slots', async () => {
    const { lane, busySeen, delivered } = scripted([batch('q1', ['B'])], true);
    const inFlight = deferred<OutboxBatchReport>();
    await lane.whileFull(lane.track([record('A')], inFlight.promise));
    expect(busySeen).toEqual([['A']]);
    expect(delivered).toEqual(['q1']);
    inFlight.resolve(report(1));
    await lane.settle();
  });

  it('forgets the tenants of a batch once it settled', async () => {
    const { lane, busySeen } = scripted(['idle'], true);
    const settled = lane.track([record('A')], Promise.resolve(report(1)));
    await settled;
    const oldest = deferred<OutboxBatchReport>();
    const waiting = lane.whileFull(oldest.promise);
    oldest.resolve(report(0));
    await waiting;
    expect(busySeen).toEqual([[]]);
  });
});
