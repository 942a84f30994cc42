import { randomUUID } from 'node:crypto';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type { OutboxDeliveryPartitionsPort, Settlement } from '../../store/ports/outbox-store.port';
import { EMPTY_BATCH_REPORT, type DeliveryBatch } from '../pipeline/delivery-batch';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { OwnedBacklog, PickedBatch } from './owned-backlog';
import { PartitionHold } from './partition-hold';
import type { PartitionOwnership } from './partition-ownership';
import { rowsOf, SettleCoalescer } from './settle-coalescer';

/** What the owned delivery needs of the pipeline: a batch's delivery and the database's bounds. */
export type DeliveryPipelinePart = Pick<DeliveryPipeline, 'deliver' | 'watchdog' | 'dbCallMs'>;

/** What an owned delivery is made of. */
export interface OwnedDeliveryParts {
  readonly store: OutboxDeliveryPartitionsPort;
  readonly backlog: OwnedBacklog;
  readonly ownership: PartitionOwnership;
  readonly pipeline: DeliveryPipelinePart;
  readonly options: ResolvedOutboxOptions;
  /** Has the reader sweep the table `delayMs` from now (rows below the floor may go then). */
  readonly sweepSoon: (delayMs: number) => void;
}

/**
 * Hands a picked batch to the pipeline under its partitions' fence (`PartitionHold`), settles it
 * fenced by their generations (written together with other batches' when publishing as a
 * stream, `SettleCoalescer`), and tells the backlog how it ended: what the settle recorded as
 * delivered lets its keys' next rows go; every other row goes back to the table with them.
 */
export class OwnedDelivery {
  private readonly batches = new Set<Promise<unknown>>();
  private readonly deleteDelivered: boolean;
  /** The settles written together (`dispatcher.publishWindow`); undefined: each on its own. */
  private readonly settles: SettleCoalescer | undefined;

  constructor(private readonly parts: OwnedDeliveryParts) {
    const { options, store, ownership } = parts;
    this.deleteDelivered = options.cleaner.deliveredRetentionMs === 0;
    this.settles =
      options.dispatcher.publishWindow === undefined
        ? undefined
        : new SettleCoalescer((fence, settlement, token) =>
            store.settleOwned(ownership.id, fence, settlement, this.deleteDelivered, token),
          );
  }

  /** Resolves once every batch handed over has ended, those handed over meanwhile too. */
  async done(): Promise<void> {
    while (this.batches.size > 0) await Promise.allSettled([...this.batches]);
  }

  /**
   * One batch through the pipeline, under its partitions' fence; never throws. `published` is
   * called once its publish has answered (the owner loop's window).
   */
  deliver(
    { records, partitionOf }: PickedBatch,
    published?: () => void,
  ): Promise<OutboxBatchReport> {
    const { options, ownership, store, pipeline, backlog, sweepSoon } = this.parts;
    const started = performance.now();
    const fence = ownership.fenceOf(records.map((r) => partitionOf.get(r.id) ?? -1));
    const signal = ownership.fence;
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
          ? await store.settleOwned(ownership.id, fence, settlement, this.deleteDelivered, token)
          : await this.settles.settle(fence, settlement);
      // Rows parked behind a key it moved on are pending again, below the floor: read them now.
      if (promoted > 0) sweepSoon(0);
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
      if (due.length > 0) sweepSoon(Math.min(...due));
      return changed;
    };
    const hold = new PartitionHold({
      fence: signal,
      holds: () => ownership.holds(signal),
      leaseEnd,
      dbCallMs: pipeline.dbCallMs,
      settle,
      leaseRows: () => {
        const held = randomUUID();
        const ids = records.map((r) => r.id);
        return pipeline.watchdog
          .run('lease of a deaf publish', () =>
            store.holdOwned(ownership.id, fence, ids, options.dispatcher.leaseMs, held),
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
    const delivery = pipeline.deliver(batch, 'partition owner', started);
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
        backlog.end(records, delivered);
        // The key's later rows left memory with it. After a short answer under a fence still
        // held, the table says at once which of them may go (a row settled already is not read
        // again, so nothing is published twice); otherwise not before the next poll, so that
        // rows whose outcome is unknown are not published again at the loop's pace.
        if (answeredShort && ownership.holds(signal)) sweepSoon(0);
        else if (delivered.size < records.length) sweepSoon(options.dispatcher.pollIntervalMs);
        this.batches.delete(done);
      });
    this.batches.add(done);
    return done;
  }
}
