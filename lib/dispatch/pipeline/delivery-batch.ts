import type { ClaimedRecord } from '../../store/ports/outbox-store.port';

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
}

/** Which source leased a batch, for the logs and a shutdown's account of what it left. */
export type BatchOrigin = 'claim loop' | 'log reader';
