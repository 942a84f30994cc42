import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import { outboxTimerName } from '../../outbox.constants';
import { IntervalRunner } from '../../workers/interval-runner';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { WakeUps } from '../wake-ups';
import { OwnedBacklog } from './owned-backlog';
import { OwnedDelivery } from './owned-delivery';
import { OwnedReader } from './owned-reader';
import { OwnerLoop } from './owner-loop';
import { MemberLock } from './member-lock';
import { PartitionOwnership } from './partition-ownership';

/** How a partition owner learns of new rows: its own timer and LISTEN, or the log's reader. */
export interface PartitionFeed {
  /** How often the owner loop runs unwoken, and sweeps its partitions from the table's start. */
  readonly intervalMs: number;
  /** Whether writers' NOTIFY wakes it (`dispatcher.listen`); a log reader wakes it instead. */
  readonly listen: boolean;
  /** This process's share of the partitions (see `OwnershipParts.share`); default an even spread. */
  readonly share?: (self: string, live: readonly string[]) => readonly number[];
  /** What the start's line says of it. */
  readonly describe: () => string;
}

/**
 * Partitioned delivery (`dispatcher.claims: 'partitions'`, docs/delivery.md "Partitions"): this
 * dispatcher owns a share of the key space's partitions (`PartitionOwnership`) and reads their
 * due rows without locking or writing them, each row once (`OwnedReader`); per-key order is kept
 * in memory (`OwnedBacklog`). The owner loop (`OwnerLoop`) picks batches and hands them to the
 * pipeline, each settled under its partitions' fence as soon as its publish answers
 * (`OwnedDelivery`), while the next read runs. This face runs the loop on a timer of its own,
 * woken as the poll is: its timer, LISTEN, local commits, and partitions gained.
 */
export class PartitionSource implements DeliverySource {
  readonly delivers = true;
  readonly unsettled =
    "the messages of a batch not settled are read again by their partitions' next owner once this dispatcher's heartbeat runs out";
  private readonly runner: IntervalRunner<number>;
  private readonly wakeUps: WakeUps;
  private readonly ownership: PartitionOwnership;
  private readonly reader: OwnedReader;
  private readonly delivery: OwnedDelivery;
  private readonly loop: OwnerLoop;
  private unlisten: (() => Promise<void>) | undefined;
  private runningSince: number | undefined;
  private lastFinishedAt: number | undefined;
  private wakeUp: Promise<void> | undefined;
  private woken: () => void = () => undefined;

  private readonly feed: PartitionFeed;

