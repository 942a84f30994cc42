import { OUTBOX_HEADER_MESSAGE_ID } from '../outbox.constants';
import {
  cloudEventAttributes,
  type CloudEventAttributeReader,
} from '../publishers/cloud-events/received-cloud-event';

// How a consumer's client library hands over an outbox message, and how one header is read from
// each shape: shared by the message-id extractors and by sequenceOf. Structural types, so the
// inbox needs neither amqplib, kafkajs, a NATS client, ioredis nor @nestjs/microservices
// installed: their message and context objects fit these shapes.

/** The part of an amqplib `ConsumeMessage` (or `GetMessage`) the inbox reads. */
export interface AmqpMessageLike {
  readonly properties: {
    readonly messageId?: unknown;
    readonly contentType?: unknown;
    readonly headers?: Readonly<Record<string, unknown>> | null;
  };
  /** The body: read only for a CloudEvent in structured mode, to find its attributes. */
  readonly content?: Buffer;
}

/** A Kafka header value as kafkajs delivers it (Nest's Kafka server decodes it to a string). */
export type KafkaHeaderValue = Buffer | string | readonly (Buffer | string)[] | null | undefined;

/** The part of a kafkajs `KafkaMessage` the inbox reads: its headers, and its key. */
export interface KafkaMessageLike {
  readonly headers?: Readonly<Record<string, KafkaHeaderValue>> | null;
  readonly key?: Buffer | string | null;
  /** The value: read only for a CloudEvent in structured mode, to find its attributes. */
  readonly value?: Buffer | string | null;
}

/** The part of a kafkajs `EachMessagePayload` the inbox reads. */
export interface KafkaEachMessageLike {
  readonly message: KafkaMessageLike;
}

/** NATS headers (`MsgHdrs` of `@nats-io/nats-core` and `nats`): `get` answers '' for a missing one. */
export interface NatsHeadersLike {
  get(name: string): string;
}

/**
 * The part of a `JsMsg` (a message a JetStream consumer of `@nats-io/jetstream` got) the inbox
 * reads: its NATS headers.
 */
export interface JetStreamMessageLike {
  readonly headers?: NatsHeadersLike | undefined;
  /** The body: read only for a CloudEvent in structured mode, to find its attributes. */
  readonly data?: Uint8Array;
}

/** A Redis field name or value as a client returns it: text, or bytes from a `…Buffer` command. */
export type RedisStreamValue = string | Buffer;

/**
 * One stream entry as a Redis client returns it from `XREADGROUP` / `XRANGE`: ioredis' `[id,
 * [field, value, …]]`, node-redis' `{ id, message: { field: value } }`, or the entry's fields
 * already made into an object.
 */
export type RedisStreamEntryLike =
  | readonly [id: RedisStreamValue, fields: readonly RedisStreamValue[]]
  | { readonly id?: RedisStreamValue; readonly message: Readonly<Record<string, RedisStreamValue>> }
  | Readonly<Record<string, RedisStreamValue>>;

/** Any `@nestjs/microservices` context (`RmqContext`, `KafkaContext`, `NatsContext`, `MqttContext`, `TcpContext`, `RedisContext`). */
export interface RpcContextLike {
  getArgs(): unknown;
}

/**
 * A message that carries its key beside its headers: the `OutboxEnvelope` that
 * `ClientProxyPublisher` sends on TCP, Redis, NATS and MQTT, what an `@OnOutboxMessage()`
 * handler receives (`OutboxHandlerMessage`), a publisher's `OutboxRecord`.
 */
export interface KeyedMessageLike {
  readonly key: string | null;
  readonly headers: Readonly<Record<string, unknown>>;
}

/**
 * Header bytes that are not valid UTF-8 would all decode to U+FFFD, so distinct binary ids would
 * collide: they are written as `bin:` and their hex instead. Valid UTF-8 keeps its text, as
 * before (ids already recorded stay the same).
 */
