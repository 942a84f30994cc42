import type { SqsMessageLike } from '../publishers/aws/aws-received-message';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_SEQUENCE,
} from '../outbox.constants';
import { InboxMessages } from './inbox.messages';
import { InvalidSequenceError } from './invalid-sequence.error';
import {
  cloudEventAttributes,
  sequenceOfCloudEvent,
  type CloudEventAttributeReader,
} from '../publishers/cloud-events/received-cloud-event';
import {
  amqpCloudEvent,
  amqpHeader,
  kafkaCloudEvent,
  natsCloudEvent,
  contextHeader,
  contextMessage,
  fieldsCloudEvent,
  flatField,
  headerText,
  isOutboxEnvelope,
  natsHeader,
  redisStreamField,
  type AmqpMessageLike,
  type JetStreamMessageLike,
  type KafkaEachMessageLike,
  type KafkaMessageLike,
  type KeyedMessageLike,
  type NatsHeadersLike,
  type RedisStreamEntryLike,
  type RedisStreamValue,
  type RpcContextLike,
} from './received-message';
import { sqsAttribute, sqsCloudEvent } from './received-sqs-message';
import type { SequencedMessage } from './sequence.interfaces';
import { UnknownMessageShapeError } from './unknown-message-shape.error';

/**
 * A message as a consumer's client library hands it over, in any shape `sequenceOf` reads (see
 * there), or the headers of one.
 */
export type ReceivedMessageLike =
  | AmqpMessageLike
  | KafkaMessageLike
  | KafkaEachMessageLike
  | JetStreamMessageLike
  | NatsHeadersLike
  | RedisStreamEntryLike
  | readonly RedisStreamValue[]
  | SqsMessageLike
  | RpcContextLike
  | KeyedMessageLike
  | Readonly<Record<string, unknown>>
  | null
  | undefined;

/** The shapes sequenceOf reads, as its error names them. */
const READS: readonly string[] = [
  'an amqplib message or its properties.headers',
  'a kafkajs message or its eachMessage payload',
  'a JetStream or NATS message, or its headers (MsgHdrs)',
  "a Redis stream entry (ioredis' [id, [field, value, …]], its field list, node-redis' { id, message })",
  'an SQS message (ReceiveMessage, a Lambda record, an SNS notification body)',
  'a Nest microservice context (with the handler data as second argument)',
  'an OutboxEnvelope, an @OnOutboxMessage() message or an OutboxRecord',
  'a plain object of headers',
  'null or undefined (no headers)',
];

