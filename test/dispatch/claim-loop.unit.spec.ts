import type { DeliveryBatch } from '../../lib/dispatch/pipeline/delivery-batch';
import { ClaimLoop, type ClaimLoopParts } from '../../lib/dispatch/poll/claim-loop';
import type { ClaimResult, LeasedBatch } from '../../lib/dispatch/poll/claimer';
import { PublishHold } from '../../lib/dispatch/pipeline/publish-hold';
import { WakeUps } from '../../lib/dispatch/wake-ups';
import type { OutboxBatchReport } from '../../lib/observers/outbox-observer.interface';
import { sleep } from '../support/wait-for';
import { unusedHold } from '../support/unused-hold';

// The claim loop's decisions, on a scripted claimer: a poll asks first and a wake-up does not;
// it claims until nothing is claimable, up to batchesInFlight batches at once; held back only by
// other dispatchers it schedules a retry; idle → asking → claiming → waiting → idle.

const batch = (token: string): LeasedBatch => ({
  token,
  records: [],
  blockedKeys: [],
  inFlightKeys: 0,
  claimedAt: 0,
  hold: unusedHold,
});

function scripted(results: ClaimResult[], options: { due?: boolean; batchesInFlight?: number }) {
  const seen: string[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const wakeUps = new WakeUps(() => undefined, 1_000);
  const parts: ClaimLoopParts = {
    claimer: {
      anythingDue: () => {
        seen.push(`ask (${loop.state})`);
        return Promise.resolve(options.due ?? true);
      },
      claim: () => {
        const next = results.shift() ?? 'idle';
        seen.push(`claim ${typeof next === 'string' ? next : next.token} (${loop.state})`);
        return Promise.resolve(next);
      },
    },
    wakeUps,
    hold: new PublishHold(),
    runner: { clearRequest: () => undefined, requested: false },
    lifecycle: { running: true, stopping: false },
    outage: { paused: false },
    pipeline: {
      deliver: async (leased: DeliveryBatch): Promise<OutboxBatchReport> => {
        inFlight += 1;
        mostInFlight = Math.max(mostInFlight, inFlight);
        await sleep(5);
        inFlight -= 1;
        seen.push(`settled ${leased.token}`);
        return {
          claimed: 2,
          published: 2,
          retried: 0,
          deadLettered: 0,
          released: 0,
          fenced: 0,
          durationMs: 5,
        };
      },
    },
    batchesInFlight: options.batchesInFlight ?? 2,
  };
  const loop = new ClaimLoop(parts);
  return { loop, seen, wakeUps, mostInFlight: () => mostInFlight };
}

describe('ClaimLoop', () => {
  it('asks first on a poll, and stops there when nothing is due', async () => {
    const { loop, seen } = scripted([batch('b1')], { due: false });
    expect(loop.state).toBe('idle');
    expect(await loop.run()).toBe(0);
    expect(seen).toEqual(['ask (asking)']);
    expect(loop.state).toBe('idle');
  });

  it('claims at once after a wake-up, until nothing is claimable, batches publishing side by side', async () => {
    const { loop, seen, wakeUps, mostInFlight } = scripted(
      [batch('b1'), batch('b2'), batch('b3')],
      {
        batchesInFlight: 2,
      },
    );
    wakeUps.woke();
    expect(await loop.run()).toBe(6);
    expect(seen.slice(0, 3)).toEqual(['claim b1 (claiming)', 'claim b2 (claiming)', 'settled b1']);
    expect(seen).toContain('settled b3');
    expect(seen.filter((s) => s.startsWith('ask'))).toEqual([]);
    expect(mostInFlight()).toBe(2);
    expect(loop.state).toBe('idle');
  });

  it('holds back by other dispatchers only, schedules a look soon instead of the next poll', async () => {
    const { loop, seen, wakeUps } = scripted(['in-flight'], {});
    wakeUps.woke();
    expect(await loop.run()).toBe(0);
    expect(seen).toEqual(['claim in-flight (claiming)']);
    expect(wakeUps.state).toBe('retry-scheduled');
    wakeUps.cancel();
  });

  it('claims again at once after a claim that only parked followers', async () => {
    const { loop, seen, wakeUps } = scripted(['parked', batch('b1')], {});
    wakeUps.woke();
    expect(await loop.run()).toBe(2);
    expect(seen.slice(0, 2)).toEqual(['claim parked (claiming)', 'claim b1 (claiming)']);
  });

  it('runs one batch for runOnce, past parked-only claims', async () => {
    const { loop } = scripted(['parked', batch('b1')], {});
    expect((await loop.once()).published).toBe(2);
    const empty = scripted([], {});
    expect((await empty.loop.once()).claimed).toBe(0);
  });
});
