import type { OutboxBatchReport, OutboxObserver } from '../../observers/outbox-observer.interface';
import type { OutboxPublisher } from '../../publishers/outbox-publisher.interface';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type { OutboxDeliveryPort } from '../../store/ports/outbox-store.port';
import { batchIdOf, type DispatcherLog } from '../dispatcher-log';
import { DispatcherShutdown } from '../dispatcher-shutdown';
import { DatabaseWatchdog, watchdogMarginMs } from '../health/database-watchdog';
import { OutagePause } from '../health/outage-pause';
import { OutageProbe } from '../health/outage-probe';
import { deadBlocksKeyOf } from '../../options/queue-policy';
import {
  batchReport,
  judgeBatch,
  planBatch,
  withFallbacks,
  type BatchJudgement,
  type FallbackAnswer,
  type PolicyOf,
  type PublishResult,
  type RecordPolicy,
} from './batch-outcome';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';
import {
  settlesMessage,
  type DeadLetterFallback,
  type DeadLetterFallbackLookup,
} from '../fallback/dead-letter-fallbacks';
import { BatchNotice } from './batch-notice';
import { BatchPublish } from './batch-publish';
import type { BatchOrigin, DeliveryBatch } from './delivery-batch';
import type { BatchHold } from './batch-hold';
import type { PipelineWorker } from './pipeline-worker';
import { SettleRetry } from './settle-retry';
import { ShutdownHold, type ShutdownHoldParts } from './shutdown-hold';

/** How a batch's debug line says where its messages came from (an owner leases nothing). */
const TAKEN: Readonly<Record<BatchOrigin, readonly [verb: string, from: string]>> = {
  'claim loop': ['Claimed', 'by the claim loop'],
  'log reader': ['Claimed', 'by the log reader (by id)'],
  'partition owner': ['Read', 'from its partitions by the partition owner'],
};

/** How often a paused pipeline asks the publisher whether the broker is back. */
const OUTAGE_PROBE_INTERVAL_MS = 500;

/** A batch being delivered, for the shutdown's account of what it left running. */
interface BatchInFlight {
  readonly size: number;
  readonly origin: BatchOrigin;
  /** Its hold leans on the source's workers (the owner lock its token names). */
  readonly needsWorkers: boolean;
  stage: 'publishing' | 'settling';
  /** What holds its messages when its publish did not answer the shutdown's abort. */
  hold?: ShutdownHold;
}

/** What the pipeline is made of: the instance's options, store, publisher and SQL port. */
export interface DeliveryPipelineParts {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxDeliveryPort;
  readonly publisher: OutboxPublisher;
  readonly log: DispatcherLog;
  /** The `@OnOutboxDeadLetter()` fallbacks, called before a message is dead-lettered. */
  readonly fallbacks?: DeadLetterFallbackLookup;
}

/** What a fallback's race against the lease ends with when the lease wins. */
const FALLBACK_LATE = Symbol('late');

/**
 * Lease → publish → judge → settle, for the batches of any source (the claim loop, the log
 * source): the publish under its deadline and fence, the verdicts, the settle retried until the
 * lease ends, and what surrounds them: the outage gate (a failed publish or database call pauses
 * every source, and a probe reopens it), the owner lock whose tokens fence the leases, the leases
 * whose answer was lost, and the start and stop that abort publishes still running.
 *
 * Sources are handed the pipeline; it knows none of them. What they need to hear of it (the gate
 * reopened, retries due) they subscribe to.
 */
export class DeliveryPipeline {
  readonly lifecycle = new DispatcherShutdown();
  readonly watchdog: DatabaseWatchdog;
  /** The longest one database call may take before the watchdog gives up on it. */
  readonly dbCallMs: number;
  readonly outage: OutagePause;
  private readonly probe: OutageProbe;
  private readonly publishing: BatchPublish;
  private readonly settling: SettleRetry;
  private readonly notice: BatchNotice;
  private readonly observer: OutboxObserver;
  /** What a source adds that must let it lease (the `'leases'` mode gate). */
  private readonly gates: (() => boolean)[] = [];
  /** What sources run beside the pipeline that their batches' holds lean on. */
  private readonly workers: PipelineWorker[] = [];
  /** Each event type's policy as the judge reads it, made once per type seen. */
  private readonly recordPolicies = new Map<string, RecordPolicy>();
  private readonly defaultPolicy: RecordPolicy;
  private readonly batches = new Map<string, BatchInFlight>();
  /** Called when a batch ends, moves on or changes its hold (see `stopWorkers`). */
  private readonly changes = new Set<() => void>();
  private readonly holdParts: ShutdownHoldParts;
  private readonly lookAgain = new Set<() => void>();
  private readonly retryListeners = new Set<(delaysMs: readonly number[]) => void>();
  /** When the rows the last outage handed back become due again (wall clock). */
  private releasedDueAt = 0;

