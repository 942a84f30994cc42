import type { OutboxDeliveryPort, Settlement } from '../../store/ports/outbox-store.port';
import type { BatchHold } from '../pipeline/batch-hold';
import type { BatchLease, BeginLease } from './lease-renewal';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';

/** What every row-lease hold shares: made once by the pipeline. */
export interface LeaseHoldParts {
  readonly store: Pick<OutboxDeliveryPort, 'settle'>;
  /** Starts renewing a batch's lease while it publishes; undefined when leases are not renewed. */
  readonly renewal: BeginLease | undefined;
  /** Whether the owner lock a fence belongs to still counts, read on the clock. */
  readonly ownerHolds: (fence: AbortSignal) => boolean;
  readonly deleteDelivered: boolean;
  /** The longest one database call may take: the settle's room at the end of the lease. */
  readonly dbCallMs: number;
}

/** What a source leased: its token, the lease's end on this clock, the owner lock's fence. */
export interface LeasedRows {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
  readonly leaseEnd: number;
  /** Aborted when the owner lock the token names is lost (OwnerLiveness). */
  readonly fence?: AbortSignal;
}

/**
 * The hold of a batch of rows leased under a token (the claim loop's claim, the log reader's
 * lease by id): the lease's end, renewed while the batch publishes (BatchLease), the owner
 * lock's fence read on the clock, and the settle fenced by the token.
 */
export class LeaseHold implements BatchHold {
  private lease: BatchLease | undefined;
  private readonly ownerHolds: (() => boolean) | undefined;

  constructor(
    private readonly parts: LeaseHoldParts,
    private readonly leased: LeasedRows,
  ) {
    const fence = leased.fence;
    this.ownerHolds = fence === undefined ? undefined : () => parts.ownerHolds(fence);
  }

  get fence(): AbortSignal | undefined {
    return this.lease?.fence ?? this.leased.fence;
  }

  get publishBy(): number {
    return this.lease?.publishBy ?? this.leased.leaseEnd - this.parts.dbCallMs;
  }

  get renewed(): boolean {
    return this.lease !== undefined;
  }

  get settleBy(): number {
    return this.lease?.leaseEnd ?? this.leased.leaseEnd;
  }

  get needsWorkers(): boolean {
    return this.leased.fence !== undefined;
  }

  begin(): void {
    const { token, records, leaseEnd, fence } = this.leased;
    this.lease ??= this.parts.renewal?.(token, records, leaseEnd, fence, this.ownerHolds);
  }

  holds(): boolean {
    if (this.lease !== undefined) return this.lease.holds();
    return this.ownerHolds?.() ?? true;
  }

  calling(): void {
    // The lease holds the rows whatever the call does; a deaf call is kept by keepThroughCall.
  }

  stop(): void {
    this.lease?.stop();
  }

  keepThroughCall(): Promise<{ token: string; leaseEnd: number }> {
    this.lease?.stop();
    // The rows keep the claim's token; the pipeline moves them to one of their own.
    return Promise.resolve({ token: this.leased.token, leaseEnd: this.settleBy });
  }

  settle(settlement: Settlement, token: string | undefined): Promise<number> {
    return this.parts.store.settle(
      token ?? this.leased.token,
      settlement,
      this.parts.deleteDelivered,
    );
  }
}
