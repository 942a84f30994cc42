import { EMPTY_BATCH_REPORT } from '../pipeline/delivery-batch';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { IN_FLIGHT_GRACE_MS } from '../../store/shared-sql/claim-window';
import type { Claimer } from './claimer';
import type { DispatcherShutdown } from '../dispatcher-shutdown';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { InFlightBatches } from '../pipeline/in-flight-batches';
import type { OutagePause } from '../health/outage-pause';
import type { PublishHold } from '../pipeline/publish-hold';
import { QuietLane } from './quiet-lane';
import type { WakeUps } from '../wake-ups';

/**
 * `idle`: no drain running. `asking`: a poll asks whether anything is due. `claiming`: a claim
 * is on its way. `waiting`: on a batch in flight (to settle, or for room for the next).
 */
export type ClaimLoopState = 'idle' | 'asking' | 'claiming' | 'waiting';

/** What the claim loop drives and reads. */
export interface ClaimLoopParts {
  readonly claimer: Pick<Claimer, 'claim' | 'anythingDue'>;
  readonly wakeUps: WakeUps;
  readonly hold: PublishHold;
  /** The dispatcher's runner: a wake-up during a drain asks it for one more. */
  readonly runner: { clearRequest(): void; readonly requested: boolean };
  readonly lifecycle: Pick<DispatcherShutdown, 'running' | 'stopping'>;
  readonly outage: Pick<OutagePause, 'paused'>;
  /** Publishes a claimed batch and settles the outcome; never throws. */
  readonly pipeline: Pick<DeliveryPipeline, 'deliver'>;
  readonly batchesInFlight: number;
  /**
   * Set with `tenants.fair` (where claims share batches): the poll's interval, and a quiet lane
   * (QuietLane) beside the batches in flight. Left out: no lane.
   */
  readonly laneTickMs?: number;
}

/**
 * Claims and delivers until nothing is due, with up to `batchesInFlight` batches publishing at
 * once: the next claim overlaps the current publish. Safe for ordering, because a claim takes a
 * key only from its head and a key with a message in flight has no claimable message.
 */
export class ClaimLoop {
  private current: ClaimLoopState = 'idle';

  constructor(private readonly parts: ClaimLoopParts) {}

  get state(): ClaimLoopState {
    return this.current;
  }

  /** One drain; resolves to the number of messages published. */
  async run(): Promise<number> {
    const { claimer, wakeUps, hold, runner, lifecycle, outage } = this.parts;
    const inFlight = new InFlightBatches(this.parts.batchesInFlight);
    const lane = this.laneFor();
    try {
      // A wake-up (a commit here or elsewhere) says something was written: claim at once. Only
      // a timer's poll asks first whether anything is due.
      let ask = !wakeUps.takeWoken();
      while (!lifecycle.stopping) {
        runner.clearRequest();
        if (outage.paused) break;
        this.current = 'asking';
        if (ask && !(await claimer.anythingDue())) break;
        ask = false;
        const started = performance.now();
        this.current = 'claiming';
        const claimed = await claimer.claim();
        this.current = 'waiting';
        hold.release();
        if (claimed === 'parked') continue;
        if (claimed === 'in-flight' && inFlight.size === 0) {
          // Held back by another dispatcher's batches or claim only: look again once they are
          // likely settled or committed, rather than at the next poll. Only for a dispatcher
          // running on its own: one driven by `drain()` or `runOnce()` is the caller's.
          if (lifecycle.running) wakeUps.retryAfterOthers();
          break;
        }
        // Held back by batches in flight, ours among them: look again when the oldest settles,
        // or once the grace has passed, when a claim parks the followers of a slow publish so
        // that they no longer hold up the keys behind them.
        if (claimed === 'in-flight' && !(await inFlight.oldestSettledWithin(IN_FLIGHT_GRACE_MS))) {
          continue;
        }
        // Nothing claimable, with room for another batch: a commit while ours publishes is
        // claimed at once and published beside it, instead of after its confirms and settle
        // (bench P4's tail). Safe for ordering for the reason above.
        if (claimed === 'idle' && inFlight.size > 0 && (await this.wokenBefore(inFlight.oldest))) {
          continue;
        }
        if (claimed === 'idle' || claimed === 'in-flight') {
          // Nothing claimable now; settling what is in flight may free the next message of
          // its keys, so look again if it made progress.
          const report = await inFlight.settleOldest();
          // A wake-up during that claim is not lost: the runner runs once more after this run.
          if (report === undefined) break;
          const progressed = report.published > 0 || report.deadLettered > 0;
          if (!progressed && !runner.requested && inFlight.size === 0) break;
          continue;
        }
        wakeUps.claimedWork();
        const report = this.parts.pipeline.deliver(claimed, 'claim loop', started, hold.hold());
        inFlight.add(lane === undefined ? report : lane.track(claimed.records, report));
        if (inFlight.state === 'full') {
          // Waiting on a batch still publishing: this one publishes meanwhile, not after it.
          if (inFlight.oldestPublishing) hold.release();
          await lane?.whileFull(inFlight.oldest);
          await inFlight.settleOldest();
        }
      }
    } finally {
      this.current = 'waiting';
      hold.release();
      await inFlight.settleAll();
      await lane?.settle();
      this.current = 'idle';
    }
    return inFlight.published + (lane?.published ?? 0);
  }

  /** Claims, publishes and settles one batch (`runOnce()`). */
  async once(): Promise<OutboxBatchReport> {
    const { claimer } = this.parts;
    const started = performance.now();
    let claimed = await claimer.claim();
    // A claim that only parked followers freed its window; the next one finds what is due.
    for (let i = 0; claimed === 'parked' && i < 100; i++) claimed = await claimer.claim();
    return typeof claimed === 'string'
      ? EMPTY_BATCH_REPORT
      : this.parts.pipeline.deliver(claimed, 'claim loop', started);
  }

  private laneFor(): QuietLane | undefined {
    const { laneTickMs, claimer, wakeUps, pipeline, lifecycle } = this.parts;
    if (laneTickMs === undefined) return undefined;
    return new QuietLane({
      claimer,
      wakeUps,
      pipeline,
      pollIntervalMs: laneTickMs,
      stopping: () => lifecycle.stopping || this.parts.outage.paused,
      woken: () => this.parts.runner.requested,
    });
  }

  /** Whether a wake-up came (during the last claim, or now) before `batch` settled. */
  private async wokenBefore(batch: Promise<unknown> | undefined): Promise<boolean> {
    if (this.parts.runner.requested) return true;
    if (this.parts.lifecycle.stopping) return false;
    return this.parts.wakeUps.before(batch);
  }
}
