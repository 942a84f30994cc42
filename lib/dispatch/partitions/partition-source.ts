import { randomUUID } from 'node:crypto';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import { outboxTimerName } from '../../outbox.constants';
import type { OutboxPartitionStore, Settlement } from '../../store/ports/outbox-store.port';
import { IntervalRunner } from '../../workers/interval-runner';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import { EMPTY_BATCH_REPORT, type DeliveryBatch } from '../pipeline/delivery-batch';
import { PartitionHold } from './partition-hold';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { WakeUps } from '../wake-ups';
import { within } from '../sleep';
import { OwnedBacklog, type PickedBatch } from './owned-backlog';
import { PartitionOwnership } from './partition-ownership';
import { ReadFloor } from './read-floor';
import { rowsOf, SettleCoalescer } from './settle-coalescer';

/** Waiting rows promoted per look, as the unlocker does. */
const ORPHANS_PER_LOOK = 1_000;
/**
 * How many rows parked since the table's statistics were last refreshed make the owner refresh
 * them (ANALYZE), and how often at most: autovacuum does the same once the park's updates pass
 * its threshold, a minute or more later, and until then a parked backlog counted pending made
 * every sweep a walk of the whole table (bench P9P: other keys' p99 13-26 x).
 */
const ANALYSE_AFTER_PARKED = 10_000;
const ANALYSE_EVERY_MS = 60_000;

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
  readonly unsettled =
    "the messages of a batch not settled are read again by their partitions' next owner once this dispatcher's heartbeat runs out";
  private readonly runner: IntervalRunner<number>;
  private readonly wakeUps: WakeUps;
  private readonly backlog: OwnedBacklog;
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
  /** When the next look for orphaned waiting rows is due (monotonic clock). */
  private orphansAt = 0;
  /** Rows parked since the statistics were last refreshed, and when they may be again. */
  private parkedSinceAnalyse = 0;
  private analyseAt = 0;
  /** The settles written together (`dispatcher.publishWindow`); undefined: each on its own. */
  private readonly settles: SettleCoalescer | undefined;

  constructor(
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
  ) {
    const { options, store, registry, log } = context;
    if (store.partitions === undefined) {
      throw new Error('partitioned delivery needs a store with partitions (schema step 9)');
    }
    this.store = store.partitions;
    const { ordered, maxRun } = options.ordering.queue;
    this.backlog = new OwnedBacklog({ ordered, maxRun });
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
      label: options.instanceId,
      timeoutMs: options.dispatcher.partitionTimeoutMs,
      log,
      busy: (p) => this.backlog.busy(p),
      gained: () => {
        // A gained partition's rows may lie anywhere below the floor.
        this.sweepSoon(0);
      },
    });
    pipeline.onLookAgain(() => this.wake());
    this.settles =
      options.dispatcher.publishWindow === undefined
        ? undefined
        : new SettleCoalescer((fence, settlement, token) =>
            this.store.settleOwned(
              this.ownership.id,
              fence,
              settlement,
              this.deleteDelivered,
              token,
            ),
          );
  }

  get description(): string {
    const { pollIntervalMs, partitionTimeoutMs } = this.context.options.dispatcher;
    const { slice, window } = this.publishing();
    const stream =
      window === undefined
        ? ''
        : `, publishing as a stream (up to ${window} unconfirmed, in slices of ${slice})`;
    return `partitions of the key space (owners time out after ${partitionTimeoutMs} ms), polling every ${pollIntervalMs} ms${stream}`;
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
        [
          'the delivery partitions (held until every publish call of theirs has returned)',
          idle.then(() => this.ownership.stop()),
        ] as const,
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
    const { batchSize } = this.context.options.dispatcher;
    const { slice, slicesInFlight, window } = this.publishing();
    // A dispatcher driven by hand (autoStart off) takes its partitions at its first drain.
    if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
    // Each pass looks: its timer, a wake-up or a caller's drain asked for it.
    this.moreToRead = true;
    let published = 0;
    // `batchesInFlight` batches publish at once; as many more may be settling meanwhile, so
    // that the broker is not left idle while a settle runs.
    const running = new Set<Promise<void>>();
    const publishing = new Set<Promise<void>>();
    // Messages handed to the publisher and not answered yet, across batches.
    let unanswered = 0;
    const track = (batch: PickedBatch): void => {
      let answered: () => void = () => undefined;
      unanswered += batch.records.length;
      const slot = new Promise<void>((resolve) => (answered = resolve)).then(() => {
        unanswered -= batch.records.length;
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
      // As a stream: room for a whole slice, so that a nearly full window does not send scraps.
      const full =
        window === undefined ? publishing.size >= slicesInFlight : unanswered + slice > window;
      if (full || running.size >= 2 * slicesInFlight) {
        this.loopState = 'waiting';
        await Promise.race([...publishing, ...running]);
        continue;
      }
      const batch = this.pick(slice);
      if (batch.records.length > 0) {
        track(batch);
        continue;
      }
      if (this.sweepFrom === undefined && performance.now() >= this.sweepAt) {
        await this.promoteOrphans();
        this.startSweep();
      }
      // Read ahead at most a few batches: what is read waits in memory for its key.
      const room = this.backlog.queued < slice * slicesInFlight + 2 * batchSize;
      if (room && (this.sweepFrom !== undefined || this.moreToRead)) {
        this.loopState = 'reading';
        const found = await this.read();
        // Rows queued behind a key's run in flight cannot go before it ends: looking again now
        // would read the table in a loop (or, with no partition readable, spin without I/O).
        if (found > 0 || this.backlog.pickable) continue;
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

  /**
   * Every `unlocker.intervalMs`, before a sweep: promotes waiting rows that nothing holds back
   * any more (this mode starts no unlocker), so that the sweep reads them.
   */
  private async promoteOrphans(): Promise<void> {
    const now = performance.now();
    if (now < this.orphansAt) return;
    const { options, log } = this.context;
    this.orphansAt = now + options.unlocker.intervalMs;
    try {
      const promoted = await this.pipeline.watchdog.run('promotion of orphaned messages', () =>
        this.store.promoteOrphans(ORPHANS_PER_LOOK),
      );
      if (promoted > 0) {
        log.warn(`Promoted ${promoted} waiting message(s) that nothing was holding back`);
      }
    } catch (error) {
      // Only a safety net: the next look tries again.
      log.warn(
        `Promoting waiting messages that nothing holds back failed: ${describeError(error)}`,
      );
    }
  }

  /**
   * How the owner loop hands messages to the pipeline. Batch by batch: `batchesInFlight` batches
   * of `batchSize` publish at once. As a stream (`publishWindow`): slices of a quarter of the
   * window (at most `batchSize`), as many as the window holds, so that the confirms of one slice
   * make room for the next while the rest are still out.
   */
  private publishing(): { slice: number; slicesInFlight: number; window: number | undefined } {
    const { batchSize, batchesInFlight, publishWindow } = this.context.options.dispatcher;
    if (publishWindow === undefined) {
      return { slice: batchSize, slicesInFlight: batchesInFlight, window: undefined };
    }
    const slice = Math.max(1, Math.min(batchSize, Math.ceil(publishWindow / 4)));
    return { slice, slicesInFlight: Math.ceil(publishWindow / slice), window: publishWindow };
  }

  /** The next batch from the backlog, of the partitions readable now. */
  private pick(limit = this.context.options.dispatcher.batchSize): PickedBatch {
    return this.backlog.pick(limit, this.ownership.reader());
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
      // A key held back by a row not in memory (backing off, dead under 'block', parked): its
      // rows are parked, out of every later read, until a settle moves the key on and gives
      // them back.
      const held = this.backlog.takeIn(read, found);
      if (held.length > 0) {
        const parked = await this.pipeline.watchdog.run('park of held keys', () =>
          this.context.store.park(held),
        );
        await this.afterPark(parked);
      }
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

  /**
   * After a park: refreshes the table's statistics once many rows were parked (see
   * ANALYSE_AFTER_PARKED). Only a plan's matter, so not through the watchdog: an ANALYZE that
   * runs long on a big table must not read as a stuck database and pause delivery. The read
   * waits for it at most one database call's time; a failure is one WARN and delivery goes on.
   */
  private async afterPark(parked: number): Promise<void> {
    this.parkedSinceAnalyse += parked;
    const now = performance.now();
    if (this.parkedSinceAnalyse < ANALYSE_AFTER_PARKED || now < this.analyseAt) return;
    const { log } = this.context;
    const rows = this.parkedSinceAnalyse;
    this.parkedSinceAnalyse = 0;
    this.analyseAt = now + ANALYSE_EVERY_MS;
    const refresh = this.store.refreshStatistics().then(
      () => true,
      (error: unknown) => {
        log.warn(
          `Refreshing the table's statistics after parking ${rows} message(s) failed (reads may be slow until autovacuum analyses it): ${describeError(error)}`,
        );
        return false;
      },
    );
    const done = await within(refresh, this.pipeline.dbCallMs);
    if (done?.value === true) {
      log.log(
        `Parked ${rows} message(s) held back behind their keys' heads; refreshed the table's statistics so that reads pass them over`,
      );
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
    // What the settle recorded as delivered (or dead, its key left free); every other row goes
    // back to the table with its key's later rows.
    const delivered = new Set<string>();
    // A settle that changed fewer rows than it carried (its answer lost and the retry finding
    // them settled, or a shared statement refused in part): the table knows how they ended.
    let answeredShort = false;
    const token = randomUUID();
    const settle = async (settlement: Settlement): Promise<number> => {
      const { changed, promoted } =
        this.settles === undefined
          ? await this.store.settleOwned(
              this.ownership.id,
              fence,
              settlement,
              this.deleteDelivered,
              token,
            )
          : await this.settles.settle(fence, settlement);
      // Rows parked behind a key it moved on are pending again, below the floor: read them now.
      if (promoted > 0) this.sweepSoon(0);
      const expected = rowsOf(settlement);
      // A settle refused in part (a partition moved on): nothing of it is known to be settled.
      // A dead letter whose own policy leaves its key free lets the key's next rows go as a
      // delivery does; never because another row of its key advanced in the same batch.
      if (changed === expected) {
        for (const id of settlement.delivered) delivered.add(id);
        for (const { id, advancesKey } of settlement.dead)
          if (advancesKey === true) delivered.add(id);
      } else answeredShort = true;
      const due = [...settlement.retry, ...settlement.release].map((r) => r.delayMs);
      if (due.length > 0) this.sweepSoon(Math.min(...due));
      return changed;
    };
    const hold = new PartitionHold({
      fence: signal,
      holds: () => this.ownership.holds(signal),
      leaseEnd,
      dbCallMs: this.pipeline.dbCallMs,
      settle,
      leaseRows: () => {
        const held = randomUUID();
        const ids = records.map((r) => r.id);
        return this.pipeline.watchdog
          .run('lease of a deaf publish', () =>
            this.store.holdOwned(this.ownership.id, fence, ids, options.dispatcher.leaseMs, held),
          )
          .then(
            (leased) => (leased > 0 ? held : undefined),
            () => undefined,
          );
      },
      leaseMs: options.dispatcher.leaseMs,
    });
    // Publish calls still running after the pipeline stopped waiting for them (a lapse aborted
    // them): their messages stay taken until they return, or this dispatcher, once it holds
    // the partitions again, would read and publish them beside the running call.
    const calls = hold.calls;
    const batch: DeliveryBatch = {
      token,
      records,
      claimedAt: started,
      hold,
      ...(published === undefined ? {} : { published }),
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
        // The key's later rows left memory with it. After a short answer under a fence still
        // held, the table says at once which of them may go (a row settled already is not read
        // again, so nothing is published twice); otherwise not before the next poll, so that
        // rows whose outcome is unknown are not published again at the loop's pace.
        if (answeredShort && this.ownership.holds(signal)) this.sweepSoon(0);
        else if (delivered.size < records.length)
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
