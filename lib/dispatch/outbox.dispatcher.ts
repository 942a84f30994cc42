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
import type { OutboxBatchReport } from '../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../publishers/outbox-publisher.interface';
import type { OutboxDeliveryPort } from '../store/ports/outbox-store.port';
import { captureAsyncContext } from '../internal/detached-context';
import { describeError } from '../internal/describe-error';
import {
  OUTBOX_COMMITS,
  OUTBOX_DEAD_LETTER_FALLBACKS,
  OUTBOX_DELIVERY_PLAN,
  OUTBOX_OPTIONS,
  OUTBOX_SQL,
  OUTBOX_STORE,
} from '../outbox.constants';
import type { SqlPort } from '../store/ports/sql-port';
import type { OutboxLogLag } from '../store/ports/outbox-log-source.port';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import type { DeliverySource, SourceContext } from './delivery-source';
import { planDelivery, type DeliveryPlan } from './delivery-source.provider';
import { DispatcherLog } from './dispatcher-log';
import { StartupCheck } from './health/startup-check';
import { DeliveryPipeline } from './pipeline/delivery-pipeline';
import type { DeadLetterFallbackLookup } from './fallback/dead-letter-fallbacks';
import type { CommitWatcher } from './poll/commit-watcher';
import { NoSource } from './no-source';
import { within } from './sleep';

/**
 * How long past `shutdownTimeoutMs` a shutdown may take: for aborted publishes to answer and be
 * settled, and for the publisher to close. Past it, shutdown returns whatever still runs.
 */
const SHUTDOWN_MARGIN_MS = 1_000;

/** The pipeline and what it publishes through: only where the dispatcher delivers. */
interface Delivering {
  readonly publisher: OutboxPublisher;
  readonly pipeline: DeliveryPipeline;
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
 * The instance's dispatcher: a `DeliveryPipeline` (lease → publish → judge → settle, with its
 * outage gate and owner lock) fed by one source, chosen once from the options: the claim loop's
 * polls, the database's log, or none when another engine delivers. It starts and stops them and
 * answers for them; the parts never call back into it.
 */