  constructor(
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
    feed?: PartitionFeed,
  ) {
    const { pollIntervalMs, listen } = context.options.dispatcher;
    this.feed = feed ?? {
      intervalMs: pollIntervalMs,
      listen,
      describe: () => `polling every ${pollIntervalMs} ms`,
    };
    const { options, store, registry, log } = context;
    const partitions = store.deliveryPartitions;
    if (partitions === undefined) {
      throw new Error('partitioned delivery needs a store with partitions (schema step 9)');
    }
    const { ordered, maxRun } = options.ordering.queue;
    const backlog = new OwnedBacklog({ ordered, maxRun });
    const lock = memberLockOf(context, () => this.ownership);
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'dispatcher'),
      registry,
      log,
      () => this.timedDrain(),
    );
    this.wakeUps = new WakeUps(() => this.wake(), this.feed.intervalMs);
    this.ownership = new PartitionOwnership({
      store: partitions,
      label: options.instanceId,
      timeoutMs: options.dispatcher.partitionTimeoutMs,
      log,
      busy: (p) => backlog.busy(p),
      gained: () => this.reader.gained(),
      ...(this.feed.share !== undefined && { share: this.feed.share }),
      ...(lock !== undefined && { lock }),
    });
    this.reader = new OwnedReader({
      store: partitions,
      park: (keys) => store.park(keys),
      backlog,
      ownership: this.ownership,
      pipeline,
      options,
      log,
      wake: () => this.wake(),
      sweepIntervalMs: this.feed.intervalMs,
    });
    this.delivery = new OwnedDelivery({
      store: partitions,
      backlog,
      ownership: this.ownership,
      pipeline,
      options,
      sweepSoon: (delayMs) => this.reader.sweepSoon(delayMs),
    });
    this.loop = new OwnerLoop({
      backlog,
      ownership: this.ownership,
      reader: this.reader,
      delivery: this.delivery,
      pipeline,
      runner: this.runner,
      options,
      nextWake: () => this.nextWake(),
    });
    pipeline.onLookAgain(() => this.wake());
  }

  get description(): string {
    const { partitionTimeoutMs } = this.context.options.dispatcher;
    const { slice, window } = this.loop.publishing;
    const stream =
      window === undefined
        ? ''
        : `, publishing as a stream (up to ${window} unconfirmed, in slices of ${slice})`;
    return `partitions of the key space (owners time out after ${partitionTimeoutMs} ms), ${this.feed.describe()}${stream}`;
  }

  get drainTimes(): DrainTimes {
    return { runningSince: this.runningSince, lastFinishedAt: this.lastFinishedAt };
  }

  prepare(): Promise<void> {
    return Promise.resolve();
  }

  async start(): Promise<void> {
    const { store, commits, log } = this.context;
    this.reader.reset();
    await this.ownership.start();
    this.runner.start(this.feed.intervalMs);
    commits.attach(() => this.wake());
    if (this.feed.listen && store.listen !== undefined && this.unlisten === undefined) {
      try {
        // Others' joins and hand-overs are heard too: this process beats at once for them.
        this.unlisten = await store.listen(
          () => this.wake(),
          () => this.ownership.beatSoon(),
        );
      } catch (error) {
        log.warn(`LISTEN unavailable, polling only: ${describeError(error)}`);
      }
    }
    this.wake();
  }

  wake(): void {
    if (this.pipeline.lifecycle.stopping) return;
    this.reader.woke();
    this.wakeUps.woke();
    this.runner.request();
    this.woken();
  }

  /** Sweeps the owned partitions from the table's start `delayMs` from now (rows fall due then). */
  sweepSoon(delayMs: number): void {
    this.reader.sweepSoon(delayMs);
  }

  /**
   * The log named rows as committed, the lowest of them `id`: the owner reads now, from it if
   * its read floor has passed it.
   */
  committed(id: string): void {
    if (this.pipeline.lifecycle.stopping) return;
    this.reader.named(id);
    this.wake();
  }

  /** This process's share changed (see `PartitionFeed.share`): it is worked out again now. */
  shareChanged(): void {
    this.ownership.beatSoon();
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

  /**
   * Runs until nothing is due, a sweep included: a row below the read floor (a dead letter
   * retried, a message re-driven or promoted since the last sweep) is due too, and the periodic
   * sweep may be a poll interval away.
   */
  drain(): Promise<number> {
    this.reader.sweepSoon(0);
    return this.runner.run();
  }

  /** One read and one batch of it, delivered and settled. */
  runOnce(): Promise<OutboxBatchReport> {
    return this.runner.exclusive(async () => {
      if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
      return this.loop.once();
    });
  }

  stop(): SourceStop {
    this.runner.stop();
    this.reader.stop();
    this.wakeUps.cancel();
    this.context.commits.detach();
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    // The partitions are kept (beating) until every batch has settled, then handed back so
    // that the next owners take them at once rather than after the heartbeat timeout.
    const idle = this.runner.idle().then(() => this.delivery.done());
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
    const state = this.loop.state;
    if (idleDone || !this.runner.running || state === 'idle') return [];
    if (state === 'waiting' && this.pipeline.busy) return [];
    return [`the partition owner's loop (${state})`];
  }

  lag(): Promise<null> {
    return Promise.resolve(null);
  }

  private async timedDrain(): Promise<number> {
    this.runningSince = Date.now();
    try {
      // A dispatcher driven by hand (autoStart off) takes its partitions at its first drain.
      if (!this.pipeline.lifecycle.stopping) await this.ownership.start();
      return await this.loop.run();
    } finally {
      this.runningSince = undefined;
      this.lastFinishedAt = Date.now();
    }
  }
}

/**
 * The owner lock of fast takeover (`MemberLock`), where the options and the database allow it:
 * `dispatcher.ownerLock`, a port with sessions, a store with owner locks and the look at others.
 */
function memberLockOf(
  context: SourceContext,
  ownership: () => PartitionOwnership,
): MemberLock | undefined {
  const { options, store, sql, log } = context;
  const session = sql?.session?.bind(sql);
  const lock = store.lockOwner?.bind(store);
  const unlock = store.unlockOwner?.bind(store);
  const partitions = store.deliveryPartitions;
  const endGone = partitions?.endGoneMembers?.bind(partitions);
  if (!options.dispatcher.ownerLock) return undefined;
  if (session === undefined || lock === undefined || unlock === undefined) return undefined;
  if (endGone === undefined) return undefined;
  return new MemberLock({
    session,
    lock,
    unlock,
    endGone: (graceMs) => endGone(ownership().id, graceMs),
    log,
    lost: () => ownership().lockLost(),
    answered: () => ownership().beatSoon(),
    gone: (afterMs) => ownership().beatIn(afterMs),
  });
}
