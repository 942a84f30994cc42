import { OUTBOX_HEADER_MESSAGE_ID } from '../outbox.constants';
import { canonicalMessageId } from './canonical-message-id';
import { MessageIdMissingError } from './message-id-missing.error';
import {
  amqpMessageId,
  contextHeader,
  contextMessage,
  fieldsCloudEvent,
  headerText,
  isOutboxEnvelope,
  kafkaMessageId,
  kafkaMessageOf,
  natsCloudEvent,
  natsHeader,
  redisStreamField,
  type AmqpMessageLike,
  type JetStreamMessageLike,
  type KafkaEachMessageLike,
  type KafkaMessageLike,
  type RedisStreamEntryLike,
  type RpcContextLike,
} from './received-message';

export type {
  AmqpMessageLike,
  JetStreamMessageLike,
  KafkaEachMessageLike,
  KafkaHeaderValue,
  KafkaMessageLike,
  NatsHeadersLike,
  RedisStreamEntryLike,
  RedisStreamValue,
  RpcContextLike,
} from './received-message';

const AMQP_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}, then a CloudEvent's id (cloudEvents_id header or structured body), then property messageId`;
const KAFKA_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}, then a CloudEvent's id (ce_id header or structured value)`;
const REDIS_LOOKED = `field ${OUTBOX_HEADER_MESSAGE_ID} of the stream entry, then a CloudEvent's id (ce_id field, or the payload of a structured event)`;

/**
 * The message id of an amqplib message (`channel.consume` callback, `channel.get`): the
 * `x-outbox-message-id` header, else the `id` of a CloudEvent (a `cloudEvents_id` or
 * `cloudEvents:id` header in binary mode, the body's `id` in structured mode: pass the whole
 * message, with its `content`), else the AMQP `messageId` property. `RabbitMqPublisher` sets the
 * header (or, with `cloudEvents`, the CloudEvent) and the property; `ClientProxyPublisher` over
 * `ClientRMQ` both.
 *
 * @throws MessageIdMissingError when none is there.
 */
export function messageIdFromAmqp(message: AmqpMessageLike): string {
  const id = amqpMessageId(message);
  if (id === undefined) throw new MessageIdMissingError('amqp', AMQP_LOOKED);
  return canonicalMessageId(id);
}

/**
 * The message id of a kafkajs message, or of the `eachMessage` payload around it: the
 * `x-outbox-message-id` header (set by `KafkaPublisher` and by `ClientProxyPublisher` over
 * `ClientKafka`), else the `id` of a CloudEvent (`KafkaPublisher` with `cloudEvents`): its
 * `ce_id` header in binary mode, its value's `id` in structured mode.
 *
 * @throws MessageIdMissingError when neither is there.
 */
export function messageIdFromKafka(message: KafkaMessageLike | KafkaEachMessageLike): string {
  const id = kafkaMessageId(kafkaMessageOf(message));
  if (id === undefined) throw new MessageIdMissingError('kafka', KAFKA_LOOKED);
  return canonicalMessageId(id);
}

/** JetStream's own deduplication id, which `JetStreamPublisher` sets to the message id. */
const NATS_MSG_ID_HEADER = 'Nats-Msg-Id';
const JETSTREAM_LOOKED = `header ${OUTBOX_HEADER_MESSAGE_ID}, then a CloudEvent's id (ce-id header or structured body), then header ${NATS_MSG_ID_HEADER}`;

/**
 * The message id of a message a JetStream consumer received (`JsMsg`): the `x-outbox-message-id`
 * header, else a CloudEvent's `id` (a `ce-id` header in binary mode, the body's `id` in
 * structured mode), else `Nats-Msg-Id` (set by `JetStreamPublisher`, with or without
 * `cloudEvents`: the id the stream deduplicated the publish by).
 *
 * @throws MessageIdMissingError when neither is there.
 */
export function messageIdFromJetStream(message: JetStreamMessageLike): string {
  const headers = message.headers;
  const id =
    headers === undefined
      ? undefined
      : (natsHeader(headers, OUTBOX_HEADER_MESSAGE_ID) ??
        natsCloudEvent(headers, () => message.data)('id') ??
        natsHeader(headers, NATS_MSG_ID_HEADER));
  if (id === undefined) throw new MessageIdMissingError('jetstream', JETSTREAM_LOOKED);
  return canonicalMessageId(id);
}

/**
 * The message id of a Redis stream entry read with `XREADGROUP` (or `XRANGE`): its
 * `x-outbox-message-id` field, set by `RedisStreamsPublisher`, else a CloudEvent's `id` (its
 * `ce_id` field, or the `payload` of a structured event). Takes the entry as ioredis returns
 * it (`[id, [field, value, …]]`, text or Buffers), as node-redis does (`{ id, message }`), or its
 * fields as an object.
 *
 * @throws MessageIdMissingError when the field is not there.
 */
export function messageIdFromRedisStream(entry: RedisStreamEntryLike): string {
  const field = (name: string): string | undefined => redisStreamField(entry, name);
  const id =
    typeof entry === 'object' && entry !== null
      ? (field(OUTBOX_HEADER_MESSAGE_ID) ?? fieldsCloudEvent(field)('id'))
      : undefined;
  if (id === undefined) throw new MessageIdMissingError('redis-stream', REDIS_LOOKED);
  return canonicalMessageId(id);
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
  const found = contextMessage(context);
  const id =
    (found.kind === 'amqp'
      ? amqpMessageId(found.message)
      : found.kind === 'kafka'
        ? kafkaMessageId(found.message)
        : contextHeader(found, OUTBOX_HEADER_MESSAGE_ID)) ??
    (isOutboxEnvelope(data) ? headerText(data.messageId) : undefined);
  if (id === undefined) {
    throw new MessageIdMissingError(
      'rpc-context',
      `the transport's ${OUTBOX_HEADER_MESSAGE_ID} header or AMQP messageId, then the messageId of an OutboxEnvelope payload`,
    );
  }
  return canonicalMessageId(id);
}