/** What a message carries: its key and its number as text, and where they were looked for. */
interface Carried {
  readonly key: string | undefined;
  readonly sequence: string | undefined;
  readonly lookedAt: string;
  /** Any other header the message carries, read the same way. */
  readonly header: (name: string) => string | undefined;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

const isPlainObject = (value: object): boolean => {
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
};

const KEY_HEADER = `header ${OUTBOX_HEADER_KEY}`;

/**
 * What a message carries, read as a CloudEvent where the outbox's own headers are missing: the
 * `partitionkey` extension as the key, the `sequence` extension (its padding dropped) as the
 * number.
 */
function orCloudEvent(found: Carried, event: CloudEventAttributeReader): Carried {
  if (found.key !== undefined && found.sequence !== undefined) return found;
  const sequence = found.sequence ?? sequenceOfCloudEvent(event('sequence'));
  return {
    ...found,
    key: found.key ?? (sequence === undefined ? undefined : event('partitionkey')),
    sequence,
    lookedAt: `${found.lookedAt}, then a CloudEvent's partitionkey`,
  };
}

/** The CloudEvent attributes in binary mode among headers looked up by name. */
const cloudEventIn = (header: (name: string) => string | undefined): CloudEventAttributeReader =>
  cloudEventAttributes({ header, contentType: undefined, body: () => undefined });

/** A plain object of headers, with the key beside it when the message carries it apart. */
function fromHeaders(
  headers: Readonly<Record<string, unknown>> | null | undefined,
  key?: unknown,
  keyAt?: string,
): Carried {
  const header = (name: string): string | undefined => headerText(headers?.[name]);
  return orCloudEvent(
    {
      key: headerText(headers?.[OUTBOX_HEADER_KEY]) ?? headerText(key),
      sequence: headerText(headers?.[OUTBOX_HEADER_SEQUENCE]),
      lookedAt: keyAt === undefined ? KEY_HEADER : `${KEY_HEADER}, then ${keyAt}`,
      header,
    },
    // A Redis stream entry's fields as an object may hold a structured event in `payload`.
    fieldsCloudEvent(header),
  );
}

function fromLookup(
  get: (name: string) => string | undefined,
  lookedAt = KEY_HEADER,
  event: CloudEventAttributeReader = cloudEventIn(get),
): Carried {
  return orCloudEvent(
    { key: get(OUTBOX_HEADER_KEY), sequence: get(OUTBOX_HEADER_SEQUENCE), lookedAt, header: get },
    event,
  );
}

/** A Redis stream entry's fields, a CloudEvent's among them. */
const fromFields = (field: (name: string) => string | undefined): Carried =>
  fromLookup(field, 'field x-outbox-key', fieldsCloudEvent(field));

const isRedisValue = (value: unknown): boolean =>
  typeof value === 'string' || Buffer.isBuffer(value);

/** A Nest context: the transport's message first, then the `OutboxEnvelope` that is the data. */
function fromContext(context: RpcContextLike, data: unknown): Carried {
  const found = contextMessage(context);
  // The transport's message as it reads alone (its CloudEvent attributes, a Kafka record key).
  const transport =
    found.kind === 'amqp'
      ? fromAmqp(found.message)
      : found.kind === 'kafka'
        ? fromKafka(found.message)
        : fromLookup((name) => contextHeader(found, name));
  const envelope = isOutboxEnvelope(data) ? fromHeaders(data.headers, data.key) : undefined;
  return {
    key: transport.key ?? envelope?.key,
    sequence: transport.sequence ?? envelope?.sequence,
    lookedAt: `the transport's ${OUTBOX_HEADER_KEY} header, the Kafka record key, a CloudEvent's partitionkey, the key of an OutboxEnvelope data`,
    header: (name) => contextHeader(found, name) ?? envelope?.header(name),
  };
}

function fromAmqp(message: AmqpMessageLike): Carried {
  return fromLookup((name) => amqpHeader(message, name), KEY_HEADER, amqpCloudEvent(message));
}

/** A kafkajs message: its key is the record key (ClientProxyPublisher sends no key header). */
function fromKafka(message: KafkaMessageLike): Carried {
  const headers = isObject(message.headers) ? message.headers : undefined;
  const found = fromHeaders(headers, message.key, 'the key of the message (a Kafka record key)');
  return orCloudEvent(found, kafkaCloudEvent(message));
}

/**
 * What `message` carries, by its shape; undefined for a shape this does not know. The order
 * matters where shapes overlap: an object that holds the outbox's headers itself is a headers
 * object, whatever else its names are.
 */
function carried(message: unknown, data: unknown): Carried | undefined {
  if (message === undefined || message === null)
    return { key: undefined, sequence: undefined, lookedAt: KEY_HEADER, header: () => undefined };
  if (Array.isArray(message)) {
    // ioredis' entry [id, [field, value, …]], or its field list alone.
    if (message.length === 2 && isRedisValue(message[0]) && Array.isArray(message[1])) {
      const fields: unknown[] = message[1] as unknown[];
      return fromFields((name) => flatField(fields, name));
    }
    if (message.length % 2 === 0 && message.every(isRedisValue)) {
      return fromFields((name) => flatField(message, name));
    }
    return undefined;
  }
  if (!isObject(message) || ArrayBuffer.isView(message)) return undefined;
  if (typeof message.getArgs === 'function')
    return fromContext(message as unknown as RpcContextLike, data);
  // MsgHdrs (NATS, JetStream), or a Map of headers.
  if (typeof message.get === 'function') {
    const headers = message as { get(name: string): unknown };
    return fromLookup((name) => natsHeader(headers, name), KEY_HEADER, natsCloudEvent(headers));
  }
  const own = (name: string): boolean => Object.hasOwn(message, name);
  if (
    isPlainObject(message) &&
    (own(OUTBOX_HEADER_KEY) || own(OUTBOX_HEADER_SEQUENCE) || own(OUTBOX_HEADER_MESSAGE_ID))
  ) {
    return fromHeaders(message);
  }
  if (isObject(message.properties)) return fromAmqp(message as unknown as AmqpMessageLike);
  if (isObject(message.message)) {
    const inner = message.message;
    // kafkajs' eachMessage payload ({ topic, partition, message }), else node-redis' { id, message }.
    if ('partition' in message || 'offset' in inner || 'value' in inner) {
      return carried(inner, data);
    }
    return fromFields((name) => redisStreamField(message as RedisStreamEntryLike, name));
  }
  // A JetStream JsMsg or a NATS Msg: its headers are MsgHdrs, or undefined when it has none.
  if ('headers' in message && typeof message.subject === 'string') {
    const headers = message.headers;
    if (headers === undefined || headers === null) return fromHeaders(undefined);
    if (!isObject(headers) || typeof headers.get !== 'function') return undefined;
    const get = headers as { get(name: string): unknown };
    return fromLookup(
      (name) => natsHeader(get, name),
      KEY_HEADER,
      natsCloudEvent(get, () => message.data),
    );
  }
  if (
    'MessageAttributes' in message ||
    'messageAttributes' in message ||
    typeof message.Body === 'string' ||
    (typeof message.body === 'string' && 'receiptHandle' in message)
  ) {
    const sqs = message as SqsMessageLike;
    return fromLookup(
      (name) => sqsAttribute(sqs, name),
      `message attribute ${OUTBOX_HEADER_KEY}, direct or in an SNS notification body`,
      sqsCloudEvent(sqs),
    );
  }
  // A kafkajs message ({ key, value, headers, offset }), an OutboxEnvelope, an @OnOutboxMessage()
  // message or an OutboxRecord: the key beside the headers.
  if ('key' in message && ('headers' in message || 'value' in message)) {
    return fromKafka(message);
  }
  if (isPlainObject(message)) return fromHeaders(message);
  return undefined;
}

/** What `message` carries, in any shape `sequenceOf` reads; throws for another. */
function carriedBy(message: ReceivedMessageLike, data: unknown): Carried {
  const found = carried(message, data);
  if (found === undefined) throw new UnknownMessageShapeError(describeValue(message), READS);
  return found;
}

/**
 * One header of a received message, in any shape `sequenceOf` reads (a Nest context with its
 * handler's data as `data`); undefined when the message does not carry it.
 *
 * @throws UnknownMessageShapeError for a shape it does not know.
 */
export function receivedHeader(
  message: ReceivedMessageLike,
  name: string,
  data?: unknown,
): string | undefined {
  return carriedBy(message, data).header(name);
}

function describeValue(value: unknown): string {
  if (Array.isArray(value)) return `an array of ${value.length} that is no Redis stream entry`;
  if (typeof value !== 'object' || value === null) return `a ${typeof value}`;
  if (Buffer.isBuffer(value)) return 'a Buffer (a message body?)';
  if (isPlainObject(value)) {
    const keys = Object.keys(value);
    const listed = keys.slice(0, 5).join(', ') + (keys.length > 5 ? ', …' : '');
    return `an object with the keys ${listed}`;
  }
  const name = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)
    ?.constructor?.name;
  return typeof name === 'string' && name !== '' ? `an instance of ${name}` : 'an object';
}

