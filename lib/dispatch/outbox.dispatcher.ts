import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxBatchReport, OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { OutboxStore } from '../store/outbox-store.port';
import { describeError } from '../internal/describe-error';
import { IN_FLIGHT_GRACE_MS } from '../store/claim-window';
import { OUTBOX_COMMITS, OUTBOX_OPTIONS, OUTBOX_STORE, outboxTimerName } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { batchReport, judgeBatch, planBatch } from './batch-outcome';
import type { CommitWatcher } from './commit-watcher';
import { DatabaseWatchdog, watchdogMarginMs } from './database-watchdog';
import { IntervalRunner } from './interval-runner';
import { OutagePause } from './outage-pause';
import { OutageProbe } from './outage-probe';
import { DispatcherShutdown } from './dispatcher-shutdown';
import { StartupCheck } from './startup-check';
import { BatchPublish } from './batch-publish';
import { SettleRetry } from './settle-retry';
import { BatchNotice } from './batch-notice';
import { Claimer, type LeasedBatch } from './claimer';
import { DispatcherLog } from './dispatcher-log';

/** How often a paused dispatcher asks the publisher whether the broker is back. */
const OUTAGE_PROBE_INTERVAL_MS = 500;
/** First wait after a claim held back only by other dispatchers' batches (doubles, see retryAfterOthers). */
const IN_FLIGHT_RETRY_MS = 50;
const EMPTY_REPORT: OutboxBatchReport = Object.freeze({
  claimed: 0,
  published: 0,
  retried: 0,
  deadLettered: 0,
  released: 0,
  fenced: 0,
  durationMs: 0,
});

/** What the dispatcher is doing, for health checks. */
export interface OutboxDispatcherStatus {
  /** Polling and listening (`start()` ran, shutdown has not). */
  readonly started: boolean;
  /** How long the current drain has been running, or null when idle. */
  readonly runningForMs: number | null;
  /** When the last drain finished, or null before the first. */
  readonly lastRunFinishedAt: Date | null;
  /** Claims are paused after an outage until then, or null. */
  readonly pausedUntil: Date | null;
  /** A database call the watchdog gave up on that has still not answered, or null. */
  readonly stalledDatabaseCall: string | null;
}

/**
 * The longest a claimed batch's publish waits for the next claim to be sent (see
 * `holdPublish`): sending one takes a connection and a round trip, about 1 ms on a local
 * database; a claim that takes longer is waiting for something else.
 */
const PUBLISH_HOLD_MAX_MS = 5;

/** A batch the drain loop has handed to `deliver`; `done` once its report is in. */
interface InFlightBatch {
  readonly report: Promise<OutboxBatchReport>;
  done: boolean;
}