  constructor(private readonly parts: DeliveryPipelineParts) {
    const { options, store, publisher, log } = parts;
    const { dbTimeoutMs, pollIntervalMs, maxOutagePauseMs, publishTimeoutMs } = options.dispatcher;
    // A little past the server's own statement timeout, which should fire first.
    this.dbCallMs = dbTimeoutMs + watchdogMarginMs(dbTimeoutMs);
    this.watchdog = new DatabaseWatchdog(this.dbCallMs, log);
    this.observer = options.observer;
    this.defaultPolicy = {
      name: 'default',
      retry: options.retry,
      deadAdvancesKey: !options.ordering.queue.deadBlocksKey,
      maxAgeMs: options.policies.default.maxAgeMs,
    };
    this.notice = new BatchNotice(
      options.observer,
      log,
      (type) => options.policies.policyFor(type).name,
    );
    this.outage = new OutagePause(pollIntervalMs, maxOutagePauseMs, log);
    this.probe = new OutageProbe(
      this.outage,
      {
        ping: publisher.ping?.bind(publisher),
        stopping: () => this.lifecycle.stopping,
        wake: () => this.wakeSources(),
        releasedDueAt: () => this.releasedDueAt,
      },
      publishTimeoutMs,
      OUTAGE_PROBE_INTERVAL_MS,
      log,
    );
    this.publishing = new BatchPublish(
      publisher,
      publishTimeoutMs,
      this.lifecycle.signal,
      this.outage,
      (error, what, counted, probe) => this.pause(error, what, counted, probe),
      log,
    );
    this.settling = new SettleRetry(this.watchdog, this.dbCallMs, this.lifecycle.signal, log);
    const renewLease = store.renewLease?.bind(store);
    const { leaseMs, leaseRenewal: renewing } = options.dispatcher;
    this.holdParts = {
      renew:
        renewLease === undefined
          ? undefined
          : (ids, token, ms, newToken) =>
              this.watchdog.run('lease hold', () => renewLease(ids, token, ms, newToken), {
                evenWhileStalled: true,
              }),
      leaseMs,
      intervalMs: renewing === false ? undefined : renewing.intervalMs,
      log,
      onChange: () => this.changed(),
    };
  }

  /**
   * Whether a source may lease now: not stopping, not paused by an outage, and every gate a
   * source added open (the `'leases'` mode's: not while the other mode works the table).
   */
  get open(): boolean {
    return !this.lifecycle.stopping && !this.outage.paused && this.gates.every((open) => open());
  }

  /** A condition sources must meet to lease, besides the stop and the outage pause. */
  addGate(open: () => boolean): void {
    this.gates.push(open);
  }

  /** Runs `worker` with the pipeline: started by `start`, stopped by `stopWorkers`. */
  addWorker(worker: PipelineWorker): void {
    this.workers.push(worker);
  }

  /** Tells the observer something, a throw of its logged and never the pipeline's. */
  notifyObserver(tell: (observer: OutboxObserver) => void): void {
    this.notice.safely(() => tell(this.observer));
  }

  /** Calls `listener` when the sources should look again: an outage ended, leases were freed. */
  onLookAgain(listener: () => void): void {
    this.lookAgain.add(listener);
  }

  /**
   * Calls `listener` with the delays of the retries each settle scheduled: a source that does not
   * poll often (the log source's sweep) looks when the first is due.
   */
  onRetries(listener: (delaysMs: readonly number[]) => void): void {
    this.retryListeners.add(listener);
  }

  /** Starts the sources' workers (the owner lock, when the port and options allow). */
  async start(): Promise<void> {
    for (const worker of this.workers) await worker.start();
  }

  /**
   * Stops the sources' workers once no batch publishing leans on them: the owner lock given up
   * earlier would let the other instances end those batches' leases while their publishes may
   * still write. A batch whose publish did not answer the shutdown's abort stops counting once
   * its lease has moved to a token of its own (ShutdownHold); until then, or if that failed,
   * the lock is kept as long as the call runs.
   */
  async stopWorkers(): Promise<void> {
    for (const worker of this.workers) worker.stopWatching();
    while (this.workersNeeded()) {
      await new Promise<void>((resolve) => this.changes.add(resolve));
    }
    for (const worker of this.workers) await worker.stop();
  }