/**
 * A message's key and number (`x-outbox-key`, `x-outbox-sequence`), from the message as the
 * consumer's client library hands it over: an amqplib message or its `properties.headers`; a
 * kafkajs message or its `eachMessage` payload (the key is its record key); a JetStream `JsMsg`,
 * a NATS message or their headers (`MsgHdrs`); a Redis stream entry from ioredis
 * (`[id, [field, value, …]]`, text or Buffers) or node-redis (`{ id, message }`); an SQS message
 * (`ReceiveMessage`, a Lambda record; from `SqsPublisher`, or `SnsPublisher` with or without raw
 * delivery); a Nest microservice context with the handler's data (`sequenceOf(context, data)`);
 * an `OutboxEnvelope`, an `@OnOutboxMessage()` message; or a plain object of headers.
 *
 * Answers null for a message without a number (no key, or a producer without
 * `ordering.sequence`), and for null or undefined (a message without headers).
 *
 * @throws UnknownMessageShapeError for anything else (a body, a string, another library's
 *   object): reading nothing there would turn the gap guard off without a word.
 * @throws InvalidSequenceError when the number is not a positive integer, or the message carries
 *   a number without its key (e.g. a Kafka message's headers alone: pass the whole message).
 */
export function sequenceOf(message: ReceivedMessageLike, data?: unknown): SequencedMessage | null {
  const found = carriedBy(message, data);
  const { key, sequence: raw } = found;
  if (raw === undefined) return null;
  const sequence = Number(raw);
  if (!/^[1-9][0-9]{0,15}$/.test(raw) || !Number.isSafeInteger(sequence)) {
    throw new InvalidSequenceError(
      `x-outbox-sequence ${JSON.stringify(raw)} is not a positive integer`,
      'The message was not numbered by nestjs-outbox, or its header was changed on the way.',
    );
  }
  if (key === undefined) {
    throw new InvalidSequenceError(
      InboxMessages.sequenceWithoutKey(raw, found.lookedAt),
      InboxMessages.sequenceWithoutKeyFix(),
    );
  }
  return { key, sequence };
}
