/** What the claim check records of one payload before it is sent by reference. */
export interface ClaimCheckEntry {
  readonly blobId: string;
  /** The message sending it now: the payload lives as long as the last one that sent it. */
  readonly messageId: string;
  /** Where it goes if it is not recorded yet (the store's `locationFor`). */
  readonly location: string;
  readonly contentType: string;
  readonly size: number;
  /** The bytes, when the claim-check table is the store; null otherwise. */
  readonly payload: Buffer | null;
}

/** A recorded payload: where it is, and whether its store confirmed the write. */
export interface ClaimCheckState {
  readonly blobId: string;
  readonly location: string;
  readonly stored: boolean;
}

/** A payload whose messages are all gone, deleted from the claim-check table. */
export interface ClaimCheckSwept {
  readonly location: string;
  /** Whether its bytes are in an external store, to be deleted there too. */
  readonly external: boolean;
}

/**
 * The claim-check table `<table>_claim_checks` as the claim check uses it
 * (`lib/store/claim-check-ledger.ts` over each database's statements).
 */
export interface ClaimCheckLedgerPort {
  /** Records (or touches) the payloads, and answers where each one is and whether it is stored. */
  record(entries: readonly ClaimCheckEntry[]): Promise<ClaimCheckState[]>;
  /** Marks payloads written to their store. */
  markStored(blobIds: readonly string[]): Promise<void>;
  /** The bytes the table keeps for a blob id (the table as the store). */
  read(blobId: string): Promise<{ payload: Buffer | null; contentType: string } | undefined>;
  /**
   * Deletes the rows of payloads whose messages are gone, up to `limit`, and answers them;
   * `deleted` runs before the deletion commits (a failure there keeps the rows).
   */
  sweep(
    graceMs: number,
    limit: number,
    deleted: (swept: readonly ClaimCheckSwept[]) => Promise<void>,
  ): Promise<ClaimCheckSwept[]>;
}

/**
 * The ledger of one instance, known once its database connection is: the publisher and the
 * cleaner are built before it, and wait for it on their first use.
 */
export class ClaimCheckLedgerSlot {
  #ledger: ClaimCheckLedgerPort | undefined;
  #waiting: ((ledger: ClaimCheckLedgerPort) => void)[] = [];

  /** Hands the ledger over (once the instance's store is made). */
  attach(ledger: ClaimCheckLedgerPort): void {
    this.#ledger = ledger;
    for (const resolve of this.#waiting.splice(0)) resolve(ledger);
  }

  /** The ledger, as soon as it is attached. */
  get(): Promise<ClaimCheckLedgerPort> {
    const ledger = this.#ledger;
    if (ledger !== undefined) return Promise.resolve(ledger);
    return new Promise((resolve) => this.#waiting.push(resolve));
  }
}
