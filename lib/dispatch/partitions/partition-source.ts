import { randomUUID } from 'node:crypto';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import { outboxTimerName } from '../../outbox.constants';
import type { OutboxPartitionStore, Settlement } from '../../store/ports/outbox-store.port';
import { IntervalRunner } from '../../workers/interval-runner';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import { EMPTY_BATCH_REPORT, type DeliveryBatch } from '../pipeline/delivery-batch';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { WakeUps } from '../poll/wake-ups';
import { OwnedBacklog, type PickedBatch } from './owned-backlog';
import { PartitionOwnership } from './partition-ownership';
import { ReadFloor } from './read-floor';

/** What the owner loop is doing, for a shutdown's account. */
export type OwnerLoopState = 'idle' | 'reading' | 'waiting';

/**
 * Partitioned delivery (`dispatcher.claims: 'partitions'`, docs/delivery.md "Partitions"): this
 * dispatcher owns a share of the key space's partitions (`PartitionOwnership`) and reads their
 * due rows without locking or writing them, each row once: reads start at the `ReadFloor` and
 * skip what is held in memory; per-key order is kept there (`OwnedBacklog`). Batches are picked
 * from the backlog and go to the pipeline one after another, up to `batchesInFlight` at once,
 * each settled under its partitions' fence as soon as its publish answers, while the next read
 * runs. A sweep from the start of the table, every poll interval and when a retry falls due,
 * finds what the floor left behind. Woken as the poll is: its timer, LISTEN, local commits, and
 * partitions gained.
 */