/** Whether `batch` settles within `ms` (false at once without a batch). */
async function settledWithin(batch: Promise<unknown> | undefined, ms: number): Promise<boolean> {
  if (batch === undefined) return false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([batch.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Claims due messages, publishes them and settles the outcome, in a loop that survives broker
 * and database failures. Runs on a timer of its own (see `IntervalRunner`), on LISTEN/NOTIFY
 * wake-ups and after local commits; runs never overlap.
 */
@Injectable()
export class OutboxDispatcher implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(OutboxDispatcher.name);
  /** Every line of this dispatcher, naming its run. */
  private readonly log: DispatcherLog;
  private readonly outage: OutagePause;
  private readonly probe: OutageProbe;
  private readonly publishing: BatchPublish;
  private readonly settling: SettleRetry;
  private readonly claimer: Claimer;
  private readonly notice: BatchNotice;
  private readonly runner: IntervalRunner<number>;
  private readonly watchdog: DatabaseWatchdog;
  /** The longest one database call may take before the watchdog gives up on it. */
  private readonly dbCallMs: number;
  private readonly publisher: OutboxPublisher;
  private readonly observer: OutboxObserver;
  private readonly lifecycle = new DispatcherShutdown();
  private runStartedAt: number | undefined;
  private lastRunFinishedAt: number | undefined;
  /** The start's question to the publisher, answered in the background. */
  private startupCheck: StartupCheck | undefined;
  /** A wake-up asked for the next drain (not only the timer): it claims without asking first. */
  private woken = false;
  /** Set while a drain waits on a batch in flight that a wake-up should cut short. */
  private onWake: (() => void) | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private inFlightRetryMs = 0;
  /** Lets the batch claimed last start publishing (see `holdPublish`); a no-op when none waits. */
  private releasePublish: () => void = () => undefined;
  /** When the rows the last outage handed back become due again (wall clock). */
  private releasedDueAt = 0;
  private unlisten: (() => Promise<void>) | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry: SchedulerRegistry | undefined,
    @Inject(OUTBOX_COMMITS) private readonly commits: CommitWatcher<unknown>,
  ) {
    if (options.publisher === undefined) throw new Error('OutboxDispatcher needs a publisher');
    this.publisher = options.publisher;
    // A little past the server's own statement timeout, which should fire first.
    this.dbCallMs =
      options.dispatcher.dbTimeoutMs + watchdogMarginMs(options.dispatcher.dbTimeoutMs);
    this.log = new DispatcherLog(this.logger, options.name);
    this.watchdog = new DatabaseWatchdog(this.dbCallMs, this.log);
    this.observer = options.observer;
    this.notice = new BatchNotice(options.observer, this.log);
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'dispatcher'),
      registry,
      this.log,
      () => this.timedDrain(),
    );
    const { pollIntervalMs, maxOutagePauseMs, publishTimeoutMs } = options.dispatcher;
    this.outage = new OutagePause(pollIntervalMs, maxOutagePauseMs, this.log);
    const publisher = this.publisher;
    this.probe = new OutageProbe(
      this.outage,
      {
        ping: publisher.ping?.bind(publisher),
        stopping: () => this.lifecycle.stopping,
        wake: () => this.wake(),
        releasedDueAt: () => this.releasedDueAt,
      },
      publishTimeoutMs,
      OUTAGE_PROBE_INTERVAL_MS,
      this.log,
    );
    this.publishing = new BatchPublish(
      publisher,
      publishTimeoutMs,
      this.lifecycle.signal,
      this.outage,
      (error, what, counted, probe) => this.pause(error, what, counted, probe),
      this.log,
    );
    this.settling = new SettleRetry(
      store,
      this.watchdog,
      this.dbCallMs,
      options.cleaner.deliveredRetentionMs === 0,
      this.lifecycle.signal,
      this.log,
    );
    this.claimer = new Claimer(options, store, this.watchdog, this.dbCallMs, this.log, {
      holdsOff: () => this.lifecycle.stopping || this.outage.paused,
      pause: (error, what) => this.pause(error, what),
      likelyFew: () => this.inFlightRetryMs > 0,
      sent: () => this.releasePublish(),
    });
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.options.autoStart) await this.start();
  }

  /** Starts polling, wake-ups and the commit nudge (done at bootstrap unless `autoStart: false`). */
  async start(): Promise<void> {
    const { dispatcher, ordering, instanceId } = this.options;
    if (this.lifecycle.start()) {
      this.log.log(
        `Dispatcher started (${this.log.label}): batchSize ${dispatcher.batchSize}, batchesInFlight ${dispatcher.batchesInFlight}, leaseMs ${dispatcher.leaseMs}, pollIntervalMs ${dispatcher.pollIntervalMs}, ordering ${ordering.enabled ? `on (dead letters ${ordering.onDeadLetter}, runs of up to ${ordering.maxRun})` : 'off'}, instance ${instanceId}`,
      );
    }
    this.startupCheck ??= new StartupCheck(
      this.publisher,
      dispatcher.publishTimeoutMs,
      () => this.lifecycle.stopping,
      this.log,
    );
    this.runner.start(this.options.dispatcher.pollIntervalMs);
    this.commits.attach(() => this.wake());
    if (
      this.options.dispatcher.listen &&
      this.store.listen !== undefined &&
      this.unlisten === undefined
    ) {
      try {
        this.unlisten = await this.store.listen(() => this.wake());
      } catch (error) {
        this.log.warn(`LISTEN unavailable, polling only: ${describeError(error)}`);
      }
    }
    this.wake();
  }

  /**
   * After a claim held back only by other dispatchers' batches in flight: a wake-up once those
   * have likely settled, sooner than the next poll, backing off while it keeps finding them
   * (up to the poll interval) so that idle dispatchers of a busy table claim little. Only for
   * a dispatcher running on its own: one driven by `drain()` or `runOnce()` is the caller's.
   */
  private retryAfterOthers(): void {
    if (!this.lifecycle.running || this.retryTimer !== undefined) return;
    this.inFlightRetryMs = Math.min(
      this.options.dispatcher.pollIntervalMs,
      this.inFlightRetryMs === 0 ? IN_FLIGHT_RETRY_MS : this.inFlightRetryMs * 2,
    );
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.wake();
    }, this.inFlightRetryMs);
    this.retryTimer.unref();
  }

  /** Asks for a drain as soon as possible; coalesces with a drain already running. */
  wake(): void {
    if (this.lifecycle.stopping) return;
    this.woken = true;
    this.runner.request();
    this.onWake?.();
  }

  /**
   * Claims, publishes and settles one batch now (waiting for a run in progress first) and
   * reports what happened. For tests and apps that drive the dispatcher themselves.
   */
  async runOnce(): Promise<OutboxBatchReport> {
    return this.runner.exclusive(() => this.batch());
  }

  /** Runs batches until nothing is due; resolves to the number of messages published. */
  drain(): Promise<number> {
    return this.runner.run();
  }

  /** What the dispatcher is doing now (for health checks such as `nestjs-outbox/terminus`). */
  status(): OutboxDispatcherStatus {
    const now = Date.now();
    return {
      started: this.lifecycle.running,
      runningForMs: this.runStartedAt === undefined ? null : now - this.runStartedAt,
      lastRunFinishedAt:
        this.lastRunFinishedAt === undefined ? null : new Date(this.lastRunFinishedAt),
      pausedUntil: this.outage.paused ? new Date(this.outage.pausedUntil) : null,
      stalledDatabaseCall: this.watchdog.stalled ?? null,
    };
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.lifecycle.beginStop();
    this.runner.stop();
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    await unlisten?.().catch(() => undefined);
    await this.startupCheck?.cancel();
    const finished = await this.lifecycle.finishStop(
      () => this.runner.idle(),
      this.options.dispatcher.shutdownTimeoutMs,
    );
    await this.publisher
      .close?.()
      .catch((error: unknown) => this.log.warn(`Publisher close failed: ${describeError(error)}`));
    this.log.log(
      `Dispatcher stopped (${this.log.label})${finished === 'timeout' ? `: in-flight publishes did not finish within shutdownTimeoutMs (${this.options.dispatcher.shutdownTimeoutMs} ms) and were released` : ''}`,
    );
  }

  private async timedDrain(): Promise<number> {
    this.runStartedAt = Date.now();
    try {
      return await this.drainLoop();
    } finally {
      this.runStartedAt = undefined;
      this.lastRunFinishedAt = Date.now();
    }
  }

  /**
   * Claims and delivers until nothing is due, with up to `batchesInFlight` batches publishing at
   * once: the next claim overlaps the current publish. Safe for ordering, because a claim takes a
   * key only from its head and a key with a message in flight has no claimable message.
   */
  private async drainLoop(): Promise<number> {
    let published = 0;
    const inFlight: InFlightBatch[] = [];
    const settleOldest = async (): Promise<OutboxBatchReport | undefined> => {
      const report = await inFlight.shift()?.report;
      if (report !== undefined) published += report.published;
      return report;
    };
    try {
      // A wake-up (a commit here or elsewhere) says something was written: claim at once. Only
      // a timer's poll asks first whether anything is due.
      let ask = !this.woken;
      this.woken = false;
      while (!this.lifecycle.stopping) {
        this.runner.clearRequest();
        if (this.outage.paused) break;
        if (ask && !(await this.claimer.anythingDue())) break;
        ask = false;
        const started = performance.now();
        const claimed = await this.claimer.claim();
        this.releasePublish();
        if (claimed === 'parked') continue;
        if (claimed === 'in-flight' && inFlight.length === 0) {
          // Held back by another dispatcher's batches or claim only: look again once they are
          // likely settled or committed, rather than at the next poll.
          this.retryAfterOthers();
          break;
        }
        // Held back by batches in flight, ours among them: look again when the oldest settles,
        // or once the grace has passed, when a claim parks the followers of a slow publish so
        // that they no longer hold up the keys behind them.
        if (
          claimed === 'in-flight' &&
          !(await settledWithin(inFlight[0]?.report, IN_FLIGHT_GRACE_MS))
        ) {
          continue;
        }
        // Nothing claimable, with room for another batch: a commit while ours publishes is
        // claimed at once and published beside it, instead of after its confirms and settle
        // (bench P4's tail). Safe for ordering for the reason above.
        if (
          claimed === 'idle' &&
          inFlight.length > 0 &&
          (await this.wokenBefore(inFlight[0]?.report))
        ) {
          continue;
        }
        if (claimed === 'idle' || claimed === 'in-flight') {
          // Nothing claimable now; settling what is in flight may free the next message of
          // its keys, so look again if it made progress.
          const report = await settleOldest();
          // A wake-up during that claim (a commit it may have missed) asks for one more look;
          // without it, the commit's messages would wait for the next poll.
          // A wake-up during that claim is not lost: the runner runs once more after this run.
          if (report === undefined) break;
          const progressed = report.published > 0 || report.deadLettered > 0;
          if (!progressed && !this.runner.requested && inFlight.length === 0) break;
          continue;
        }
        this.inFlightRetryMs = 0;
        const batch: InFlightBatch = {
          done: false,
          report: this.deliver(claimed, started, this.holdPublish()).finally(() => {
            batch.done = true;
          }),
        };
        inFlight.push(batch);
        if (inFlight.length >= this.options.dispatcher.batchesInFlight) {
          // Waiting on a batch still publishing: this one publishes meanwhile, not after it.
          if (inFlight[0]?.done === false) this.releasePublish();
          await settleOldest();
        }
      }
    } finally {
      this.releasePublish();
      while (inFlight.length > 0) await settleOldest();
    }
    return published;
  }

  /**
   * Holds the publish of the batch just claimed until the next claim has gone to the database
   * (`ClaimOptions.onSent`), or the loop waits on something else. A publish begins with
   * synchronous work (the broker client encodes the whole batch: about 10 ms for 500 messages
   * to Kafka) that, started first, kept the next claim from being sent until it was done; the
   * claim then ran after the encoding instead of beside it, and the drain went at the pace of
   * the two in a row. Held for `PUBLISH_HOLD_MAX_MS` at most: a claim waiting its turn behind
   * another dispatcher's (PostgreSQL) is sent only after it, and the publish need not wait so.
   */
  private holdPublish(): Promise<void> {
    this.releasePublish();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.releasePublish(), PUBLISH_HOLD_MAX_MS);
      timer.unref();
      this.releasePublish = () => {
        this.releasePublish = () => undefined;
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Whether a wake-up came (during the last claim, or now) before `batch` settled. */
  private async wokenBefore(batch: Promise<unknown> | undefined): Promise<boolean> {
    if (this.runner.requested) return true;
    if (batch === undefined || this.lifecycle.stopping) return false;
    const woken = new Promise<true>((resolve) => {
      this.onWake = () => resolve(true);
    });
    try {
      return await Promise.race([
        batch.then(
          () => false,
          () => false,
        ),
        woken,
      ]);
    } finally {
      this.onWake = undefined;
    }
  }

  private async batch(): Promise<OutboxBatchReport> {
    const started = performance.now();
    let claimed = await this.claimer.claim();
    // A claim that only parked followers freed its window; the next one finds what is due.
    for (let i = 0; claimed === 'parked' && i < 100; i++) claimed = await this.claimer.claim();
    return typeof claimed === 'string' ? EMPTY_REPORT : this.deliver(claimed, started);
  }

  /** Publishes a claimed batch and settles the outcome; never throws. */
  private async deliver(
    { token, records, claimedAt, leaseEnd }: LeasedBatch,
    started: number,
    held?: Promise<void>,
  ): Promise<OutboxBatchReport> {
    if (held !== undefined) {
      await held;
      // Past the promise jobs that hand the next claim's statement to the driver.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    // Publishing must end early enough to settle within the lease (see planBatch).
    const publishBy = leaseEnd - this.dbCallMs;
    const { retry, ordering } = this.options;
    const plan = planBatch(records, retry.maxAttempts, performance.now(), publishBy);
    if (plan.skip?.kind === 'lapsed') {
      this.log.warn(
        `A claimed batch of ${records.length} message(s) reached its lease deadline before publishing (was the process paused?); releasing it unpublished`,
        { released: records.length, reason: 'lapsed' },
      );
    }
    const result = plan.skip ?? (await this.publishing.publish(plan.fresh, plan.held, publishBy));
    const answeredAfterClaimMs = performance.now() - claimedAt;
    const { verdicts, settlement, releaseDelayMs, hookErrors } = judgeBatch({
      records,
      result,
      retry,
      deadAdvancesKey: !ordering.queue.deadBlocksKey,
      outagePauseMs: this.outage.currentPauseMs,
      probeEveryMs: this.publisher.ping === undefined ? undefined : OUTAGE_PROBE_INTERVAL_MS,
    });
    for (const error of hookErrors) this.notice.hookThrew(error);
    if (result.kind === 'outage') this.releasedDueAt = Date.now() + releaseDelayMs;
    const settled = await this.settling.settle(token, settlement, leaseEnd);
    const report = batchReport(records.length, settlement, settled, performance.now() - started);
    this.notice.settled(records, verdicts, report, answeredAfterClaimMs);
    return report;
  }

  private pause(
    error: unknown,
    what: string,
    counted = 'no attempt counted',
    brokerOutage = false,
  ): void {
    const pauseMs = this.outage.pause(error, what, counted);
    this.notice.safely(() => this.observer.onOutage?.(error, pauseMs));
    if (brokerOutage) this.probe.start();
  }
}
