import { OUTBOX_HEADER_MESSAGE_ID } from '../outbox.constants';
import { canonicalMessageId } from './canonical-message-id';
import { MessageIdMissingError } from './message-id-missing.error';

// Structural types, so the inbox needs neither amqplib, kafkajs nor @nestjs/microservices
// installed: their message and context objects fit these shapes.

/** The part of an amqplib `ConsumeMessage` (or `GetMessage`) that carries the id. */
export interface AmqpMessageLike {
  readonly properties: {
    readonly messageId?: unknown;
    readonly headers?: Readonly<Record<string, unknown>> | null;
  };
}

/** A Kafka header value as kafkajs delivers it (Nest's Kafka server decodes it to a string). */
export type KafkaHeaderValue = Buffer | string | readonly (Buffer | string)[] | null | undefined;

/** The part of a kafkajs `KafkaMessage` that carries the id. */
export interface KafkaMessageLike {
  readonly headers?: Readonly<Record<string, KafkaHeaderValue>> | null;
}

/** The part of a kafkajs `EachMessagePayload` that carries the id. */
export interface KafkaEachMessageLike {
  readonly message: KafkaMessageLike;
}

/**
 * The part of a `JsMsg` (a message a JetStream consumer of `@nats-io/jetstream` got) that carries
 * the id: its NATS headers (`MsgHdrs#get` answers '' for a missing header).
 */
export interface JetStreamMessageLike {
  readonly headers?: { get(name: string): string } | undefined;
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
 * Header bytes that are not valid UTF-8 would all decode to U+FFFD, so distinct binary ids would
 * collide: they are written as `bin:` and their hex instead. Valid UTF-8 keeps its text, as
 * before (ids already recorded stay the same).
 */
const BINARY_MESSAGE_ID_PREFIX = 'bin:';

function bytesToId(bytes: Buffer): string {
  const decoded = bytes.toString('utf8');
  return Buffer.from(decoded, 'utf8').equals(bytes)
    ? decoded
    : `${BINARY_MESSAGE_ID_PREFIX}${bytes.toString('hex')}`;
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (Buffer.isBuffer(value)) return value.length === 0 ? undefined : bytesToId(value);
  // A repeated header arrives as an array; the outbox sets it once, so the first value is it.
  if (Array.isArray(value)) return text(value[0]);
  return undefined;
}

function fromAmqp(message: AmqpMessageLike): string | undefined {
  const { headers, messageId } = message.properties;
  // The outbox header first: it is specific to the outbox, while any producer may set messageId.
  return text(headers?.[OUTBOX_HEADER_MESSAGE_ID]) ?? text(messageId);
}

function fromKafka(message: KafkaMessageLike): string | undefined {
  return text(message.headers?.[OUTBOX_HEADER_MESSAGE_ID]);
}

function fromRedisStream(entry: RedisStreamEntryLike): string | undefined {
  if (Array.isArray(entry)) {
    const fields: unknown = entry[1];
    if (!Array.isArray(fields)) return undefined;
    // Field names sit at even places; a value is never taken for a name.
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (text(fields[i]) === OUTBOX_HEADER_MESSAGE_ID) return text(fields[i + 1]);
    }
    return undefined;
  }
  const object = entry as Record<string, unknown>;
  const message = object.message;
  const fields =
    typeof message === 'object' && message !== null && !Buffer.isBuffer(message)
      ? (message as Record<string, unknown>)
      : object;
  return Object.hasOwn(fields, OUTBOX_HEADER_MESSAGE_ID)
    ? text(fields[OUTBOX_HEADER_MESSAGE_ID])
    : undefined;
}

const AMQP_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}, then property messageId`;
const KAFKA_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}`;
const REDIS_LOOKED = `field ${OUTBOX_HEADER_MESSAGE_ID} of the stream entry`;

/**
 * The message id of an amqplib message (`channel.consume` callback, `channel.get`): the
 * `x-outbox-message-id` header, else the AMQP `messageId` property. Both are set by
 * `RabbitMqPublisher` and by `ClientProxyPublisher` over `ClientRMQ`.
 *
 * @throws MessageIdMissingError when neither is there.
 */
export function messageIdFromAmqp(message: AmqpMessageLike): string {
  const id = fromAmqp(message);
  if (id === undefined) throw new MessageIdMissingError('amqp', AMQP_LOOKED);
  return canonicalMessageId(id);
}

/**
 * The message id of a kafkajs message, or of the `eachMessage` payload around it: the
 * `x-outbox-message-id` header (set by `KafkaPublisher` and by `ClientProxyPublisher` over
 * `ClientKafka`).
 *
 * @throws MessageIdMissingError when the header is not there.
 */
export function messageIdFromKafka(message: KafkaMessageLike | KafkaEachMessageLike): string {
  const inner: KafkaMessageLike =
    'message' in message && typeof message.message === 'object' && message.message !== null
      ? message.message
      : (message as KafkaMessageLike);
  const id = fromKafka(inner);
  if (id === undefined) throw new MessageIdMissingError('kafka', KAFKA_LOOKED);
  return canonicalMessageId(id);
}