const BINARY_MESSAGE_ID_PREFIX = 'bin:';

function bytesToText(bytes: Buffer): string {
  const decoded = bytes.toString('utf8');
  return Buffer.from(decoded, 'utf8').equals(bytes)
    ? decoded
    : `${BINARY_MESSAGE_ID_PREFIX}${bytes.toString('hex')}`;
}

/**
 * A header's value as text (a string, bytes, or a whole number, which AMQP and a plain object of
 * headers can carry); undefined for a missing or empty one.
 */
export function headerText(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number') return Number.isSafeInteger(value) ? String(value) : undefined;
  if (value instanceof Uint8Array) {
    const bytes = Buffer.isBuffer(value)
      ? value
      : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    return bytes.length === 0 ? undefined : bytesToText(bytes);
  }
  // A repeated header arrives as an array; the outbox sets it once, so the first value is it.
  if (Array.isArray(value)) return headerText(value[0]);
  return undefined;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

/** A header of an amqplib message's `properties.headers`. */
export function amqpHeader(message: AmqpMessageLike, name: string): string | undefined {
  return headerText(message.properties.headers?.[name]);
}

/** A header of a kafkajs message. */
export function kafkaHeader(message: KafkaMessageLike, name: string): string | undefined {
  return headerText(message.headers?.[name]);
}

/** The kafkajs message itself, when given its `eachMessage` payload. */
export function kafkaMessageOf(message: KafkaMessageLike | KafkaEachMessageLike): KafkaMessageLike {
  return 'message' in message && isObject(message.message)
    ? message.message
    : (message as KafkaMessageLike);
}

/** A NATS header (`MsgHdrs#get` answers '' for a missing one, a `Map` undefined). */
export function natsHeader(
  headers: { get(name: string): unknown },
  name: string,
): string | undefined {
  return headerText(headers.get(name));
}

/** A field of a Redis stream entry, in any of the shapes of {@link RedisStreamEntryLike}. */
export function redisStreamField(entry: RedisStreamEntryLike, name: string): string | undefined {
  if (Array.isArray(entry)) {
    const fields: unknown = entry[1];
    return Array.isArray(fields) ? flatField(fields, name) : undefined;
  }
  const object = entry as Record<string, unknown>;
  const message = object.message;
  const fields = isObject(message) && !Buffer.isBuffer(message) ? message : object;
  return Object.hasOwn(fields, name) ? headerText(fields[name]) : undefined;
}

/** A field of ioredis' `[field, value, …]`: names sit at even places, a value is never taken for one. */
export function flatField(fields: readonly unknown[], name: string): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (headerText(fields[i]) === name) return headerText(fields[i + 1]);
  }
  return undefined;
}

/** An `OutboxEnvelope`: the whole shape, so a payload that merely has a `messageId` is not one. */
export function isOutboxEnvelope(
  data: unknown,
): data is { messageId: string; key: string | null; headers: Record<string, unknown> } {
  return (
    isObject(data) &&
    typeof data.messageId === 'string' &&
    typeof data.type === 'string' &&
    isObject(data.headers) &&
    'payload' in data
  );
}

/** What a Nest microservice context carries of the transport's own message. */
export type ContextMessage =
  | { readonly kind: 'amqp'; readonly message: AmqpMessageLike }
  | { readonly kind: 'kafka'; readonly message: KafkaMessageLike }
  | { readonly kind: 'headers'; readonly get: (name: string) => string | undefined }
  | { readonly kind: 'none' };

/**
 * The transport's message behind a Nest context: the AMQP message (`RmqContext`), the Kafka
 * message (`KafkaContext`), NATS headers (`NatsContext`), MQTT 5 user properties (`MqttContext`;
 * none on MQTT 3.1.1, where the envelope carries everything), or nothing (TCP, Redis).
 */
