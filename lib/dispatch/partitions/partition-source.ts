import { randomUUID } from 'node:crypto';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import { outboxTimerName } from '../../outbox.constants';
import type { OutboxPartitionStore } from '../../store/ports/outbox-store.port';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';
import { IntervalRunner } from '../../workers/interval-runner';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import { EMPTY_BATCH_REPORT, type DeliveryBatch } from '../pipeline/delivery-batch';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { WakeUps } from '../poll/wake-ups';
import { KeyLedger } from './key-ledger';
import { PartitionOwnership } from './partition-ownership';

/** What the owner loop is doing, for a shutdown's account. */
export type OwnerLoopState = 'idle' | 'reading' | 'waiting';

/**
 * Partitioned delivery (`dispatcher.claims: 'partitions'`, docs/delivery.md "Partitions"): this
 * dispatcher owns a share of the key space's partitions (`PartitionOwnership`) and reads their
 * due rows without locking or writing them; per-key order is kept in memory (`KeyLedger`), and
 * batches go to the pipeline one after another, up to `batchesInFlight` at once, each settled
 * under its partitions' fence as soon as its publish answers. Woken as the poll is: its timer,
 * LISTEN, local commits, and partitions gained.
 */
export class PartitionSource implements DeliverySource {
  readonly delivers = true;
  private readonly runner: IntervalRunner<number>;
  private readonly wakeUps: WakeUps;
  private readonly ledger = new KeyLedger();
  private readonly ownership: PartitionOwnership;
  private readonly store: OutboxPartitionStore;
  private readonly batches = new Set<Promise<unknown>>();
  private readonly deleteDelivered: boolean;
  private unlisten: (() => Promise<void>) | undefined;
  private runningSince: number | undefined;
  private lastFinishedAt: number | undefined;
  private loopState: OwnerLoopState = 'idle';
  private wakeUp: Promise<void> | undefined;
  private woken: () => void = () => undefined;

