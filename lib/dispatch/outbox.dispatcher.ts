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
import { captureAsyncContext } from '../internal/detached-context';
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
import { LogObservation } from './log/log-observation';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { batchReport, judgeBatch, planBatch } from './pipeline/batch-outcome';
import type { CommitWatcher } from './poll/commit-watcher';
import { DatabaseWatchdog, watchdogMarginMs } from './health/database-watchdog';
import { IntervalRunner } from '../workers/interval-runner';
import { OutagePause } from './health/outage-pause';
import { OutageProbe } from './health/outage-probe';
import { DispatcherShutdown } from './dispatcher-shutdown';
import { StartupCheck } from './health/startup-check';
import { BatchPublish } from './pipeline/batch-publish';
import { SettleRetry } from './pipeline/settle-retry';
import { BatchNotice } from './pipeline/batch-notice';
import { Claimer, type LeasedBatch } from './poll/claimer';
import { batchIdOf, DispatcherLog } from './dispatcher-log';
import { ClaimLoop } from './poll/claim-loop';
import { PublishHold } from './pipeline/publish-hold';
import { WakeUps } from './poll/wake-ups';
import { within } from './sleep';
import { OwnerLiveness } from './health/owner-liveness';

/** How often a paused dispatcher asks the publisher whether the broker is back. */
const OUTAGE_PROBE_INTERVAL_MS = 500;

/**
 * How long past `shutdownTimeoutMs` a shutdown may take: for aborted publishes to give their
 * leases back, and for the publisher to close. Past it, shutdown returns whatever still runs.
 */
const SHUTDOWN_MARGIN_MS = 1_000;