/** JetStream's own deduplication id, which `JetStreamPublisher` sets to the message id. */
const NATS_MSG_ID_HEADER = 'Nats-Msg-Id';
const JETSTREAM_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}, then header ${NATS_MSG_ID_HEADER}`;

/**
 * The message id of a message a JetStream consumer received (`JsMsg`): the `x-outbox-message-id`
 * header, else `Nats-Msg-Id` (both set by `JetStreamPublisher`; the second is the id the stream
 * deduplicated the publish by).
 *
 * @throws MessageIdMissingError when neither is there.
 */
export function messageIdFromJetStream(message: JetStreamMessageLike): string {
  const headers = message.headers;
  const id =
    headers === undefined
      ? undefined
      : (text(headers.get(OUTBOX_HEADER_MESSAGE_ID)) ?? text(headers.get(NATS_MSG_ID_HEADER)));
  if (id === undefined) throw new MessageIdMissingError('jetstream', JETSTREAM_LOOKED);
  return canonicalMessageId(id);
}

/**
 * The message id of a Redis stream entry read with `XREADGROUP` (or `XRANGE`): its
 * `x-outbox-message-id` field, set by `RedisStreamsPublisher`. Takes the entry as ioredis returns
 * it (`[id, [field, value, …]]`, text or Buffers), as node-redis does (`{ id, message }`), or its
 * fields as an object.
 *
 * @throws MessageIdMissingError when the field is not there.
 */
export function messageIdFromRedisStream(entry: RedisStreamEntryLike): string {
  const id = typeof entry === 'object' && entry !== null ? fromRedisStream(entry) : undefined;
  if (id === undefined) throw new MessageIdMissingError('redis-stream', REDIS_LOOKED);
  return canonicalMessageId(id);
}

function isEnvelope(data: unknown): data is { messageId: string } {
  if (typeof data !== 'object' || data === null) return false;
  const d = data as Record<string, unknown>;
  // The whole OutboxEnvelope shape, so a business payload that merely has a `messageId` field
  // is never taken for the outbox's id.
  return (
    typeof d.messageId === 'string' &&
    typeof d.type === 'string' &&
    typeof d.headers === 'object' &&
    d.headers !== null &&
    'payload' in d
  );
}

function fromContext(context: RpcContextLike): string | undefined {
  const ctx = context as {
    getMessage?: () => unknown;
    getHeaders?: () => unknown;
    getPacket?: () => unknown;
  };
  // RmqContext and KafkaContext: the transport's own message.
  if (typeof ctx.getMessage === 'function') {
    const message = ctx.getMessage();
    if (typeof message === 'object' && message !== null) {
      if ('properties' in message) return fromAmqp(message as AmqpMessageLike);
      if ('headers' in message) return fromKafka(message as KafkaMessageLike);
    }
  }
  // NatsContext: NATS headers (MsgHdrs#get answers '' for a missing header).
  if (typeof ctx.getHeaders === 'function') {
    const headers = ctx.getHeaders() as { get?: (name: string) => unknown } | undefined | null;
    if (typeof headers?.get === 'function') {
      const id = text(headers.get(OUTBOX_HEADER_MESSAGE_ID));
      if (id !== undefined) return id;
    }
  }
  // MqttContext: MQTT 5 user properties (absent on MQTT 3.1.1; the envelope has the id then).
  if (typeof ctx.getPacket === 'function') {
    const packet = ctx.getPacket() as
      { properties?: { userProperties?: Record<string, unknown> } } | undefined;
    const id = text(packet?.properties?.userProperties?.[OUTBOX_HEADER_MESSAGE_ID]);
    if (id !== undefined) return id;
  }
  return undefined;
}

/**
 * The message id in a Nest microservice handler, from its `@Ctx()` context and `@Payload()`
 * data, wherever `ClientProxyPublisher` put it on that transport: the AMQP message's header or
 * `messageId` property (`RmqContext`), the Kafka header (`KafkaContext`), the NATS header
 * (`NatsContext`), the MQTT 5 user property (`MqttContext`), else the `messageId` of the
 * `OutboxEnvelope` that is the data on TCP, Redis, NATS and MQTT.
 *
 * @throws MessageIdMissingError when none of them has it.
 */
export function messageIdFromRpcContext(context: RpcContextLike, data?: unknown): string {
  const id = fromContext(context) ?? (isEnvelope(data) ? text(data.messageId) : undefined);
  if (id === undefined) {
    throw new MessageIdMissingError(
      'rpc-context',
      `the transport's ${OUTBOX_HEADER_MESSAGE_ID} header or AMQP messageId, then the messageId of an OutboxEnvelope payload`,
    );
  }
  return canonicalMessageId(id);
}
