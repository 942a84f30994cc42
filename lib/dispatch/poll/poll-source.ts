import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import { outboxTimerName } from '../../outbox.constants';
import { IntervalRunner } from '../../workers/interval-runner';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { PublishHold } from '../pipeline/publish-hold';
import { ClaimLoop } from './claim-loop';
import { Claimer } from './claimer';
import { WakeUps } from '../wake-ups';
import type { RowLeases } from '../leases/row-leases';

/** How the claim loop is woken: its timer, and what else tells it of new rows. */
export interface PollSettings {
  readonly intervalMs: number;
  /** LISTEN for the enqueue's NOTIFY (where the store offers it). */
  readonly listen: boolean;
  /** Wake after a local commit that enqueued (the connection's `afterCommit`). */
  readonly commitNudges: boolean;
  /** Claim at once on start, rather than after the first interval. */
  readonly claimAtStart: boolean;
}

/**
 * The table's source: the claim loop, run by a timer of its own (`IntervalRunner`), by LISTEN
 * wake-ups and by local commits; its drains never overlap. Under log tailing it is the sweep,
 * woken by its timer and by what the log source leaves to the table.
 */
export class PollSource implements DeliverySource {
  readonly delivers = true;
  readonly unsettled = 'the messages of a batch not settled are claimed again once its lease ends';
  private readonly runner: IntervalRunner<number>;
  private readonly wakeUps: WakeUps;
  private readonly hold = new PublishHold();
  private readonly loop: ClaimLoop;
  private unlisten: (() => Promise<void>) | undefined;
  private runningSince: number | undefined;
  private lastFinishedAt: number | undefined;

  constructor(
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
    leases: RowLeases,
    private readonly settings: PollSettings,
  ) {
    const { options, store, registry, log } = context;
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'dispatcher'),
      registry,
      log,
      () => this.timedDrain(),
    );
    this.wakeUps = new WakeUps(() => this.wake(), options.dispatcher.pollIntervalMs);
    const claimer = new Claimer(options, store, pipeline, leases, log, {
      likelyFew: () => this.wakeUps.retrying,
      sent: () => this.hold.release(),
    });
    this.loop = new ClaimLoop({
      claimer,
      wakeUps: this.wakeUps,
      hold: this.hold,
      runner: this.runner,
      lifecycle: pipeline.lifecycle,
      outage: pipeline.outage,
      pipeline,
      batchesInFlight: options.dispatcher.batchesInFlight,
      ...(claimer.fair ? { laneTickMs: settings.intervalMs } : {}),
    });
    pipeline.onLookAgain(() => this.wake());
  }

  get description(): string {
    const wakeUps =
      this.settings.listen && this.context.store.listen !== undefined
        ? 'LISTEN/NOTIFY wake-ups'
        : 'no LISTEN';
    return `polling every ${this.settings.intervalMs} ms (${wakeUps})`;
  }

  get drainTimes(): DrainTimes {
    return { runningSince: this.runningSince, lastFinishedAt: this.lastFinishedAt };
  }

  prepare(): Promise<void> {
    return Promise.resolve();
  }

  async start(): Promise<void> {
    const { store, commits, log } = this.context;
    this.runner.start(this.settings.intervalMs);
    if (this.settings.commitNudges) commits.attach(() => this.wake());
    if (this.settings.listen && store.listen !== undefined && this.unlisten === undefined) {
      try {
        this.unlisten = await store.listen(() => this.wake());
      } catch (error) {
        log.warn(`LISTEN unavailable, polling only: ${describeError(error)}`);
      }
    }
    if (this.settings.claimAtStart) this.wake();
  }

  wake(): void {
    if (this.pipeline.lifecycle.stopping) return;
    this.wakeUps.woke();
    this.runner.request();
  }

  drain(): Promise<number> {
    return this.runner.run();
  }

  runOnce(): Promise<OutboxBatchReport> {
    return this.runner.exclusive(() => this.loop.once());
  }

  stop(): SourceStop {
    this.runner.stop();
    this.wakeUps.cancel();
    if (this.settings.commitNudges) this.context.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    return {
      idle: this.runner.idle(),
      closing:
        unlisten === undefined
          ? []
          : [['the LISTEN connection', unlisten().catch(() => undefined)] as const],
    };
  }

  stillRunning(idleDone: boolean): string[] {
    const state = this.loop.state;
    if (idleDone || !this.runner.running || state === 'idle') return [];
    // Waiting on batches only: those are named on their own.
    if (state === 'waiting' && this.pipeline.busy) return [];
    return [`the claim loop (${state})`];
  }

  lag(): Promise<null> {
    return Promise.resolve(null);
  }

  private async timedDrain(): Promise<number> {
    this.runningSince = Date.now();
    try {
      return await this.loop.run();
    } finally {
      this.runningSince = undefined;
      this.lastFinishedAt = Date.now();
    }
  }
}
