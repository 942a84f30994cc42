import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * Wraps and unwraps the per-subject data keys the erasure keeps in its key table
 * (docs/erasure.md): with a master key of the app's (`erasure.masterKey`), or an external KMS
 * (AWS KMS `Encrypt`/`Decrypt`, Vault transit, Google Cloud KMS). The key table holds only
 * what `wrap` answers, so its rows are useless without the wrapper.
 */
export interface OutboxKeyWrapper {
  /** The data key (32 bytes) as stored; `keyId` is the data key's id, to bind the two. */
  wrap(dataKey: Buffer, keyId: string): Promise<Buffer>;
  /** The data key back; rejects when `wrapped` was not made by `wrap` for `keyId`. */
  unwrap(wrapped: Buffer, keyId: string): Promise<Buffer>;
}

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** AES-256-GCM under `masterKey` (32 bytes), the data key's id as additional data. */
export function masterKeyWrapper(masterKey: Buffer): OutboxKeyWrapper {
  const key = Buffer.from(masterKey);
  const aad = (keyId: string): Buffer => Buffer.from(`nestjs-outbox:data-key:${keyId}`, 'utf8');
  return {
    wrap(dataKey, keyId) {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(aad(keyId));
      const body = Buffer.concat([cipher.update(dataKey), cipher.final()]);
      return Promise.resolve(Buffer.concat([iv, body, cipher.getAuthTag()]));
    },
    unwrap(wrapped, keyId) {
      try {
        const iv = wrapped.subarray(0, IV_BYTES);
        const tag = wrapped.subarray(wrapped.length - TAG_BYTES);
        const decipher = createDecipheriv('aes-256-gcm', key, iv);
        decipher.setAAD(aad(keyId));
        decipher.setAuthTag(tag);
        const body = wrapped.subarray(IV_BYTES, wrapped.length - TAG_BYTES);
        return Promise.resolve(Buffer.concat([decipher.update(body), decipher.final()]));
      } catch (error) {
        return Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
    },
  };
}