  private workersNeeded(): boolean {
    for (const b of this.batches.values()) {
      if (b.needsWorkers && b.stage === 'publishing' && (b.hold?.onClaimToken ?? true)) return true;
    }
    return false;
  }

  private changed(): void {
    const waiting = [...this.changes];
    this.changes.clear();
    for (const resolve of waiting) resolve();
  }

  /** Closes the gate for an outage (of the database, or the broker when `brokerOutage`). */
  pause(error: unknown, what: string, counted = 'no attempt counted', brokerOutage = false): void {
    const pauseMs = this.outage.pause(error, what, counted);
    this.notice.safely(() => this.observer.onOutage?.(error, pauseMs));
    if (brokerOutage) this.probe.start();
  }

  /**
   * What an abandoned shutdown leaves running: the batches still publishing or settling, and
   * what holds the messages of a publish that did not answer the abort.
   */
  stillRunning(): string[] {
    return [...this.batches].map(
      ([token, b]) =>
        `batch ${batchIdOf(token)} (${b.size} message(s) from the ${b.origin}, ${b.stage}${b.hold === undefined ? '' : `: ${b.hold.describe()}`})`,
    );
  }

  /** Whether any batch is being delivered. */
  get busy(): boolean {
    return this.batches.size > 0;
  }

  /**
   * Publishes a leased batch and settles the outcome; never throws. `held` (the claim loop's
   * publish hold) is waited for before the publish starts.
   */
  async deliver(
    batch: DeliveryBatch,
    origin: BatchOrigin,
    started: number,
    held?: Promise<void>,
  ): Promise<OutboxBatchReport> {
    const { hold } = batch;
    const inFlight: BatchInFlight = {
      size: batch.records.length,
      origin,
      needsWorkers: hold.needsWorkers,
      stage: 'publishing',
    };
    this.batches.set(batch.token, inFlight);
    try {
      return await this.deliverBatch(batch, hold, inFlight, started, held);
    } finally {
      inFlight.hold?.stop();
      this.batches.delete(batch.token);
      this.changed();
    }
  }

