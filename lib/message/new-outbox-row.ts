import type { ResolvedPersonalData } from './erasure/personal-data';

/** A message ready to be written, already validated and serialised. */
export interface NewOutboxRow {
  readonly messageId: string;
  /** The id came from the caller (messageId/dedupeKey): a row with it already is skipped. */
  readonly idempotent?: boolean;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  /** JSON text; `'null'` for a binary message, whose body is in `binary`. */
  readonly payload: string;
  readonly headers: string;
  /** The body and content type of a binary message; absent for JSON. */
  readonly binary?: { readonly bytes: Buffer; readonly contentType: string };
  /** The broker attributes as JSON text; absent when the message has none. */
  readonly attributes?: string;
  /** Absolute due time, if the caller gave one. */
  readonly availableAt: Date | null;
  /** Delay after the database's `now`, if the caller gave one. */
  readonly delayMs: number | null;
  /** The message's tenant (`tenant_id`); absent when it has none. */
  readonly tenant?: string;
  /**
   * The message's personal data, to be sealed before the row is written (`erasure`,
   * docs/erasure.md); never written itself, and absent on a row that has none.
   */
  readonly personal?: ResolvedPersonalData;
}
