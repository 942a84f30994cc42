// nestjs-outbox/s3: the claim check's store in Amazon S3 or an S3-compatible server
// (docs/claim-check.md). Loads @aws-sdk/client-s3, an optional peer.
export { s3ClaimCheckStore, type S3ClaimCheckStoreOptions } from './s3-claim-check.store';
