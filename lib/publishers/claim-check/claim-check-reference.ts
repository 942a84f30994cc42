import { OUTBOX_HEADER_CLAIM_CHECK, OUTBOX_HEADER_CLAIM_CHECK_ID } from '../../outbox.constants';
import type { ClaimCheckReference } from './claim-check-store.interface';

/** How the location of a payload the outbox's claim-check table keeps begins. */
export const TABLE_LOCATION_PREFIX = 'outbox-table:';

/** The body of a message sent by reference: what a consumer without the helper sees. */
export interface ClaimCheckBody {
  readonly claimCheck: {
    readonly location: string;
    readonly blobId: string;
    /** The payload's size in bytes. */
    readonly size: number;
    readonly contentType: string;
  };
}

/** The JSON body of a message sent by reference. */
export function claimCheckBody(
  reference: ClaimCheckReference,
  size: number,
  contentType: string,
): string {
  const body: ClaimCheckBody = { claimCheck: { ...reference, size, contentType } };
  return JSON.stringify(body);
}

/**
 * The reference a message carries in its headers, read by `header(name)`; undefined for a
 * message sent with its payload.
 */
export function claimCheckReferenceOf(
  header: (name: string) => string | undefined,
): ClaimCheckReference | undefined {
  const location = header(OUTBOX_HEADER_CLAIM_CHECK);
  const blobId = header(OUTBOX_HEADER_CLAIM_CHECK_ID);
  if (location === undefined || blobId === undefined) return undefined;
  return { location, blobId };
}
