import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type { BatchHold } from './batch-hold';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';

/**
 * A batch as the pipeline delivers it, whichever source took it (the claim loop's claim, the
 * log source's lease by id, a partition owner's read), with what holds it.
 */
export interface DeliveryBatch {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
  /** When the lease started (monotonic clock): a message's latency counts from its age then. */
  readonly claimedAt: number;
  /**
   * What holds the batch's messages while it publishes and settles (row leases under `token`,
   * or the delivery partitions its keys belong to): its fence, deadlines and settle.
   */
  readonly hold: BatchHold;
  /**
   * Called once the broker has answered and only the settle is left: a source may start its
   * next publish meanwhile.
   */
  readonly published?: () => void;
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
