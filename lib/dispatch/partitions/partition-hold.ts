import type { Settlement } from '../../store/ports/outbox-store.port';
import type { BatchHold } from '../pipeline/batch-hold';

/** What a partition batch's hold is made of: its partitions' fence and its fenced settle. */
export interface PartitionHoldParts {
  /** Aborted when the holding the batch was taken under is lost (PartitionOwnership.fence). */
  readonly fence: AbortSignal;
  /** Whether that holding still counts, read on the clock (PartitionOwnership.holds). */
  readonly holds: () => boolean;
  /** The batch's end on this clock: its publish and settle must be over by then. */
  readonly leaseEnd: number;
  /** The longest one database call may take: the settle's room before `leaseEnd`. */
  readonly dbCallMs: number;
  /** The settle, fenced by the partitions' generations. */
  readonly settle: (settlement: Settlement) => Promise<number>;
  /**
   * Leases the batch's rows as a claim would (a deaf call at shutdown), with a token of their
   * own; answers it, or undefined where that failed.
   */
  readonly leaseRows: () => Promise<string | undefined>;
  /** How long such a lease runs before the pipeline renews it. */
  readonly leaseMs: number;
}

/**
 * The hold of a batch read from owned delivery partitions: no row lease, the partitions' holding
 * instead. Its publish stops when the holding lapses (the fence, read on the clock before every
 * send); its settle is fenced by the partitions' generations; the publish calls still running
 * after the pipeline stopped waiting for them are kept (`calls`) so that the owner does not read
 * and publish their messages again while they may still write them.
 */
export class PartitionHold implements BatchHold {
  readonly renewed = true;
  readonly needsWorkers = false;
  /** The publish calls of the batch, each settling when it returns. */
  readonly calls: Promise<void>[] = [];

  constructor(private readonly parts: PartitionHoldParts) {}

  get fence(): AbortSignal {
    return this.parts.fence;
  }

  get publishBy(): number {
    return this.parts.leaseEnd - this.parts.dbCallMs;
  }

  get settleBy(): number {
    return this.parts.leaseEnd;
  }

  begin(): void {
    // Held by the partitions' heartbeat, not by anything this batch keeps up.
  }

  holds(): boolean {
    return this.parts.holds();
  }

  calling(returned: Promise<void>): void {
    this.calls.push(returned);
  }

  stop(): void {
    // As begin.
  }

  async keepThroughCall(): Promise<{ token: string; leaseEnd: number } | undefined> {
    const token = await this.parts.leaseRows();
    return token === undefined
      ? undefined
      : { token, leaseEnd: performance.now() + this.parts.leaseMs };
  }

  settle(settlement: Settlement): Promise<number> {
    // The rows keep their partitions' fence whatever token a deaf call's lease gave them.
    return this.parts.settle(settlement);
  }
}