  constructor(
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
  ) {
    const { options, store, registry, log } = context;
    if (store.partitions === undefined) {
      throw new Error('partitioned delivery needs a store with partitions (schema step 9)');
    }
    this.store = store.partitions;
    this.deleteDelivered = options.cleaner.deliveredRetentionMs === 0;
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'dispatcher'),
      registry,
      log,
      () => this.timedDrain(),
    );
    this.wakeUps = new WakeUps(() => this.wake(), options.dispatcher.pollIntervalMs);
    this.ownership = new PartitionOwnership({
      store: this.store,
      instance: options.instanceId,
      timeoutMs: options.dispatcher.partitionTimeoutMs,
      log,
      busy: (p) => this.ledger.busy(p),
      gained: () => this.wake(),
    });
    pipeline.onLookAgain(() => this.wake());
  }

  get description(): string {
    const { pollIntervalMs, partitionTimeoutMs } = this.context.options.dispatcher;
    return `partitions of the key space (owners time out after ${partitionTimeoutMs} ms), polling every ${pollIntervalMs} ms`;
  }

  get drainTimes(): DrainTimes {
    return { runningSince: this.runningSince, lastFinishedAt: this.lastFinishedAt };
  }

  prepare(): Promise<void> {
    return Promise.resolve();
  }

  async start(): Promise<void> {
    const { store, commits, log, options } = this.context;
    await this.ownership.start();
    this.runner.start(options.dispatcher.pollIntervalMs);
    commits.attach(() => this.wake());
    if (options.dispatcher.listen && store.listen !== undefined && this.unlisten === undefined) {
      try {
        this.unlisten = await store.listen(() => this.wake());
      } catch (error) {
        log.warn(`LISTEN unavailable, polling only: ${describeError(error)}`);
      }
    }
    this.wake();
  }

  wake(): void {
    if (this.pipeline.lifecycle.stopping) return;
    this.wakeUps.woke();
    this.runner.request();
    this.woken();
  }

  /** Resolves at the next wake-up: a loop waiting on its batches reads again for new rows. */
  private nextWake(): Promise<void> {
    this.wakeUp ??= new Promise<void>((resolve) => {
      this.woken = () => {
        this.wakeUp = undefined;
        this.woken = () => undefined;
        resolve();
      };
    });
    return this.wakeUp;
  }

  drain(): Promise<number> {
    return this.runner.run();
  }

  /** One read and one batch of it, delivered and settled. */
  runOnce(): Promise<OutboxBatchReport> {
    return this.runner.exclusive(async () => {
      if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
      const batch = await this.nextBatch();
      if (batch === undefined || batch === 'skipped') return EMPTY_BATCH_REPORT;
      return this.deliver(batch.records, batch.partitionOf);
    });
  }

  stop(): SourceStop {
    this.runner.stop();
    this.wakeUps.cancel();
    this.context.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    // The partitions are kept (beating) until every batch has settled, then handed back so
    // that the next owners take them at once rather than after the heartbeat timeout.
    const idle = this.runner.idle().then(() => this.batchesDone());
    return {
      idle,
      closing: [
        ['the delivery partitions', idle.then(() => this.ownership.stop())] as const,
        ...(unlisten === undefined
          ? []
          : [['the LISTEN connection', unlisten().catch(() => undefined)] as const]),
      ],
    };
  }

  stillRunning(idleDone: boolean): string[] {
    if (idleDone || !this.runner.running || this.loopState === 'idle') return [];
    if (this.loopState === 'waiting' && this.pipeline.busy) return [];
    return [`the partition owner's loop (${this.loopState})`];
  }

  lag(): Promise<null> {
    return Promise.resolve(null);
  }

  private async timedDrain(): Promise<number> {
    this.runningSince = Date.now();
    try {
      return await this.drainOwned();
    } finally {
      this.runningSince = undefined;
      this.lastFinishedAt = Date.now();
      this.loopState = 'idle';
    }
  }

  /**
   * Reads and hands batches to the pipeline until nothing due is left that may go now; then
   * waits for the batches in flight. Resolves to the messages published.
   */
  private async drainOwned(): Promise<number> {
    const { batchesInFlight } = this.context.options.dispatcher;
    // A dispatcher driven by hand (autoStart off) takes its partitions at its first drain.
    if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
    this.ledger.forgetHeld();
    let published = 0;
    const running = new Set<Promise<number>>();
    const track = (p: Promise<number>): void => {
      const settled = p.then((n) => {
        published += n;
        running.delete(settled);
        return n;
      });
      running.add(settled);
    };
    for (;;) {
      this.runner.clearRequest();
      if (!this.pipeline.open) break;
      if (running.size >= batchesInFlight) {
        this.loopState = 'waiting';
        await Promise.race(running);
        continue;
      }
      this.loopState = 'reading';
      const next = await this.nextBatch();
      if (next === 'skipped') continue;
      if (next === undefined) {
        // Nothing may go now: what is in flight may free keys, or a wake-up came meanwhile.
        if (running.size === 0 && !this.runner.requested) break;
        if (running.size === 0 || this.runner.requested) continue;
        this.loopState = 'waiting';
        await Promise.race([...running, this.nextWake()]);
        continue;
      }
      track(this.deliver(next.records, next.partitionOf).then((report) => report.published));
    }
    this.loopState = 'waiting';
    await Promise.all(running);
    return published;
  }

  /**
   * The next batch that may go now; `'skipped'` when the read found only rows held back or
   * passed over (read again: held keys are skipped now, a freed key is free), undefined when it
   * found none that may go.
   */
  private async nextBatch(): Promise<
    { records: ClaimedRecord[]; partitionOf: ReadonlyMap<string, number> } | 'skipped' | undefined
  > {
    const partitions = this.ownership.readable();
    if (partitions.length === 0) return undefined;
    const { batchSize } = this.context.options.dispatcher;
    const read = this.ledger.open();
    try {
      const found = await this.pipeline.watchdog.run('read of owned partitions', () =>
        this.store.readOwned(partitions, batchSize, this.ledger.skip()),
      );
      const { chosen: records, passedOver } = this.ledger.select(
        read,
        found.records,
        found.held,
        batchSize,
      );
      if (records.length === 0) return passedOver ? 'skipped' : undefined;
      return { records, partitionOf: found.partitions };
    } catch (error) {
      this.pipeline.pause(error, 'reading the owned partitions failed');
      return undefined;
    } finally {
      this.ledger.close(read);
    }
  }

  /** One batch through the pipeline, under its partitions' fence; never throws. */
  private deliver(
    records: readonly ClaimedRecord[],
    partitionOf: ReadonlyMap<string, number>,
  ): Promise<OutboxBatchReport> {
    const { options } = this.context;
    const started = performance.now();
    const fence = this.ownership.fenceOf(records.map((r) => partitionOf.get(r.id) ?? -1));
    const signal = this.ownership.fence;
    const leaseEnd = started + options.dispatcher.leaseMs;
    // Publish calls still running after the pipeline stopped waiting for them (a lapse aborted
    // them): their messages stay taken until they return, or this dispatcher, once it holds
    // the partitions again, would read and publish them beside the running call.
    const calls: Promise<void>[] = [];
    const batch: DeliveryBatch = {
      token: randomUUID(),
      records,
      claimedAt: started,
      leaseEnd,
      fence: signal,
      settle: (settlement) =>
        this.store.settleOwned(options.instanceId, fence, settlement, this.deleteDelivered),
      lease: {
        fence: signal,
        leaseEnd,
        publishBy: leaseEnd - this.pipeline.dbCallMs,
        holds: () => this.ownership.holds(signal),
        stop: () => undefined,
        calling: (returned) => calls.push(returned),
      },
    };
    this.ledger.take(records, partitionOf);
    const delivery = this.pipeline.deliver(batch, 'partition owner', started);
    const done = delivery
      .then(
        () => Promise.all(calls),
        () => Promise.all(calls),
      )
      .finally(() => {
        this.ledger.release(records, partitionOf);
        this.batches.delete(done);
      });
    this.batches.add(done);
    return delivery;
  }

  private async batchesDone(): Promise<void> {
    while (this.batches.size > 0) await Promise.allSettled([...this.batches]);
  }
}