export class PartitionSource implements DeliverySource {
  readonly delivers = true;
  private readonly runner: IntervalRunner<number>;
  private readonly wakeUps: WakeUps;
  private readonly backlog = new OwnedBacklog();
  private readonly floor = new ReadFloor();
  /** When the next sweep from the start of the table is due (monotonic clock). */
  private sweepAt = 0;
  /** Where the sweep in progress reads next; undefined when none is. */
  private sweepFrom: string | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Whether a read may find more now: a wake-up came, or the last read filled its limit. */
  private moreToRead = true;
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
      busy: (p) => this.backlog.busy(p),
      gained: () => {
        // A gained partition's rows may lie anywhere below the floor.
        this.sweepSoon(0);
      },
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
    this.floor.reset();
    this.sweepAt = 0;
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
    this.moreToRead = true;
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
      this.startSweep();
      for (;;) {
        const found = await this.read();
        const batch = this.pick();
        if (batch.records.length > 0) return this.deliver(batch);
        if (found === 0 || this.sweepFrom === undefined) return EMPTY_BATCH_REPORT;
      }
    });
  }

  stop(): SourceStop {
    this.runner.stop();
    clearTimeout(this.sweepTimer);
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
   * Picks and hands batches to the pipeline, reading while they publish, until nothing is left
   * that may go now; then waits for the batches in flight. Resolves to the messages published.
   */
  private async drainOwned(): Promise<number> {
    const { batchesInFlight, batchSize } = this.context.options.dispatcher;
    // A dispatcher driven by hand (autoStart off) takes its partitions at its first drain.
    if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
    // Each pass looks: its timer, a wake-up or a caller's drain asked for it.
    this.moreToRead = true;
    let published = 0;
    // `batchesInFlight` batches publish at once; as many more may be settling meanwhile, so
    // that the broker is not left idle while a settle runs.
    const running = new Set<Promise<void>>();
    const publishing = new Set<Promise<void>>();
    const track = (batch: PickedBatch): void => {
      let answered: () => void = () => undefined;
      const slot = new Promise<void>((resolve) => (answered = resolve)).then(() => {
        publishing.delete(slot);
      });
      const settled = this.deliver(batch, answered).then((report) => {
        answered();
        published += report.published;
        running.delete(settled);
      });
      running.add(settled);
      publishing.add(slot);
    };
    for (;;) {
      this.runner.clearRequest();
      if (!this.pipeline.open) break;
      if (publishing.size >= batchesInFlight || running.size >= 2 * batchesInFlight) {
        this.loopState = 'waiting';
        await Promise.race([...publishing, ...running]);
        continue;
      }
      const batch = this.pick();
      if (batch.records.length > 0) {
        track(batch);
        continue;
      }
      if (this.sweepFrom === undefined && performance.now() >= this.sweepAt) this.startSweep();
      // Read ahead at most a few batches: what is read waits in memory for its key.
      const room = this.backlog.queued < batchSize * (batchesInFlight + 2);
      if (room && (this.sweepFrom !== undefined || this.moreToRead)) {
        this.loopState = 'reading';
        const found = await this.read();
        if (found > 0 || this.backlog.queued > 0) continue;
      }
      if (running.size === 0 && !this.runner.requested) break;
      if (this.runner.requested) continue;
      this.loopState = 'waiting';
      await Promise.race([...running, this.nextWake()]);
    }
    this.loopState = 'waiting';
    await Promise.all(running);
    return published;
  }

  /** The next batch from the backlog, of the partitions readable now. */
  private pick(): PickedBatch {
    const readable = new Set(this.ownership.readable());
    return this.backlog.pick(this.context.options.dispatcher.batchSize, readable);
  }

  /**
   * A sweep walks the table from its start, in reads of a batch, skipping what is held in
   * memory: it finds the rows the floor left behind (retries fallen due, keys that were held
   * back, rows of partitions just taken). Keys held back are looked at again.
   */
  private startSweep(): void {
    this.sweepFrom = '0';
    this.sweepAt = performance.now() + this.context.options.dispatcher.pollIntervalMs;
    this.backlog.forgetHeld();
  }

  /**
   * One read into the backlog: the sweep's next, or after the floor. Resolves to the rows it
   * found; never throws.
   */
  private async read(): Promise<number> {
    const partitions = this.ownership.readable();
    if (partitions.length === 0) return 0;
    const { batchSize } = this.context.options.dispatcher;
    const sweeping = this.sweepFrom !== undefined;
    const after = this.sweepFrom ?? this.floor.after;
    const read = this.backlog.open();
    try {
      const found = await this.pipeline.watchdog.run('read of owned partitions', () =>
        this.store.readOwned(partitions, batchSize, {
          after,
          ids: this.backlog.idsAfter(after),
          keys: this.backlog.held,
        }),
      );
      this.floor.saw(after, found);
      // A key held back by a row not in memory: that row is backing off or waiting, and a
      // sweep takes the key in again once it is due.
      this.backlog.takeIn(read, found);
      const last = found.records[found.records.length - 1];
      if (sweeping) this.sweepFrom = found.records.length < batchSize ? undefined : last?.id;
      else this.moreToRead = found.records.length >= batchSize;
      return found.records.length;
    } catch (error) {
      this.pipeline.pause(error, 'reading the owned partitions failed');
      return 0;
    } finally {
      this.backlog.close(read);
    }
  }

  /** Sweeps from the start of the table `delayMs` from now (a retry falls due then). */
  private sweepSoon(delayMs: number): void {
    const at = performance.now() + delayMs;
    if (at >= this.sweepAt) return;
    this.sweepAt = at;
    clearTimeout(this.sweepTimer);
    this.sweepTimer = setTimeout(() => this.wake(), Math.max(0, delayMs));
    this.sweepTimer.unref();
  }

  /** One batch through the pipeline, under its partitions' fence; never throws. */
  private deliver(
    { records, partitionOf }: PickedBatch,
    published?: () => void,
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
    // What the settle recorded as delivered (or dead, its key left free); every other row goes
    // back to the table with its key's later rows.
    const delivered = new Set<string>();
    const keyOf = new Map(records.map((r) => [r.id, r.key]));
    const settle = async (settlement: Settlement): Promise<number> => {
      const changed = await this.store.settleOwned(
        options.instanceId,
        fence,
        settlement,
        this.deleteDelivered,
      );
      const expected =
        settlement.delivered.length +
        settlement.retry.length +
        settlement.dead.length +
        settlement.release.length;
      // A settle refused in part (a partition moved on): nothing of it is known to be settled.
      // A dead letter that leaves its key free lets the key's next rows go as a delivery does.
      if (changed === expected) {
        for (const id of settlement.delivered) delivered.add(id);
        const advanced = new Set(settlement.advancedKeys);
        for (const { id } of settlement.dead) {
          const key = keyOf.get(id);
          if (key !== undefined && key !== null && advanced.has(key)) delivered.add(id);
        }
      }
      const due = [...settlement.retry, ...settlement.release].map((r) => r.delayMs);
      if (due.length > 0) this.sweepSoon(Math.min(...due));
      return changed;
    };
    const batch: DeliveryBatch = {
      token: randomUUID(),
      records,
      claimedAt: started,
      leaseEnd,
      fence: signal,
      settle,
      ...(published === undefined ? {} : { published }),
      lease: {
        fence: signal,
        leaseEnd,
        publishBy: leaseEnd - this.pipeline.dbCallMs,
        holds: () => this.ownership.holds(signal),
        stop: () => undefined,
        calling: (returned) => calls.push(returned),
      },
    };
    const delivery = this.pipeline.deliver(batch, 'partition owner', started);
    // Resolves once the backlog knows how the batch ended: a loop that looks again then finds
    // the key's next message free (resolving with the pipeline's answer would race the end).
    const done = delivery
      .then(
        async (report) => {
          await Promise.all(calls);
          return report;
        },
        async () => {
          await Promise.all(calls);
          return EMPTY_BATCH_REPORT;
        },
      )
      .finally(() => {
        this.backlog.end(records, delivered);
        if (delivered.size < records.length)
          this.sweepSoon(this.context.options.dispatcher.pollIntervalMs);
        this.batches.delete(done);
      });
    this.batches.add(done);
    return done;
  }

  private async batchesDone(): Promise<void> {
    while (this.batches.size > 0) await Promise.allSettled([...this.batches]);
  }
}
