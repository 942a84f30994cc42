import { OutboxError } from './outbox.error';

/** Why sealed personal data could not be opened (besides an erased subject). */
export type OutboxSealedDataReason =
  /** Sealed values, but no `x-outbox-subject-key` header naming their key. */
  | 'missing-key-id'
  /** The key table has no key of that id: another producer's table, or the wrong one. */
  | 'unknown-key'
  /** A sealed value does not open with its key: altered, or moved from another field. */
  | 'tampered';

/**
 * Sealed personal data that does not open (docs/erasure.md). Fails closed: the reader never
 * answers a payload with a sealed value left in it.
 */
export class OutboxSealedDataError extends OutboxError {
  constructor(
    message: string,
    readonly reason: OutboxSealedDataReason,
    readonly keyId: string | null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
