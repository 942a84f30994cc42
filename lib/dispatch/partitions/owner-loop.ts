import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type { IntervalRunner } from '../../workers/interval-runner';
import { EMPTY_BATCH_REPORT } from '../pipeline/delivery-batch';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { OwnedBacklog, PickedBatch } from './owned-backlog';
import type { OwnedDelivery } from './owned-delivery';
import type { OwnedReader } from './owned-reader';
import type { PartitionOwnership } from './partition-ownership';

/** What the owner loop is doing, for a shutdown's account. */
export type OwnerLoopState = 'idle' | 'reading' | 'waiting';

/** What the owner loop is made of. */
export interface OwnerLoopParts {
  readonly backlog: OwnedBacklog;
  readonly ownership: PartitionOwnership;
  readonly reader: OwnedReader;
  readonly delivery: OwnedDelivery;
  /** Whether the pipeline takes batches now. */
  readonly pipeline: Pick<DeliveryPipeline, 'open'>;
  /** The source's runner: a drain asked for while this one runs. */
  readonly runner: Pick<IntervalRunner<number>, 'clearRequest' | 'requested'>;
  readonly options: ResolvedOutboxOptions;
  /** Resolves at the next wake-up. */
  readonly nextWake: () => Promise<void>;
}

/** How the owner loop hands messages to the pipeline (see `OwnerLoop.publishing`). */
export interface Publishing {
  readonly slice: number;
  readonly slicesInFlight: number;
  readonly window: number | undefined;
}

/**
 * The partition owner's loop: picks batches from the backlog and hands them to the pipeline one
 * after another, up to `batchesInFlight` at once (or as a stream, while fewer than the window's
 * messages are unanswered), reading while they publish, until nothing is left that may go now.
 */
export class OwnerLoop {
  private current: OwnerLoopState = 'idle';

  constructor(private readonly parts: OwnerLoopParts) {}

  get state(): OwnerLoopState {
    return this.current;
  }

  /**
   * How the loop hands messages to the pipeline. Batch by batch: `batchesInFlight` batches of
   * `batchSize` publish at once. As a stream (`publishWindow`): slices of a quarter of the window
   * (at most `batchSize`), as many as the window holds, so that the confirms of one slice make
   * room for the next while the rest are still out.
   */
  get publishing(): Publishing {
    const { batchSize, batchesInFlight, publishWindow } = this.parts.options.dispatcher;
    if (publishWindow === undefined) {
      return { slice: batchSize, slicesInFlight: batchesInFlight, window: undefined };
    }
    const slice = Math.max(1, Math.min(batchSize, Math.ceil(publishWindow / 4)));
    return { slice, slicesInFlight: Math.ceil(publishWindow / slice), window: publishWindow };
  }

  /** One read and one batch of it, delivered and settled (`runOnce`). */
  async once(): Promise<OutboxBatchReport> {
    const { reader, delivery } = this.parts;
    reader.startSweep();
    for (;;) {
      const found = await reader.read();
      const batch = this.pick();
      if (batch.records.length > 0) return delivery.deliver(batch);
      if (found === 0 || !reader.sweeping) return EMPTY_BATCH_REPORT;
    }
  }

  /** One drain; resolves to the messages published. */
  async run(): Promise<number> {
    try {
      return await this.drain();
    } finally {
      this.current = 'idle';
    }
  }

  private async drain(): Promise<number> {
    const { reader, delivery, backlog, pipeline, runner, nextWake } = this.parts;
    const { batchSize } = this.parts.options.dispatcher;
    const { slice, slicesInFlight, window } = this.publishing;
    // Each pass looks: its timer, a wake-up or a caller's drain asked for it.
    reader.woke();
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
      const settled = delivery.deliver(batch, answered).then((report) => {
        answered();
        published += report.published;
        running.delete(settled);
      });
      running.add(settled);
      publishing.add(slot);
    };
    for (;;) {
      runner.clearRequest();
      if (!pipeline.open) break;
      // As a stream: room for a whole slice, so that a nearly full window does not send scraps.
      const full =
        window === undefined ? publishing.size >= slicesInFlight : unanswered + slice > window;
      if (full || running.size >= 2 * slicesInFlight) {
        this.current = 'waiting';
        await Promise.race([...publishing, ...running]);
        continue;
      }
      const batch = this.pick(slice);
      if (batch.records.length > 0) {
        track(batch);
        continue;
      }
      await reader.sweepIfDue();
      // Read ahead at most a few batches: what is read waits in memory for its key.
      const room = backlog.queued < slice * slicesInFlight + 2 * batchSize;
      if (room && reader.wantsRead) {
        this.current = 'reading';
        const found = await reader.read();
        // Rows queued behind a key's run in flight cannot go before it ends: looking again now
        // would read the table in a loop (or, with no partition readable, spin without I/O).
        if (found > 0 || backlog.pickable) continue;
      }
      if (running.size === 0 && !runner.requested) break;
      if (runner.requested) continue;
      this.current = 'waiting';
      await Promise.race([...running, nextWake()]);
    }
    this.current = 'waiting';
    await Promise.all(running);
    return published;
  }

  /** The next batch from the backlog, of the partitions readable now. */
  private pick(limit = this.parts.options.dispatcher.batchSize): PickedBatch {
    return this.parts.backlog.pick(limit, this.parts.ownership.reader());
  }
}
