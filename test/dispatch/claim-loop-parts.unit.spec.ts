import { InFlightBatches } from '../../lib/dispatch/pipeline/in-flight-batches';
import { PublishHold } from '../../lib/dispatch/pipeline/publish-hold';
import { WakeUps } from '../../lib/dispatch/wake-ups';
import type { OutboxBatchReport } from '../../lib/observers/outbox-observer.interface';
import { sleep } from '../support/wait-for';

// The small parts of the claim loop: the batches in flight (empty → room → full, settled oldest
// first), the wake-ups (quiet → woken → quiet; the retry after others backing off), and the hold
// of a publish until the next claim has gone out (open → holding → open).

const report = (published: number): OutboxBatchReport => ({
  claimed: published,
  published,
  retried: 0,
  deadLettered: 0,
  released: 0,
  fenced: 0,
  durationMs: 1,
});

const deferred = <T>() => {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
};

describe('InFlightBatches', () => {
  it('fills up to its limit, settles oldest first and counts what they published', async () => {
    const batches = new InFlightBatches(2);
    expect(batches.state).toBe('empty');
    const first = deferred<OutboxBatchReport>();
    batches.add(first.promise);
    expect(batches.state).toBe('room');
    expect(batches.oldestPublishing).toBe(true);
    batches.add(Promise.resolve(report(3)));
    expect(batches.state).toBe('full');
    expect(await batches.oldestSettledWithin(5)).toBe(false);
    first.resolve(report(2));
    expect(await batches.oldestSettledWithin(5)).toBe(true);
    expect(batches.oldestPublishing).toBe(false);
    expect((await batches.settleOldest())?.published).toBe(2);
    expect(batches.state).toBe('room');
    await batches.settleAll();
    expect(batches.state).toBe('empty');
    expect(batches.published).toBe(5);
    expect(await batches.settleOldest()).toBeUndefined();
    expect(await batches.oldestSettledWithin(5)).toBe(false);
  });
});

describe('WakeUps', () => {
  it('remembers one wake-up for the next drain', () => {
    const wake = new WakeUps(() => undefined, 1_000);
    expect(wake.state).toBe('quiet');
    wake.woke();
    expect(wake.state).toBe('woken');
    expect(wake.takeWoken()).toBe(true);
    expect(wake.takeWoken()).toBe(false);
    expect(wake.state).toBe('quiet');
  });

  it('cuts a wait on a batch short when woken, and not otherwise', async () => {
    const wake = new WakeUps(() => undefined, 1_000);
    const batch = deferred<void>();
    const waiting = wake.before(batch.promise);
    wake.woke();
    expect(await waiting).toBe(true);
    const settled = wake.before(Promise.resolve());
    expect(await settled).toBe(false);
    expect(await wake.before(undefined)).toBe(false);
  });

  it('retries after others once at a time, backing off up to the most, short again after work', async () => {
    let fired = 0;
    const wake = new WakeUps(() => (fired += 1), 120);
    expect(wake.retrying).toBe(false);
    wake.retryAfterOthers();
    wake.retryAfterOthers();
    expect(wake.state).toBe('retry-scheduled');
    expect(wake.retrying).toBe(true);
    await sleep(80);
    expect(fired).toBe(1);
    expect(wake.state).toBe('quiet');
    const started = performance.now();
    wake.retryAfterOthers(); // 100 ms now
    while (fired < 2) await sleep(5);
    expect(performance.now() - started).toBeGreaterThanOrEqual(95);
    wake.claimedWork();
    expect(wake.retrying).toBe(false);
    wake.retryAfterOthers();
    wake.cancel();
    expect(wake.state).toBe('quiet');
    await sleep(80);
    expect(fired).toBe(2);
  });
});

describe('PublishHold', () => {
  it('holds a publish until released, or for the most at longest', async () => {
    const hold = new PublishHold(10_000);
    expect(hold.state).toBe('open');
    let started = false;
    const held = hold.hold().then(() => (started = true));
    expect(hold.state).toBe('holding');
    await Promise.resolve();
    expect(started).toBe(false);
    hold.release();
    await held;
    expect(hold.state).toBe('open');
    hold.release(); // nothing held: no-op

    const short = new PublishHold(5);
    await short.hold();
    expect(short.state).toBe('open');
  });

  it('lets the publish held before go when the next is held', async () => {
    const hold = new PublishHold(10_000);
    const first = hold.hold();
    const second = hold.hold();
    await first;
    expect(hold.state).toBe('holding');
    hold.release();
    await second;
  });
});
