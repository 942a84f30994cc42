import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type { RenewedLease } from './batch-publish';
import type { ClaimedRecord, Settlement } from '../../store/ports/outbox-store.port';

/**
 * A leased batch, as the pipeline delivers it, whichever source leased it: the claim loop's
 * claim or the log source's lease by id. Its lease end is on this process's monotonic clock:
 * the lease started after `claimedAt`, so this end is never later than the lease's own.
 */
export interface DeliveryBatch {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
  /** When the lease started, on the same clock: a message's latency counts from its age then. */
  readonly claimedAt: number;
  readonly leaseEnd: number;
  /** Aborted when the owner lock the token names is lost: stop publishing (OwnerLiveness). */
  readonly fence?: AbortSignal;
  /**
   * A batch that holds no row lease (partitioned delivery): how its outcome is recorded, fenced
   * by what its source holds instead of by `token`. Renewals and a shutdown's hold, which move
   * row leases, are then not used.
   */
  readonly settle?: (settlement: Settlement) => Promise<number>;
  /** What fences such a batch's publish instead of a row lease (see `HeldLease`). */
  readonly lease?: HeldLease;
  /**
   * Called once the broker has answered and only the settle is left: a source may start its
   * next publish meanwhile.
   */
  readonly published?: () => void;
}

/**
 * A hold on a batch's messages that its source keeps up (a partition's ownership): the publish
 * stops when `fence` aborts or `holds()` turns false, and must end by `publishBy` (monotonic
 * clock).
 */
export interface HeldLease extends RenewedLease {
  readonly fence: AbortSignal;
  readonly leaseEnd: number;
  stop(): void;
  /**
   * A publish call of the batch began; `returned` settles when it returns. The pipeline stops
   * waiting for a call once the fence aborts, but the call may still write its messages: the
   * source keeps them from being read and published again until it has returned.
   */
  calling(returned: Promise<void>): void;
}

/** Which source leased a batch, for the logs and a shutdown's account of what it left. */
export type BatchOrigin = 'claim loop' | 'log reader' | 'partition owner';

/** What a run that found nothing to deliver reports. */
export const EMPTY_BATCH_REPORT: OutboxBatchReport = Object.freeze({
  claimed: 0,
  published: 0,
  retried: 0,
  deadLettered: 0,
  released: 0,
  fenced: 0,
  durationMs: 0,
});
