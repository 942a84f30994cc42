// nestjs-outbox/claim-check: the claim check (docs/claim-check.md): payloads over a threshold
// sent by reference. The store in the outbox's own database, and what a store of one's own
// implements; the S3 store is in nestjs-outbox/s3, the consumer's one call in
// nestjs-outbox/inbox (claimCheckPayload). Loads no peer.
export { tableClaimCheckStore, type TableClaimCheckReader } from './table-claim-check.store';
export type {
  ClaimCheckBlob,
  ClaimCheckReference,
  ClaimCheckStore,
} from '../publishers/claim-check/claim-check-store.interface';
export type { ClaimCheckBody } from '../publishers/claim-check/claim-check-reference';
export type { OutboxClaimCheckOptions } from '../options/outbox.options';
export { OutboxClaimCheckError } from '../errors/outbox-claim-check.error';
export { OUTBOX_HEADER_CLAIM_CHECK, OUTBOX_HEADER_CLAIM_CHECK_ID } from '../outbox.constants';