  private async deliverBatch(
    { token, records, claimedAt, published }: DeliveryBatch,
    hold: BatchHold,
    inFlight: BatchInFlight,
    started: number,
    held: Promise<void> | undefined,
  ): Promise<OutboxBatchReport> {
    const { options, log, publisher } = this.parts;
    const batchId = batchIdOf(token);
    if (held !== undefined) {
      await held;
      // Past the promise jobs that hand the next claim's statement to the driver.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const [verb, from] = TAKEN[inFlight.origin];
    log.debug(`${verb} ${records.length} message(s) ${from}`, {
      batch: batchId,
      claimed: records.length,
    });
    // Publishing must end early enough to settle within the hold (see planBatch).
    const publishBy = hold.publishBy;
    const { retry, ordering } = options;
    const plan = planBatch(records, retry.maxAttempts, performance.now(), publishBy, this.policyOf);
    if (plan.skip?.kind === 'lapsed') {
      log.warn(
        `A claimed batch of ${records.length} message(s) reached its lease deadline before publishing (was the process paused?); releasing it unpublished`,
        { batch: batchId, released: records.length, reason: 'lapsed' },
      );
    }
    // Kept up while it publishes (a lease renewed); the settle then has until its moved end.
    if (plan.skip === undefined) hold.begin();
    // A publish deaf to the shutdown's abort: its messages are held while the call runs, on a
    // token of their own that this pipeline renews until the call returns.
    const onUnanswered = async (): Promise<void> => {
      hold.stop();
      const kept = await hold.keepThroughCall();
      if (kept === undefined) return;
      const shutdownHold = new ShutdownHold(
        this.holdParts,
        kept.token,
        records.map((r) => r.id),
        kept.leaseEnd,
      );
      inFlight.hold = shutdownHold;
      await shutdownHold.moved;
    };
    let result: PublishResult;
    try {
      result =
        plan.skip ??
        (await this.publishing.publish(plan.fresh, plan.held, {
          hold,
          batchId,
          onUnanswered,
          onCall: (call) => hold.calling(call),
        }));
    } finally {
      hold.stop();
      // The call returned: its lease need only last until the settle below.
      inFlight.hold?.stop();
    }
    const answeredAfterClaimMs = performance.now() - claimedAt;
    const judged = judgeBatch({
      records,
      result,
      retry,
      deadAdvancesKey: !ordering.queue.deadBlocksKey,
      policyOf: this.policyOf,
      outagePauseMs: this.outage.currentPauseMs,
      probeEveryMs: publisher.ping === undefined ? undefined : OUTAGE_PROBE_INTERVAL_MS,
      // A key held by a running in-process call is looked at again once a poll.
      heldReleaseMs: options.dispatcher.pollIntervalMs,
    });
    for (const error of judged.hookErrors) this.notice.hookThrew(error);
    // The renewed end, if renewals moved it: fallbacks and the settle share what is left of it.
    const settleBy = inFlight.hold?.leaseEnd ?? hold.settleBy;
    const { verdicts, settlement, releaseDelayMs } = await this.fallBack(
      records,
      judged,
      settleBy,
      batchId,
    );
    if (result.kind === 'outage') this.releasedDueAt = Date.now() + releaseDelayMs;
    inFlight.stage = 'settling';
    this.changed();
    published?.();
    // A held batch's rows hold the token its hold moved them to.
    const moved = inFlight.hold?.token;
    const settled = await this.settling.settle(moved ?? token, settlement, settleBy, (s) =>
      hold.settle(s, moved),
    );
    if (settlement.retry.length > 0) {
      const delays = settlement.retry.map((r) => r.delayMs);
      for (const listener of this.retryListeners) listener(delays);
    }
    const report = batchReport(records.length, settlement, settled, performance.now() - started);
    this.notice.settled(batchId, inFlight.origin, records, verdicts, report, answeredAfterClaimMs);
    return report;
  }

  /** A record's policy: its event type's, or the module's defaults. */
  private readonly policyOf: PolicyOf = (record) => {
    const known = this.recordPolicies.get(record.type);
    if (known !== undefined) return known;
    const { policies, ordering } = this.parts.options;
    const resolved = policies.policyFor(record.type);
    // Types without a policy share the default one: the map holds only what a policy names, so
    // it stays small however many types flow through.
    if (resolved.name === 'default') return this.defaultPolicy;
    const policy: RecordPolicy = {
      name: resolved.name,
      retry: resolved.retry,
      deadAdvancesKey: !deadBlocksKeyOf(ordering.queue, record.type),
      maxAgeMs: resolved.maxAgeMs,
    };
    this.recordPolicies.set(record.type, policy);
    return policy;
  };

  /**
   * Calls the fallback of each message about to be dead-lettered whose type has one, all at
   * once, within what the lease leaves before the settle; a settled one is delivered instead.
   */
  private async fallBack(
    records: readonly ClaimedRecord[],
    judgement: BatchJudgement,
    leaseEnd: number,
    batchId: string,
  ): Promise<BatchJudgement> {
    const lookup = this.parts.fallbacks;
    if (lookup === undefined) return judgement;
    const runs: Promise<readonly [number, FallbackAnswer]>[] = [];
    judgement.verdicts.forEach((verdict, i) => {
      const record = records[i];
      if (verdict.kind !== 'dead' || record === undefined) return;
      const fallback = lookup.fallbackFor(record.type);
      if (fallback === undefined) return;
      runs.push(
        this.runFallback(fallback, record, verdict.error, leaseEnd).then((a) => [i, a] as const),
      );
    });
    if (runs.length === 0) return judgement;
    const answers = new Map(await Promise.all(runs));
    for (const [i, answer] of answers) {
      const record = records[i];
      const verdict = judgement.verdicts[i];
      if (record !== undefined && verdict?.kind === 'dead') {
        this.notice.fallbackRan(batchId, record, verdict.error, answer);
      }
    }
    return withFallbacks(judgement, answers);
  }

  private async runFallback(
    fallback: DeadLetterFallback,
    record: ClaimedRecord,
    error: unknown,
    leaseEnd: number,
  ): Promise<FallbackAnswer> {
    // The settle must still land within the lease: past that, another dispatcher may hold it.
    const budgetMs = Math.max(0, Math.floor(leaseEnd - this.dbCallMs - performance.now()));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<typeof FALLBACK_LATE>((resolve) => {
      timer = setTimeout(() => resolve(FALLBACK_LATE), budgetMs);
    });
    try {
      const answer = await Promise.race([
        Promise.resolve().then(() => fallback.call(record, error)),
        late,
      ]);
      if (answer === FALLBACK_LATE) {
        return {
          kind: 'failed',
          fallback: fallback.name,
          error: new Error(
            `it did not finish within ${budgetMs} ms, before the batch's lease ends`,
          ),
        };
      }
      return { kind: settlesMessage(answer) ? 'settled' : 'declined', fallback: fallback.name };
    } catch (thrown) {
      return { kind: 'failed', fallback: fallback.name, error: thrown };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Asks the sources to look again now (a takeover freed rows, an outage ended). */
  wakeSources(): void {
    if (this.lifecycle.stopping) return;
    for (const listener of this.lookAgain) listener();
  }
}
