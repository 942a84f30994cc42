/** A payload a claim-check store keeps: its bytes and their content type. */
export interface ClaimCheckBlob {
  /** The JSON text as UTF-8 for a JSON message, the bytes of a binary one. */
  readonly bytes: Buffer;
  /** `application/json` for a JSON message, the content type of a binary one. */
  readonly contentType: string;
}

/** Where a claim-checked message's payload is: what its published reference names. */
export interface ClaimCheckReference {
  /** The store's address of the payload (`s3://bucket/key`, `outbox-table:<blob id>`). */
  readonly location: string;
  /** The id the payload is kept under: the message id of the message first enqueued with it. */
  readonly blobId: string;
}

/**
 * Where the claim check keeps payloads sent by reference (docs/claim-check.md):
 * `s3ClaimCheckStore()` of `nestjs-outbox/s3`, `tableClaimCheckStore()` of
 * `nestjs-outbox/claim-check` (the outbox's own database), or one of your own.
 */
export interface ClaimCheckStore {
  /** A short name for logs and errors (`'s3'`, `'table'`). */
  readonly kind: string;
  /**
   * The address of a payload written now under `blobId`, unique to this write (a payload the
   * cleaner deleted and a later copy writes again never shares its address); null when the
   * outbox's claim-check table keeps the bytes itself.
   */
  locationFor(blobId: string): string | null;
  /**
   * Writes the payload at `location`. Called once per payload; again only after a write that
   * failed or was never confirmed, so it must leave one copy whatever happened before.
   */
  put?(location: string, blob: ClaimCheckBlob, signal: AbortSignal): Promise<void>;
  /** Reads a payload back; undefined when it is not there (deleted with its messages). */
  get(reference: ClaimCheckReference, signal?: AbortSignal): Promise<ClaimCheckBlob | undefined>;
  /** Deletes the payloads at these locations, for the cleaner, once their messages are gone. */
  delete?(locations: readonly string[], signal: AbortSignal): Promise<void>;
  /** Called once when the module shuts down. */
  close?(): Promise<void>;
}
