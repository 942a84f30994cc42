import { OutboxSealedDataError } from '../errors/outbox-sealed-data.error';
import { OutboxSubjectErasedError } from '../errors/outbox-subject-erased.error';
import { isSealed, openJson, SEALED_MARKER } from '../message/erasure/sealed-payload';
import { OUTBOX_ERASURE_NOTICE_TYPE, OUTBOX_HEADER_SUBJECT_KEY } from '../outbox.constants';
import type { OutboxSubjectKeys } from './subject-keys';

/**
 * A message as a consumer has it: its headers (any broker's: RabbitMQ's
 * `properties.headers`, Kafka's `headers`, a Nest `RmqContext`'s) and its payload (bytes, JSON
 * text, or the parsed object).
 */
export interface SealedMessage {
  readonly headers?: Readonly<Record<string, unknown>> | null;
  readonly payload: unknown;
}

/** The erasure notice of one data key (docs/erasure.md). */
export interface OutboxErasureNotice {
  /** The destroyed key: every earlier message of this key carrying it is unreadable now. */
  readonly keyId: string;
  readonly erasedAt: string;
}

function headerText(headers: SealedMessage['headers'], name: string): string | undefined {
  const value = headers?.[name];
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  return undefined;
}

function parsed(payload: unknown): unknown {
  if (Buffer.isBuffer(payload) || payload instanceof Uint8Array) {
    return JSON.parse(Buffer.from(payload).toString('utf8'));
  }
  if (typeof payload === 'string') return JSON.parse(payload);
  return payload;
}

/**
 * Opens the personal data the outbox sealed at enqueue (docs/erasure.md), with the producer's
 * key service (`subjectKeys()`). Fails closed: a message of an erased subject throws
 * `OutboxSubjectErasedError`, one that does not open `OutboxSealedDataError`; it never answers a
 * payload that still holds a sealed value.
 */
export class PersonalDataReader {
  constructor(private readonly keys: OutboxSubjectKeys) {}

  /** The payload with its personal data opened (a payload without any, as it is). */
  async open<T = unknown>(message: SealedMessage): Promise<T> {
    const payload = parsed(message.payload);
    const keyId = headerText(message.headers, OUTBOX_HEADER_SUBJECT_KEY);
    const whole = isSealed(payload);
    const fields =
      !whole && payload !== null && typeof payload === 'object' && !Array.isArray(payload)
        ? Object.entries(payload as Record<string, unknown>).filter(([, v]) => isSealed(v))
        : [];
    if (!whole && fields.length === 0) return payload as T;
    if (keyId === undefined) {
      throw new OutboxSealedDataError(
        `The payload holds sealed personal data but the message has no ${OUTBOX_HEADER_SUBJECT_KEY} header naming its key: pass the message's headers`,
        'missing-key-id',
        null,
      );
    }
    const found = await this.keys.dataKey(keyId);
    if (found.state === 'erased') throw new OutboxSubjectErasedError(keyId, found.erasedAt);
    if (found.state === 'unknown') {
      throw new OutboxSealedDataError(
        `No data key ${keyId} in the key table: read it with the producer's key table (its outbox tableName) and wrapping key`,
        'unknown-key',
        keyId,
      );
    }
    const open = (field: string | null, sealed: string): unknown => {
      try {
        return JSON.parse(openJson(found.dataKey, keyId, field, sealed));
      } catch (error) {
        throw new OutboxSealedDataError(
          `A sealed value${field === null ? '' : ` (field ${JSON.stringify(field)})`} does not open with its data key ${keyId}: it was altered or moved`,
          'tampered',
          keyId,
          { cause: error },
        );
      }
    };
    if (whole) return open(null, payload[SEALED_MARKER]) as T;
    const opened: Record<string, unknown> = { ...(payload as Record<string, unknown>) };
    for (const [field, value] of fields) {
      opened[field] = open(field, (value as Record<string, string>)[SEALED_MARKER] as string);
    }
    return opened as T;
  }
}

/**
 * The erasure notice a message carries, or null for any other message: the outbox enqueues one
 * on each (topic, key) that carried an erased subject's data, after its last message there.
 */
export function erasureNoticeOf(
  message: SealedMessage & { readonly type?: string },
): OutboxErasureNotice | null {
  const type = message.type ?? headerText(message.headers, 'x-outbox-type');
  if (type !== OUTBOX_ERASURE_NOTICE_TYPE) return null;
  const body = parsed(message.payload) as Partial<OutboxErasureNotice> | null;
  if (body === null || typeof body.keyId !== 'string') return null;
  return { keyId: body.keyId, erasedAt: String(body.erasedAt) };
}
