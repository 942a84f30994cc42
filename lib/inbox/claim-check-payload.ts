import { refuseUnknownCallOptions } from '../internal/known-keys';
import { OutboxClaimCheckError } from '../errors/outbox-claim-check.error';
import { readOutboxSqsMessage } from '../publishers/aws/aws-received-message';
import { claimCheckReferenceOf } from '../publishers/claim-check/claim-check-reference';
import type {
  ClaimCheckBlob,
  ClaimCheckStore,
} from '../publishers/claim-check/claim-check-store.interface';
import { OUTBOX_HEADER_CONTENT_TYPE } from '../outbox.constants';
import { flatField, isOutboxEnvelope, redisStreamField } from './received-message';
import type { RedisStreamEntryLike } from './received-message';
import { receivedHeader, type ReceivedMessageLike } from './sequence-of';
import { UnknownMessageShapeError } from './unknown-message-shape.error';

const JSON_TYPE = 'application/json';
/** The field of a Redis stream entry that holds the payload (`RedisStreamsPublisher`). */
const REDIS_PAYLOAD_FIELD = 'payload';

/** A message's payload, from its claim-check store or from the message itself. */
export interface ReceivedPayload extends ClaimCheckBlob {
  /** True when the message was sent by reference and the payload read from the store. */
  readonly fromStore: boolean;
  /** The payload parsed as JSON (a JSON message's). */
  json<T = unknown>(): T;
}

/** Options of {@link claimCheckPayload}. */
export interface ClaimCheckPayloadOptions {
  /** With a Nest microservice context as the message: the handler's data (its `@Payload()`). */
  readonly data?: unknown;
  /** Gives up the store's read when it aborts. */
  readonly signal?: AbortSignal;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

function bytesOf(value: unknown): Buffer | undefined {
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array || ArrayBuffer.isView(value)) {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  return undefined;
}

function payloadOf(blob: ClaimCheckBlob, fromStore: boolean): ReceivedPayload {
  return {
    bytes: blob.bytes,
    contentType: blob.contentType,
    fromStore,
    json: <T>() => JSON.parse(blob.bytes.toString('utf8')) as T,
  };
}

/** The body a message carries itself, by the shape its client library hands it over in. */
function carriedBody(
  given: ReceivedMessageLike,
  data: unknown,
  header: (name: string) => string | undefined,
): ClaimCheckBlob | undefined {
  const contentType = header(OUTBOX_HEADER_CONTENT_TYPE) ?? JSON_TYPE;
  const message: unknown = given;
  if (Array.isArray(message)) {
    // ioredis' [id, [field, value, …]], or its field list.
    const fields: unknown =
      message.length === 2 && Array.isArray(message[1]) ? message[1] : message;
    const bytes = Array.isArray(fields) ? flatField(fields, REDIS_PAYLOAD_FIELD) : undefined;
    return bytes === undefined ? undefined : { bytes: Buffer.from(bytes, 'utf8'), contentType };
  }
  if (!isObject(message)) return undefined;
  if (typeof message.getArgs === 'function') {
    // A Nest context: the data is the OutboxEnvelope (TCP, Redis, NATS, MQTT) or the body.
    const body: unknown = isOutboxEnvelope(data)
      ? (data as unknown as { payload: unknown }).payload
      : data;
    const bytes = bytesOf(body) ?? Buffer.from(JSON.stringify(body) ?? 'null', 'utf8');
    return { bytes, contentType };
  }
  if (isObject(message.properties) && 'content' in message) {
    const bytes = bytesOf(message.content);
    const type = message.properties.contentType;
    return bytes === undefined
      ? undefined
      : { bytes, contentType: typeof type === 'string' && type !== '' ? type : contentType };
  }
  if (isObject(message.message) && 'value' in message.message) {
    return carriedBody(message.message, data, header);
  }
  if ('value' in message && 'headers' in message) {
    const bytes = bytesOf(message.value);
    return bytes === undefined ? undefined : { bytes, contentType };
  }
  if (typeof message.subject === 'string' && 'data' in message) {
    const bytes = bytesOf(message.data);
    return bytes === undefined ? undefined : { bytes, contentType };
  }
  if (
    'MessageAttributes' in message ||
    'messageAttributes' in message ||
    typeof message.Body === 'string' ||
    typeof message.body === 'string'
  ) {
    const received = readOutboxSqsMessage(message);
    const bytes = bytesOf(received.payload);
    return bytes === undefined
      ? undefined
      : { bytes, contentType: received.contentType ?? contentType };
  }
  if ('payload' in message) {
    const body = message.raw ?? message.payload;
    const bytes = bytesOf(body) ?? Buffer.from(JSON.stringify(body) ?? 'null', 'utf8');
    const type = message.contentType;
    return { bytes, contentType: typeof type === 'string' ? type : contentType };
  }
  const field = redisStreamField(message as unknown as RedisStreamEntryLike, REDIS_PAYLOAD_FIELD);
  return field === undefined ? undefined : { bytes: Buffer.from(field, 'utf8'), contentType };
}

/**
 * The payload of a received message, in one call whether it was sent by reference or not
 * (docs/claim-check.md): read from `store` when the message carries the claim check's reference
 * (`x-outbox-claim-check`), else the body the message carries. `message` is what the consumer's
 * client library hands over, in any shape `sequenceOf` reads (an amqplib message, a kafkajs
 * message or `eachMessage` payload, a JetStream message, a Redis stream entry, an SQS message, a
 * Nest context with `{ data }`, an `@OnOutboxMessage()` message).
 *
 * @throws OutboxClaimCheckError when the store no longer has the payload (deleted with its
 *   messages past their retention) or cannot be read.
 * @throws UnknownMessageShapeError for a shape it does not know.
 */
export async function claimCheckPayload(
  message: ReceivedMessageLike,
  store: ClaimCheckStore,
  options: ClaimCheckPayloadOptions = {},
): Promise<ReceivedPayload> {
  refuseUnknownCallOptions('claimCheckPayload()', options, {
    '': { data: true, signal: true } satisfies Record<keyof ClaimCheckPayloadOptions, true>,
  });
  const header = (name: string): string | undefined => receivedHeader(message, name, options.data);
  const reference = claimCheckReferenceOf(header);
  if (reference === undefined) {
    const carried = carriedBody(message, options.data, header);
    if (carried === undefined) {
      throw new UnknownMessageShapeError('a message whose body could not be found', [
        'the shapes sequenceOf reads',
      ]);
    }
    return payloadOf(carried, false);
  }
  let blob: ClaimCheckBlob | undefined;
  try {
    blob = await store.get(reference, options.signal);
  } catch (error) {
    throw new OutboxClaimCheckError(
      `The claim check could not read the payload at ${reference.location} from its ${store.kind} store: ${error instanceof Error ? error.message : String(error)}`,
      reference.location,
      { cause: error },
    );
  }
  if (blob === undefined) {
    throw new OutboxClaimCheckError(
      `The claim-checked payload at ${reference.location} is not in the ${store.kind} store: it was deleted with its messages past their retention, or the consumer reads another store than the producer writes`,
      reference.location,
    );
  }
  return payloadOf(blob, true);
}
