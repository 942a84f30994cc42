import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * The sealed form of personal data in a payload (docs/erasure.md): a sealed field's value, or a
 * whole sealed payload, is `{ "$outboxSealed": "<base64 of iv | ciphertext | tag>" }`, the JSON
 * of the plaintext under AES-256-GCM with the subject's data key. The additional data binds each
 * value to its data key and field, so a sealed value moved to another field or message under
 * another key does not open.
 */
export const SEALED_MARKER = '$outboxSealed';

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A sealed value as it sits in the payload. */
export interface SealedValue {
  readonly [SEALED_MARKER]: string;
}

function aad(keyId: string, field: string | null): Buffer {
  return Buffer.from(`nestjs-outbox:sealed:v1:${keyId}:${field ?? '*'}`, 'utf8');
}

/** Seals the JSON text `json` (a field's value, or the whole payload when `field` is null). */
export function sealJson(
  dataKey: Buffer,
  keyId: string,
  field: string | null,
  json: string,
): SealedValue {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', dataKey, iv);
  cipher.setAAD(aad(keyId, field));
  const body = Buffer.concat([cipher.update(json, 'utf8'), cipher.final()]);
  return { [SEALED_MARKER]: Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64') };
}

/** The JSON text sealed in `sealed`; throws when it was not sealed with this key and field. */
export function openJson(
  dataKey: Buffer,
  keyId: string,
  field: string | null,
  sealed: string,
): string {
  const bytes = Buffer.from(sealed, 'base64');
  if (bytes.length < IV_BYTES + TAG_BYTES) throw new Error('the sealed value is too short');
  const decipher = createDecipheriv('aes-256-gcm', dataKey, bytes.subarray(0, IV_BYTES));
  decipher.setAAD(aad(keyId, field));
  decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
  return Buffer.concat([
    decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)),
    decipher.final(),
  ]).toString('utf8');
}

/** Whether `value` is a sealed value (`{ "$outboxSealed": "…" }` and nothing else). */
export function isSealed(value: unknown): value is SealedValue {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  return (
    keys.length === 1 &&
    keys[0] === SEALED_MARKER &&
    typeof (value as Record<string, unknown>)[SEALED_MARKER] === 'string'
  );
}

/**
 * The payload JSON `payload` with the personal data sealed: the top-level `fields` present in
 * it (an object payload), or the whole payload when `fields` is null.
 */
export function sealPayload(
  payload: string,
  fields: readonly string[] | null,
  dataKey: Buffer,
  keyId: string,
): string {
  if (fields === null) return JSON.stringify(sealJson(dataKey, keyId, null, payload));
  const parsed: unknown = JSON.parse(payload);
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    // Fields of something that has none: the whole payload is sealed rather than none of it.
    return JSON.stringify(sealJson(dataKey, keyId, null, payload));
  }
  const object = parsed as Record<string, unknown>;
  for (const field of fields) {
    if (!Object.hasOwn(object, field)) continue;
    object[field] = sealJson(dataKey, keyId, field, JSON.stringify(object[field]));
  }
  return JSON.stringify(object);
}
