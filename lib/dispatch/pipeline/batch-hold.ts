import type { Settlement } from '../../store/ports/outbox-store.port';

/**
 * What holds a batch's messages for this dispatcher while it publishes and settles, whatever
 * holds them: row leases under a token (`leases/lease-hold.ts`) or the delivery partitions the
 * batch's keys belong to (`partitions/partition-hold.ts`). Handed down with each batch, so that
 * the pipeline publishes, judges and settles the same way in every mode.
 */
export interface BatchHold {
  /** Aborted once the hold is lost: the publish stops. Absent where only the deadline fences. */
  readonly fence: AbortSignal | undefined;
  /** Past this (monotonic), nothing more may be published: the settle needs one database call. */
  readonly publishBy: number;
  /**
   * Whether `publishBy` moves while the batch publishes (a hold kept up as it goes): the publish
   * timeout is then not cut short by it, and the hold's fence stops the publish when it is lost.
   */
  readonly renewed: boolean;
  /** The latest the outcome may still land (monotonic): what the settle's tries have. */
  readonly settleBy: number;
  /**
   * Whether the source's workers must outlive this batch's publish (a row lease whose token
   * names the owner lock: giving the lock up would let others shorten the lease mid-publish).
   */
  readonly needsWorkers: boolean;
  /** The publish is about to begin: a hold that is kept up starts doing so. */
  begin(): void;
  /** Read on the clock before every send: a timer cannot fire while the process is paused. */
  holds(): boolean;
  /**
   * A publish call began; `returned` settles when it returns. The pipeline stops waiting for a
   * call once the fence aborts, but the call may still write its messages: the hold keeps them
   * from being published again until it has returned.
   */
  calling(returned: Promise<void>): void;
  /** The publish is over: nothing more is kept up for it (the settle has until `settleBy`). */
  stop(): void;
  /**
   * A publish call did not answer the shutdown's abort: the rows are leased (or kept leased) so
   * that no one publishes them beside the call once this process lets its hold go. Answers the
   * token they hold and until when, for the pipeline to renew while the call runs, or undefined
   * where that failed.
   */
  keepThroughCall(): Promise<{ readonly token: string; readonly leaseEnd: number } | undefined>;
  /**
   * Records the outcome, fenced by the hold: how many rows it changed. `token`: the one the rows
   * were moved to while a deaf call ran, if they were.
   */
  settle(settlement: Settlement, token: string | undefined): Promise<number>;
}