@Injectable()
export class OutboxDispatcher
  implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown
{
  private readonly logger = new Logger(OutboxDispatcher.name);
  /** Every line of this dispatcher, naming its run. */
  private readonly log: DispatcherLog;
  /** Null where nothing is delivered here (`delivery: 'external'`): no pipeline, no publisher. */
  private readonly delivering: Delivering | null;
  private readonly source: DeliverySource;
  /** The context the dispatcher was made in: what `start()` starts runs in it, never the caller's. */
  private readonly detached = captureAsyncContext();
  /** The start's question to the publisher, answered in the background. */
  private startupCheck: StartupCheck | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) store: OutboxDeliveryPort,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry: SchedulerRegistry | undefined,
    @Inject(OUTBOX_COMMITS) commits: CommitWatcher<unknown>,
    // The instance's SQL port: the owner lock's session, and what a log source reads the
    // server's settings through.
    @Optional() @Inject(OUTBOX_SQL) sql?: SqlPort,
    @Optional() @Inject(OUTBOX_DELIVERY_PLAN) plan?: DeliveryPlan,
    // The app's @OnOutboxDeadLetter() methods, called before a message is dead-lettered.
    @Optional() @Inject(OUTBOX_DEAD_LETTER_FALLBACKS) fallbacks?: DeadLetterFallbackLookup,
  ) {
    // Made by hand (a test, a subclass), the dispatcher plans as the provider would.
    const { source: makeSource } = plan ?? planDelivery(options);
    this.log = new DispatcherLog(this.logger, options.name);
    const context: SourceContext = { options, store, sql, registry, commits, log: this.log };
    if (makeSource === null) {
      this.delivering = null;
      this.source = new NoSource(context);
      return;
    }
    const publisher = options.publisher;
    if (publisher === undefined) throw new Error('OutboxDispatcher needs a publisher');
    const pipeline = new DeliveryPipeline({
      options,
      store,
      publisher,
      log: this.log,
      ...(fallbacks === undefined ? {} : { fallbacks }),
    });
    this.delivering = { publisher, pipeline };
    this.source = makeSource(pipeline, context);
  }

  /**
   * Checks what the source needs (a log source: settings, grants, publication, the slot) before
   * any worker starts: a missing setting fails the app's start, naming it.
   */
  async onModuleInit(): Promise<void> {
    await this.source.prepare();
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.options.autoStart) await this.start();
  }

  /**
   * Starts the source (polling, wake-ups and the commit nudge, or the log's reader and the sweep;
   * done at bootstrap unless `autoStart: false`). What it starts runs in the context the
   * dispatcher was made in: a start made inside a request (nestjs-cls, MikroORM's
   * RequestContext) would otherwise hand that request's store to the reader's connection, and so
   * to every message it delivers.
   */
  start(): Promise<void> {
    return this.detached(() => this.startDetached());
  }

  private async startDetached(): Promise<void> {
    const { dispatcher, ordering, instanceId } = this.options;
    if (this.delivering === null) {
      this.logger.log(this.source.description);
      return;
    }
    const { pipeline, publisher } = this.delivering;
    // A log source's reader is known once it is made (at module init, normally).
    await this.source.prepare();
    if (pipeline.lifecycle.start()) {
      // Event policies and tenants are named only when set, so that an operator sees them here.
      const types = [...this.options.policies.types.keys()];
      const policies = types.length === 0 ? '' : `, event policies for ${types.join(', ')}`;
      const tenants =
        this.options.tenants === null
          ? ''
          : `, tenants${this.options.tenants.fair === null ? '' : ' (fair claims)'}`;
      this.log.log(
        `Dispatcher started (${this.log.label}): ${this.source.description}, batchSize ${dispatcher.batchSize}, batchesInFlight ${dispatcher.batchesInFlight}, leaseMs ${dispatcher.leaseMs}, ordering ${ordering.enabled ? `on (dead letters ${ordering.onDeadLetter}, runs of up to ${ordering.maxRun})` : 'off'}${policies}${tenants}, instance ${instanceId}`,
      );
    }
    this.startupCheck ??= new StartupCheck(
      publisher,
      dispatcher.publishTimeoutMs,
      () => pipeline.lifecycle.stopping,
      this.log,
    );
    await pipeline.start();
    await this.source.start();
  }

  /** Asks for a drain as soon as possible; coalesces with a drain already running. */
  wake(): void {
    if (this.delivering?.pipeline.lifecycle.stopping !== false) return;
    this.source.wake();
  }

  /**
   * Claims, publishes and settles one batch now (waiting for a run in progress first) and
   * reports what happened. For tests and apps that drive the dispatcher themselves.
   */
  async runOnce(): Promise<OutboxBatchReport> {
    return this.source.runOnce();
  }

  /** Runs batches until nothing is due; resolves to the number of messages published. */
  async drain(): Promise<number> {
    return this.source.drain();
  }

  /** What the dispatcher is doing now (for health checks such as `nestjs-outbox/terminus`). */
  status(): OutboxDispatcherStatus {
    const now = Date.now();
    const { runningSince, lastFinishedAt } = this.source.drainTimes;
    const times = {
      runningForMs: runningSince === undefined ? null : now - runningSince,
      lastRunFinishedAt: lastFinishedAt === undefined ? null : new Date(lastFinishedAt),
    };
    if (this.delivering === null) {
      return { started: false, ...times, pausedUntil: null, stalledDatabaseCall: null };
    }
    const { outage, watchdog, lifecycle } = this.delivering.pipeline;
    return {
      started: lifecycle.running,
      ...times,
      pausedUntil: outage.paused ? new Date(outage.pausedUntil) : null,
      stalledDatabaseCall: watchdog.stalled ?? null,
    };
  }

  /**
   * How far the log's durable position is behind (`delivery: logTailing()`), or null
   * when the dispatcher polls: for the lag metric and health check.
   */
  async logLagStatus(): Promise<OutboxLogLag | null> {
    return this.source.lag();
  }

  /**
   * Stops within `shutdownTimeoutMs` and a small margin whatever happens: past the timeout the
   * publishes in flight are aborted and what their publishers answer is settled; what still runs
   * after the margin (a publisher or a log reader deaf to the abort) is left, named in a warning.
   * A publish deaf to the abort keeps its messages leased while it runs (ShutdownHold), and the
   * owner lock is given up only once no batch publishes under it.
   */
  async beforeApplicationShutdown(): Promise<void> {
    const { shutdownTimeoutMs } = this.options.dispatcher;
    // Nothing ran (the start said so): no stop to report, and no publisher was given.
    if (this.delivering === null) return;
    const { pipeline, publisher } = this.delivering;
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
    const { lifecycle } = pipeline;
    lifecycle.beginStop();
    // A log source stops its reader first: the batches it leased finish (settled), what it had
    // not leased stays unacknowledged.
    const stop = this.source.stop();
    let idleDone = false;
    const idle = stop.idle.finally(() => (idleDone = true));
    for (const [what, done] of stop.closing) await bounded(what, done);
    if (this.startupCheck !== undefined) {
      await bounded("the startup check's ping", this.startupCheck.cancel());
    }
    const finished = await lifecycle.finishStop(
      () => idle,
      endBy - SHUTDOWN_MARGIN_MS - performance.now(),
      SHUTDOWN_MARGIN_MS,
    );
    if (finished === 'abandoned') {
      left.push(...pipeline.stillRunning(), ...this.source.stillRunning(idleDone));
    }
    // After the batches settled: a lock given up earlier would let others end their leases. It
    // waits for a publish still running under it, past this shutdown if need be.
    await bounded(
      'the owner lock (kept while a batch leased under it publishes)',
      pipeline.stopWorkers(),
    );
    const closing = publisher
      .close?.()
      .catch((error: unknown) => this.log.warn(`Publisher close failed: ${describeError(error)}`));
    // The publisher's close gets a moment even when the batches took the whole margin.
    if (closing !== undefined) await bounded("the publisher's close()", closing, 250);
    if (left.length > 0) {
      this.log.warn(
        `Dispatcher stopped (${this.log.label}) with work still running after shutdownTimeoutMs (${shutdownTimeoutMs} ms) and a margin of ${SHUTDOWN_MARGIN_MS} ms: ${left.join('; ')}. Left running; ${this.source.unsettled}`,
      );
      return;
    }
    this.log.log(
      `Dispatcher stopped (${this.log.label})${finished === 'timeout' ? `: in-flight publishes did not finish within shutdownTimeoutMs (${shutdownTimeoutMs} ms); they were aborted and what the publisher answered was recorded` : ''}`,
    );
  }
}
