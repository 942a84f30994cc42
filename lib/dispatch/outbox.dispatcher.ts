import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
  type OnModuleInit,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxBatchReport, OutboxObserver } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { OutboxStore } from '../store/ports/outbox-store.port';
import { describeError } from '../internal/describe-error';
import { OutboxExternalDeliveryError } from '../errors/outbox-external-delivery.error';
import { OutboxMessages } from '../outbox.messages';
import {
  OUTBOX_COMMITS,
  OUTBOX_OPTIONS,
  OUTBOX_SQL,
  OUTBOX_STORE,
  outboxTimerName,
} from '../outbox.constants';
import type { SqlPort } from '../store/ports/sql-port';
import type { OutboxLogLag } from '../store/ports/outbox-log-source.port';
import { LogObservation } from './log-observation';
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
import { ClaimLoop } from './claim-loop';
import { PublishHold } from './publish-hold';
import { WakeUps } from './wake-ups';

/** How often a paused dispatcher asks the publisher whether the broker is back. */
const OUTAGE_PROBE_INTERVAL_MS = 500;

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
 * Claims due messages, publishes them and settles the outcome, in a loop that survives broker
 * and database failures. Runs on a timer of its own (see `IntervalRunner`), on LISTEN/NOTIFY
 * wake-ups and after local commits; runs never overlap.
 */
@Injectable()
export class OutboxDispatcher
  implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown
{
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
  private readonly wakeUps: WakeUps;
  private readonly hold = new PublishHold();
  private readonly loop: ClaimLoop;
  /** When the rows the last outage handed back become due again (wall clock). */
  private releasedDueAt = 0;
  private unlisten: (() => Promise<void>) | undefined;
  /** The log's side, when `dispatcher.observe` is a log observer (`logTailing()`). */
  private readonly logObservation: LogObservation | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry: SchedulerRegistry | undefined,
    @Inject(OUTBOX_COMMITS) private readonly commits: CommitWatcher<unknown>,
    // The instance's SQL port: what a log observer reads the server's settings through.
    @Optional() @Inject(OUTBOX_SQL) private readonly sql?: SqlPort,
  ) {
    if (options.publisher === undefined && options.delivery === 'dispatcher') {
      throw new Error('OutboxDispatcher needs a publisher');
    }
    // With delivery 'external' nothing publishes: start() does not start, runOnce() and drain()
    // refuse, so this stand-in is never called.
    this.publisher = options.publisher ?? { publish: () => Promise.resolve([]) };
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
      likelyFew: () => this.wakeUps.retrying,
      sent: () => this.hold.release(),
    });
    this.wakeUps = new WakeUps(() => this.wake(), pollIntervalMs);
    this.loop = new ClaimLoop({
      claimer: this.claimer,
      wakeUps: this.wakeUps,
      hold: this.hold,
      runner: this.runner,
      lifecycle: this.lifecycle,
      outage: this.outage,
      deliver: (batch, started, held) => this.deliver(batch, started, held),
      batchesInFlight: options.dispatcher.batchesInFlight,
    });
    const observe = options.dispatcher.observe;
    this.logObservation =
      observe === 'poll'
        ? undefined
        : new LogObservation(observe, {
            options,
            store,
            sql: this.sql,
            watchdog: this.watchdog,
            log: this.log,
            holdsOff: () => this.lifecycle.stopping || this.outage.paused,
            deliver: (batch, started) => this.deliver(batch, started),
            wake: () => this.wake(),
            pause: (error, what) => this.pause(error, what),
            lostLease: (token, call) => this.claimer.lostLease(token, call),
          });
  }

  /**
   * With a log observer, checks the server (settings, grants, publication) and makes the slot
   * before any worker starts: a missing setting fails the app's start, naming it.
   */
  async onModuleInit(): Promise<void> {
    await this.logObservation?.prepare();
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.options.autoStart) await this.start();
  }

  /** Starts polling, wake-ups and the commit nudge (done at bootstrap unless `autoStart: false`). */
  async start(): Promise<void> {
    const { dispatcher, ordering, instanceId } = this.options;
    if (this.options.delivery === 'external') {
      this.logger.log(
        `Outbox "${this.options.name}": delivery is external (Debezium or another engine reading the database log); no dispatcher runs`,
      );
      return;
    }
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
    if (this.logObservation !== undefined) {
      // The log brings new messages; the table's poll, slower, brings back retries, promotions
      // and what the log's reader left to the table. Commit nudges and NOTIFY would only make
      // the poll race the reader for every new message: both correct, the poll a wasted claim.
      await this.logObservation.start();
      // The first sweep comes after one interval, not now: what committed before the slot
      // existed (a backlog from polling days) waits that long; everything since is in the log.
      this.runner.start(this.logObservation.sweepIntervalMs);
      return;
    }
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

  /** Asks for a drain as soon as possible; coalesces with a drain already running. */
  wake(): void {
    if (this.lifecycle.stopping) return;
    this.wakeUps.woke();
    this.runner.request();
  }

  /**
   * Claims, publishes and settles one batch now (waiting for a run in progress first) and
   * reports what happened. For tests and apps that drive the dispatcher themselves.
   */
  async runOnce(): Promise<OutboxBatchReport> {
    this.refuseExternal('runOnce()');
    return this.runner.exclusive(() => this.loop.once());
  }

  /** Runs batches until nothing is due; resolves to the number of messages published. */
  async drain(): Promise<number> {
    this.refuseExternal('drain()');
    return this.runner.run();
  }

  // With delivery 'external' Debezium publishes every row: a second delivery path would send
  // each message twice (and its settle would reach the connector as an update).
  private refuseExternal(call: string): void {
    if (this.options.delivery === 'external') {
      throw new OutboxExternalDeliveryError(
        OutboxMessages.externalDelivery(this.options.name, call),
        this.options.name,
      );
    }
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

  /**
   * How far the log's durable position is behind (`dispatcher.observe` a log observer), or null
   * when the dispatcher polls: for the lag metric and health check.
   */
  async logLagStatus(): Promise<OutboxLogLag | null> {
    return (await this.logObservation?.lag()) ?? null;
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.lifecycle.beginStop();
    // The reader first: the batch it is handing over finishes (settled) or stays unacknowledged.
    const tailing = this.logObservation?.stop();
    this.runner.stop();
    this.wakeUps.cancel();
    this.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    await unlisten?.().catch(() => undefined);
    await this.startupCheck?.cancel();
    const finished = await this.lifecycle.finishStop(async () => {
      await tailing;
      await this.runner.idle();
    }, this.options.dispatcher.shutdownTimeoutMs);
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
      return await this.loop.run();
    } finally {
      this.runStartedAt = undefined;
      this.lastRunFinishedAt = Date.now();
    }
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
      // A key held by a running in-process call is looked at again once a poll.
      heldReleaseMs: this.options.dispatcher.pollIntervalMs,
    });
    for (const error of hookErrors) this.notice.hookThrew(error);
    if (result.kind === 'outage') this.releasedDueAt = Date.now() + releaseDelayMs;
    const settled = await this.settling.settle(token, settlement, leaseEnd);
    this.logObservation?.retriesDue(settlement.retry.map((r) => r.delayMs));
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