/** A batch being delivered, for the shutdown's account of what it left running. */
interface BatchInFlight {
  readonly size: number;
  readonly source: 'claim loop' | 'log reader';
  stage: 'publishing' | 'settling';
}

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
  /** The context the dispatcher was made in: what `start()` starts runs in it, never the caller's. */
  private readonly detached = captureAsyncContext();
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
  /** The owner lock and the watch for the leases of ended dispatchers (fast takeover). */
  private readonly liveness: OwnerLiveness;
  /** The log's side, when `dispatcher.observe` is a log observer (`logTailing()`). */
  private readonly logObservation: LogObservation | undefined;
  /** The batches being delivered, by token. */
  private readonly batches = new Map<string, BatchInFlight>();

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
      lease: () => this.liveness.lease(),
    });
    this.wakeUps = new WakeUps(() => this.wake(), pollIntervalMs);
    this.liveness = new OwnerLiveness(
      options.dispatcher.ownerLock ? this.sql : undefined,
      store,
      this.log,
      () => this.wake(),
    );
    this.loop = new ClaimLoop({
      claimer: this.claimer,
      wakeUps: this.wakeUps,
      hold: this.hold,
      runner: this.runner,
      lifecycle: this.lifecycle,
      outage: this.outage,
      deliver: (batch, started, held) => this.deliver(batch, started, 'claim loop', held),
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
            deliver: (batch, started) => this.deliver(batch, started, 'log reader'),
            wake: () => this.wake(),
            pause: (error, what) => this.pause(error, what),
            lease: () => this.liveness.lease(),
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

  /**
   * Starts polling, wake-ups and the commit nudge, or the log's reader (done at bootstrap unless
   * `autoStart: false`). What it starts runs in the context the dispatcher was made in: a start
   * made inside a request (nestjs-cls, MikroORM's RequestContext) would otherwise hand that
   * request's store to the reader's connection, and so to every message it delivers.
   */
  start(): Promise<void> {
    return this.detached(() => this.startDetached());
  }

  private async startDetached(): Promise<void> {
    const { dispatcher, ordering, instanceId } = this.options;
    if (this.options.delivery === 'external') {
      this.logger.log(
        `Outbox "${this.options.name}": delivery is external (Debezium or another engine reading the database log); no dispatcher runs`,
      );
      return;
    }
    // The log's reader is known once its source is made (at module init, normally).
    await this.logObservation?.prepare();
    if (this.lifecycle.start()) {
      this.log.log(
        `Dispatcher started (${this.log.label}): ${this.sourceDescription()}, batchSize ${dispatcher.batchSize}, batchesInFlight ${dispatcher.batchesInFlight}, leaseMs ${dispatcher.leaseMs}, ordering ${ordering.enabled ? `on (dead letters ${ordering.onDeadLetter}, runs of up to ${ordering.maxRun})` : 'off'}, instance ${instanceId}`,
      );
    }
    this.startupCheck ??= new StartupCheck(
      this.publisher,
      dispatcher.publishTimeoutMs,
      () => this.lifecycle.stopping,
      this.log,
    );
    await this.liveness.start();
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

  /** Where new messages come from, with the settings of that source only. */
  private sourceDescription(): string {
    const observation = this.logObservation;
    if (observation !== undefined) {
      return `log tailing (${observation.reader}), table swept every ${observation.sweepIntervalMs} ms`;
    }
    const { pollIntervalMs, listen } = this.options.dispatcher;
    const wakeUps =
      listen && this.store.listen !== undefined ? 'LISTEN/NOTIFY wake-ups' : 'no LISTEN';
    return `polling every ${pollIntervalMs} ms (${wakeUps})`;
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

  /**
   * Stops within `shutdownTimeoutMs` and a small margin whatever happens: past the timeout the
   * publishes in flight are aborted and their leases given back; what still runs after the margin
   * (a publisher or a log reader deaf to the abort) is left, named in a warning.
   */
  async beforeApplicationShutdown(): Promise<void> {
    const { shutdownTimeoutMs } = this.options.dispatcher;
    // Nothing ran (the start said so): no stop to report, only a publisher given to close.
    if (this.options.delivery === 'external') {
      await this.publisher.close?.().catch(() => undefined);
      return;
    }
    const endBy = performance.now() + shutdownTimeoutMs + SHUTDOWN_MARGIN_MS;
    const left: string[] = [];
    const bounded = async (what: string, step: Promise<unknown>, atLeastMs = 1): Promise<void> => {
      const ms = Math.max(atLeastMs, endBy - performance.now());
      if (
        (await within(
          step.then(() => true),
          ms,
        )) === undefined
      )
        left.push(what);
    };
    this.lifecycle.beginStop();
    // The reader first: the batch it is handing over finishes (settled) or stays unacknowledged.
    let tailingDone = this.logObservation === undefined;
    const tailing = this.logObservation?.stop().finally(() => (tailingDone = true));
    this.runner.stop();
    this.wakeUps.cancel();
    this.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    if (unlisten !== undefined) {
      await bounded(
        'the LISTEN connection',
        unlisten().catch(() => undefined),
      );
    }
    if (this.startupCheck !== undefined) {
      await bounded("the startup check's ping", this.startupCheck.cancel());
    }
    const finished = await this.lifecycle.finishStop(
      async () => {
        await tailing;
        await this.runner.idle();
      },
      endBy - SHUTDOWN_MARGIN_MS - performance.now(),
      SHUTDOWN_MARGIN_MS,
    );
    if (finished === 'abandoned') left.push(...this.stillRunning(tailingDone));
    // After the batches settled: a lock given up earlier would let others end their leases.
    await bounded('the owner lock', this.liveness.stop());
    const closing = this.publisher
      .close?.()
      .catch((error: unknown) => this.log.warn(`Publisher close failed: ${describeError(error)}`));
    // The publisher's close gets a moment even when the batches took the whole margin.
    if (closing !== undefined) await bounded("the publisher's close()", closing, 250);
    if (left.length > 0) {
      this.log.warn(
        `Dispatcher stopped (${this.log.label}) with work still running after shutdownTimeoutMs (${shutdownTimeoutMs} ms) and a margin of ${SHUTDOWN_MARGIN_MS} ms: ${left.join('; ')}. Left running; the messages of a batch not settled are claimed again once its lease expires`,
      );
      return;
    }
    this.log.log(
      `Dispatcher stopped (${this.log.label})${finished === 'timeout' ? `: in-flight publishes did not finish within shutdownTimeoutMs (${shutdownTimeoutMs} ms) and were released` : ''}`,
    );
  }

  /** What an abandoned shutdown leaves running: the batches, the log reader, the claim loop. */
  private stillRunning(tailingDone: boolean): string[] {
    const left = [...this.batches].map(
      ([token, b]) =>
        `batch ${batchIdOf(token)} (${b.size} message(s) from the ${b.source}, ${b.stage})`,
    );
    if (!tailingDone) left.push('the log reader');
    const state = this.loop.state;
    if (this.runner.running && state !== 'idle' && (state !== 'waiting' || left.length === 0)) {
      left.push(`the claim loop (${state})`);
    }
    return left;
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
    batch: LeasedBatch,
    started: number,
    source: BatchInFlight['source'],
    held?: Promise<void>,
  ): Promise<OutboxBatchReport> {
    const id = batchIdOf(batch.token);
    const inFlight: BatchInFlight = { size: batch.records.length, source, stage: 'publishing' };
    this.batches.set(batch.token, inFlight);
    try {
      return await this.deliverBatch(batch, id, inFlight, started, held);
    } finally {
      this.batches.delete(batch.token);
    }
  }

  private async deliverBatch(
    { token, records, claimedAt, leaseEnd, fence }: LeasedBatch,
    batchId: string,
    inFlight: BatchInFlight,
    started: number,
    held: Promise<void> | undefined,
  ): Promise<OutboxBatchReport> {
    if (held !== undefined) {
      await held;
      // Past the promise jobs that hand the next claim's statement to the driver.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.log.debug(
      `Claimed ${records.length} message(s) by the ${inFlight.source === 'log reader' ? 'log reader (by id)' : 'claim loop'}`,
      { batch: batchId, claimed: records.length },
    );
    // Publishing must end early enough to settle within the lease (see planBatch).
    const publishBy = leaseEnd - this.dbCallMs;
    const { retry, ordering } = this.options;
    const plan = planBatch(records, retry.maxAttempts, performance.now(), publishBy);
    if (plan.skip?.kind === 'lapsed') {
      this.log.warn(
        `A claimed batch of ${records.length} message(s) reached its lease deadline before publishing (was the process paused?); releasing it unpublished`,
        { batch: batchId, released: records.length, reason: 'lapsed' },
      );
    }
    const result =
      plan.skip ??
      (await this.publishing.publish(plan.fresh, plan.held, publishBy, batchId, fence));
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
    inFlight.stage = 'settling';
    const settled = await this.settling.settle(token, settlement, leaseEnd);
    this.logObservation?.retriesDue(settlement.retry.map((r) => r.delayMs));
    const report = batchReport(records.length, settlement, settled, performance.now() - started);
    this.notice.settled(batchId, records, verdicts, report, answeredAfterClaimMs);
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
