import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { randomBytes } from 'node:crypto';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { OutboxClaimCheckError } from '../../errors/outbox-claim-check.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type {
  ClaimCheckBlob,
  ClaimCheckReference,
  ClaimCheckStore,
} from '../../publishers/claim-check/claim-check-store.interface';

/** Options of {@link s3ClaimCheckStore}. */
export interface S3ClaimCheckStoreOptions {
  /**
   * Your own `S3Client` (never destroyed by the store), or the configuration of one the store
   * builds and destroys at shutdown (e.g. `{ region, endpoint, forcePathStyle: true }` for an
   * S3-compatible server). Credentials come from the AWS SDK's default chain unless named.
   * @default a client of the default region and credential chain
   */
  readonly client?: S3Client | S3ClientConfig;
  /** The bucket the payloads go to; it must exist. @default required */
  readonly bucket: string;
  /** Put before every key, e.g. `'outbox/'`. @default '' */
  readonly prefix?: string;
}

// S3's bucket naming rules (lowercase letters, digits, dots and hyphens, 3 to 63 characters).
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const DELETE_CHUNK = 1_000;

function isClient(value: unknown): value is S3Client {
  return value instanceof S3Client;
}

/** The bucket and key of an `s3://bucket/key` location. */
function parseLocation(location: string): { bucket: string; key: string } | undefined {
  const match = /^s3:\/\/([^/]+)\/(.+)$/.exec(location);
  return match === null ? undefined : { bucket: match[1] ?? '', key: match[2] ?? '' };
}

function errorName(error: unknown): string | undefined {
  return typeof error === 'object' && error !== null
    ? (error as { name?: string; Code?: string }).name
    : undefined;
}

/**
 * The claim check's store in Amazon S3 or an S3-compatible server (`@aws-sdk/client-s3`, an
 * optional peer loaded with `nestjs-outbox/s3`; docs/claim-check.md). Each payload is one object
 * at `<prefix><blob id>/<random>`, written with `If-None-Match: *` (an object already there is
 * left as it is), deleted by the cleaner with `DeleteObjects` once its messages are gone; a
 * consumer reads it with `GetObject` from the location the message names.
 */
export function s3ClaimCheckStore(options: S3ClaimCheckStoreOptions): ClaimCheckStore {
  refuseUnknownCallOptions('s3ClaimCheckStore()', options, {
    '': { client: true, bucket: true, prefix: true } satisfies Record<
      keyof S3ClaimCheckStoreOptions,
      true
    >,
  });
  if (typeof options !== 'object' || options === null || typeof options.bucket !== 'string') {
    throw new OutboxOptionsError(
      's3ClaimCheckStore() needs { bucket }: the bucket the payloads go to (and client, the S3Client or its configuration).',
      'bucket',
    );
  }
  if (!BUCKET.test(options.bucket)) {
    throw new OutboxOptionsError(
      `s3ClaimCheckStore(): ${JSON.stringify(options.bucket)} is not an S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens).`,
      'bucket',
    );
  }
  const prefix = options.prefix ?? '';
  if (typeof prefix !== 'string' || prefix.length > 512 || prefix.startsWith('/')) {
    throw new OutboxOptionsError(
      's3ClaimCheckStore(): prefix must be a string of at most 512 characters, not starting with "/" (e.g. "outbox/").',
      'prefix',
    );
  }
  const { bucket } = options;
  const owned = !isClient(options.client);
  let client: S3Client | undefined = isClient(options.client) ? options.client : undefined;
  const clientOf = (): S3Client => (client ??= new S3Client(options.client ?? {}));

  return {
    kind: 's3',
    locationFor: (blobId) => `s3://${bucket}/${prefix}${blobId}/${randomBytes(6).toString('hex')}`,
    async put(location, blob, signal) {
      const at = parseLocation(location);
      if (at === undefined)
        throw new OutboxClaimCheckError(`Not an S3 location: ${location}`, location);
      try {
        await clientOf().send(
          new PutObjectCommand({
            Bucket: at.bucket,
            Key: at.key,
            Body: blob.bytes,
            ContentType: blob.contentType,
            // A write whose answer was lost leaves the object: the next one keeps it.
            IfNoneMatch: '*',
          }),
          { abortSignal: signal },
        );
      } catch (error) {
        if (errorName(error) === 'PreconditionFailed') return;
        throw error;
      }
    },
    async get(reference: ClaimCheckReference, signal?: AbortSignal) {
      const at = parseLocation(reference.location);
      if (at === undefined) {
        throw new OutboxClaimCheckError(
          `The payload is at ${reference.location}, not in S3: read it with the store the producer writes to`,
          reference.location,
        );
      }
      try {
        const answer = await clientOf().send(
          new GetObjectCommand({ Bucket: at.bucket, Key: at.key }),
          signal === undefined ? {} : { abortSignal: signal },
        );
        const bytes = await answer.Body?.transformToByteArray();
        if (bytes === undefined) return undefined;
        const blob: ClaimCheckBlob = {
          bytes: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
          contentType: answer.ContentType ?? 'application/octet-stream',
        };
        return blob;
      } catch (error) {
        if (errorName(error) === 'NoSuchKey') return undefined;
        throw error;
      }
    },
    async delete(locations, signal) {
      const byBucket = new Map<string, string[]>();
      for (const location of locations) {
        const at = parseLocation(location);
        if (at === undefined) continue;
        const keys = byBucket.get(at.bucket) ?? [];
        keys.push(at.key);
        byBucket.set(at.bucket, keys);
      }
      for (const [name, keys] of byBucket) {
        for (let i = 0; i < keys.length; i += DELETE_CHUNK) {
          const answer = await clientOf().send(
            new DeleteObjectsCommand({
              Bucket: name,
              Delete: {
                Objects: keys.slice(i, i + DELETE_CHUNK).map((Key) => ({ Key })),
                Quiet: true,
              },
            }),
            { abortSignal: signal },
          );
          const failed = answer.Errors ?? [];
          if (failed.length > 0) {
            const first = failed[0];
            throw new OutboxClaimCheckError(
              `S3 refused to delete ${failed.length} claim-checked payload(s), e.g. s3://${name}/${first?.Key ?? ''}: ${first?.Code ?? ''} ${first?.Message ?? ''}`,
              `s3://${name}/${first?.Key ?? ''}`,
            );
          }
        }
      }
    },
    close() {
      if (owned) client?.destroy();
      return Promise.resolve();
    },
  };
}