export function contextMessage(context: RpcContextLike): ContextMessage {
  const ctx = context as {
    getMessage?: () => unknown;
    getHeaders?: () => unknown;
    getPacket?: () => unknown;
  };
  if (typeof ctx.getMessage === 'function') {
    const message = ctx.getMessage();
    if (isObject(message)) {
      if ('properties' in message)
        return { kind: 'amqp', message: message as unknown as AmqpMessageLike };
      if ('headers' in message) return { kind: 'kafka', message };
    }
  }
  if (typeof ctx.getHeaders === 'function') {
    const headers = ctx.getHeaders() as { get?: (name: string) => unknown } | undefined | null;
    if (typeof headers?.get === 'function') {
      const get = headers.get.bind(headers);
      return { kind: 'headers', get: (name) => headerText(get(name)) };
    }
  }
  if (typeof ctx.getPacket === 'function') {
    const packet = ctx.getPacket() as
      { properties?: { userProperties?: Record<string, unknown> } } | undefined;
    const properties = packet?.properties?.userProperties;
    if (isObject(properties)) {
      return { kind: 'headers', get: (name) => headerText(properties[name]) };
    }
  }
  return { kind: 'none' };
}

/** A header of the transport's message behind a Nest context, as {@link contextMessage} finds it. */
export function contextHeader(found: ContextMessage, name: string): string | undefined {
  switch (found.kind) {
    case 'amqp':
      return amqpHeader(found.message, name);
    case 'kafka':
      return kafkaHeader(found.message, name);
    case 'headers':
      return found.get(name);
    case 'none':
      return undefined;
  }
}

/** The CloudEvent attributes of an amqplib message (binary mode's headers, or a structured body). */
export function amqpCloudEvent(message: AmqpMessageLike): CloudEventAttributeReader {
  return cloudEventAttributes({
    header: (name) => amqpHeader(message, name),
    contentType: headerText(message.properties.contentType),
    body: () => message.content,
  });
}

/** The CloudEvent attributes of a kafkajs message (`ce_` headers, or a structured value). */
export function kafkaCloudEvent(message: KafkaMessageLike): CloudEventAttributeReader {
  return cloudEventAttributes({
    header: (name) => kafkaHeader(message, name),
    contentType: kafkaHeader(message, 'content-type'),
    body: () => message.value,
  });
}

/**
 * The CloudEvent attributes of a NATS or JetStream message (percent-encoded `ce-` headers, or a
 * structured body, told by its `Content-Type` header).
 */
export function natsCloudEvent(
  headers: { get(name: string): unknown },
  data?: () => unknown,
): CloudEventAttributeReader {
  return cloudEventAttributes({
    header: (name) => natsHeader(headers, name),
    contentType: natsHeader(headers, 'Content-Type') ?? natsHeader(headers, 'content-type'),
    body: data ?? (() => undefined),
  });
}

/**
 * The CloudEvent attributes of a message whose metadata and body are fields looked up by name (a
 * Redis stream entry): `ce_` fields in binary mode, or a structured event in the `payload` field
 * told by a `content-type` field.
 */
export function fieldsCloudEvent(
  field: (name: string) => string | undefined,
): CloudEventAttributeReader {
  return cloudEventAttributes({
    header: field,
    contentType: field('content-type'),
    body: () => field('payload'),
  });
}

/**
 * The outbox message id of an amqplib message: the outbox header, else a CloudEvent's `id`, else
 * the `messageId` property.
 */
export function amqpMessageId(message: AmqpMessageLike): string | undefined {
  // The outbox header first: it is specific to the outbox, while any producer may set messageId.
  return (
    amqpHeader(message, OUTBOX_HEADER_MESSAGE_ID) ??
    amqpCloudEvent(message)('id') ??
    headerText(message.properties.messageId)
  );
}

/** The outbox message id of a kafkajs message: the outbox header, else a CloudEvent's `id`. */
export function kafkaMessageId(message: KafkaMessageLike): string | undefined {
  return kafkaHeader(message, OUTBOX_HEADER_MESSAGE_ID) ?? kafkaCloudEvent(message)('id');
}
