import type { Message as SqsMessage } from '@aws-sdk/client-sqs';
import * as natsTransport from '@nats-io/transport-node';
import {
  KafkaContext,
  MqttContext,
  NatsContext,
  RedisContext,
  RmqContext,
  TcpContext,
} from '@nestjs/microservices';
import type { ConsumeMessage } from 'amqplib';
import type { EachMessagePayload, KafkaMessage } from 'kafkajs';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_SEQUENCE,
  OUTBOX_HEADER_TYPE,
  type OutboxHandlerMessage,
} from '../../lib';
import {
  InvalidSequenceError,
  messageIdFromAmqp,
  messageIdFromJetStream,
  messageIdFromKafka,
  messageIdFromRedisStream,
  messageIdFromRpcContext,
  messageIdFromSqs,
  sequenceOf,
  UnknownMessageShapeError,
} from '../../lib/inbox';
import type { OutboxEnvelope } from '../../lib/publishers/microservices';
import { awsMessageParts } from '../../lib/publishers/aws/aws-message-attributes';

// sequenceOf reads the key and number of a message in every shape the consumers of the bundled
// publishers receive it, as the client library hands it over (built here as each publisher
// writes it; test/inbox/sequence-of-brokers.spec.ts sends them through the real brokers), tells
// a message without a number (null) from a shape it does not know (UnknownMessageShapeError),
// and refuses a number it cannot use (InvalidSequenceError). The id extractors read the same
// shapes through the same readers.

// The client's typings hide `headers` from this project's module resolution (see
// lib/publishers/jetstream/nats-client.ts): the real MsgHdrs, typed by what the test uses.
const natsHeaders = (
  natsTransport as unknown as {
    headers(): { set(name: string, value: string): void; get(name: string): string };
  }
).headers;

const id = '0190f6c4-8a31-7c3e-9b5e-1d2f3a4b5c6d';
const seq = { key: 'order-1', sequence: 3 };

/** What RabbitMqPublisher puts in properties.headers (outboxHeaders on, the default). */
function amqpMessage(headers: Record<string, unknown> | undefined): ConsumeMessage {
  return {
    content: Buffer.from('{"n":1}'),
    fields: {
      deliveryTag: 1,
      redelivered: false,
      exchange: '',
      routingKey: 'orders',
      consumerTag: 'c',
    },
    properties: {
      contentType: 'application/json',
      contentEncoding: 'utf-8',
      headers,
      deliveryMode: 2,
      priority: undefined,
      correlationId: undefined,
      replyTo: undefined,
      expiration: undefined,
      messageId: id,
      timestamp: 1_700_000_000,
      type: 't',
      userId: undefined,
      appId: 'nestjs-outbox',
      clusterId: undefined,
    },
  };
}

const amqpHeaders = {
  [OUTBOX_HEADER_SEQUENCE]: '3',
  [OUTBOX_HEADER_MESSAGE_ID]: id,
  [OUTBOX_HEADER_TYPE]: 't',
  [OUTBOX_HEADER_KEY]: 'order-1',
  'x-outbox-publish-id': '7',
};

/** What kafkajs hands eachMessage for a KafkaPublisher message: bytes, the key as the record key. */
function kafkaMessage(key: Buffer | null, sequence?: string): KafkaMessage {
  return {
    key,
    value: Buffer.from('{"n":1}'),
    timestamp: '1700000000000',
    attributes: 0,
    offset: '41',
    headers: {
      ...(sequence === undefined ? {} : { [OUTBOX_HEADER_SEQUENCE]: Buffer.from(sequence) }),
      [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(id),
      [OUTBOX_HEADER_TYPE]: Buffer.from('t'),
    },
  };
}

function eachMessage(message: KafkaMessage): EachMessagePayload {
  return {
    topic: 'orders',
    partition: 0,
    message,
    heartbeat: () => Promise.resolve(),
    pause: () => () => undefined,
  };
}

/** JetStreamPublisher's NATS headers. */
function jetStreamHeaders(withSequence = true) {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', id);
  h.set(OUTBOX_HEADER_MESSAGE_ID, id);
  h.set(OUTBOX_HEADER_TYPE, 't');
  h.set(OUTBOX_HEADER_KEY, 'order-1');
  if (withSequence) h.set(OUTBOX_HEADER_SEQUENCE, '3');
  return h;
}

/** RedisStreamsPublisher's XADD fields, as ioredis' XREADGROUP answers them. */
const redisFields = [
  OUTBOX_HEADER_MESSAGE_ID,
  id,
  OUTBOX_HEADER_TYPE,
  't',
  OUTBOX_HEADER_KEY,
  'order-1',
  OUTBOX_HEADER_SEQUENCE,
  '3',
  'payload',
  '{"n":1}',
];

/** An SQS message as ReceiveMessage answers it for what SqsPublisher sent. */
function sqsMessage(headers: Record<string, string>): SqsMessage {
  const parts = awsMessageParts({
    messageId: id,
    type: 't',
    key: 'order-1',
    headers,
    payload: '{"n":1}',
  });
  return {
    MessageId: 'sqs-own-id',
    ReceiptHandle: 'rh',
    MD5OfBody: 'x',
    Body: parts.body,
    MessageAttributes: parts.attributes,
  };
}

/** The body SNS puts in the queue of a subscription without raw message delivery. */
function snsNotificationBody(headers: Record<string, string>): string {
  const parts = awsMessageParts({
    messageId: id,
    type: 't',
    key: 'order-1',
    headers,
    payload: '{"n":1}',
  });
  return JSON.stringify({
    Type: 'Notification',
    MessageId: 'sns-own-id',
    TopicArn: 'arn:aws:sns:us-east-1:123456789012:orders',
    Message: parts.body,
    Timestamp: '2026-01-01T00:00:00.000Z',
    SignatureVersion: '1',
    MessageAttributes: Object.fromEntries(
      Object.entries(parts.attributes).map(([name, a]) => [
        name,
        { Type: a.DataType, Value: a.StringValue },
      ]),
    ),
  });
}

/** What ClientProxyPublisher sends as the data on TCP, Redis, NATS and MQTT. */
const envelope = (withSequence = true): OutboxEnvelope => ({
  messageId: id,
  type: 't',
  key: 'order-1',
  headers: withSequence ? { [OUTBOX_HEADER_SEQUENCE]: '3' } : {},
  payload: { n: 1 },
});

/** ClientProxyPublisher's headers: the message's own plus id and type, no key. */
const clientProxyHeaders = {
  [OUTBOX_HEADER_SEQUENCE]: '3',
  [OUTBOX_HEADER_MESSAGE_ID]: id,
  [OUTBOX_HEADER_TYPE]: 't',
};

describe('sequenceOf', () => {
  it('reads an amqplib message and its properties.headers (RabbitMqPublisher)', () => {
    const message = amqpMessage(amqpHeaders);
    expect(sequenceOf(message)).toEqual(seq);
    expect(sequenceOf(message.properties.headers)).toEqual(seq);
    expect(messageIdFromAmqp(message)).toBe(id);
  });

  it('reads a kafkajs message, its eachMessage payload, and Nest decoded headers (KafkaPublisher, ClientKafka)', () => {
    const message = kafkaMessage(Buffer.from('order-1'), '3');
    expect(sequenceOf(message)).toEqual(seq);
    expect(sequenceOf(eachMessage(message))).toEqual(seq);
    expect(messageIdFromKafka(eachMessage(message))).toBe(id);
    // Nest's Kafka server decodes key and headers to text.
    const decoded = { ...message, key: 'order-1', headers: { ...clientProxyHeaders } };
    expect(sequenceOf(decoded)).toEqual(seq);
  });

  it('reads a JetStream message and its MsgHdrs (JetStreamPublisher)', () => {
    const headers = jetStreamHeaders();
    expect(sequenceOf(headers)).toEqual(seq);
    const msg = { subject: 'orders', seq: 1, headers, data: new Uint8Array() };
    expect(sequenceOf(msg)).toEqual(seq);
    expect(messageIdFromJetStream(msg)).toBe(id);
  });

  it("reads ioredis' entries as text and as Buffers, their field list and node-redis' entries (RedisStreamsPublisher)", () => {
    expect(sequenceOf(['1700000000000-0', redisFields])).toEqual(seq);
    expect(sequenceOf(redisFields)).toEqual(seq);
    expect(
      sequenceOf([Buffer.from('1700000000000-0'), redisFields.map((f) => Buffer.from(f))]),
    ).toEqual(seq);
    const nodeRedis = {
      id: '1700000000000-0',
      message: Object.fromEntries(
        Array.from({ length: redisFields.length / 2 }, (_, i) => [
          redisFields[2 * i] ?? '',
          redisFields[2 * i + 1] ?? '',
        ]),
      ),
    };
    expect(sequenceOf(nodeRedis)).toEqual(seq);
    expect(messageIdFromRedisStream(['1-0', redisFields])).toBe(id);
    // A value is never taken for a field name.
    expect(sequenceOf(['1-0', ['note', OUTBOX_HEADER_SEQUENCE, 'payload', '{}']])).toBeNull();
  });

  it('reads SQS messages: one attribute each, headers folded into x-outbox-headers, Lambda records (SqsPublisher)', () => {
    const message = sqsMessage({ [OUTBOX_HEADER_SEQUENCE]: '3' });
    expect(message.MessageAttributes?.[OUTBOX_HEADER_SEQUENCE]?.StringValue).toBe('3');
    expect(sequenceOf(message)).toEqual(seq);
    expect(messageIdFromSqs(message)).toBe(id);
    // More headers than SQS's ten attributes take: they travel as one JSON attribute.
    const many = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`h${i}`, 'v']));
    const folded = sqsMessage({ ...many, [OUTBOX_HEADER_SEQUENCE]: '3' });
    expect(folded.MessageAttributes?.[OUTBOX_HEADER_SEQUENCE]).toBeUndefined();
    expect(sequenceOf(folded)).toEqual(seq);
    // A record of an AWS Lambda SQS event: camelCase.
    const lambda = {
      messageId: 'sqs-own-id',
      receiptHandle: 'rh',
      body: message.Body ?? '',
      attributes: {},
      messageAttributes: Object.fromEntries(
        Object.entries(message.MessageAttributes ?? {}).map(([name, a]) => [
          name,
          { stringValue: a.StringValue, dataType: a.DataType ?? 'String' },
        ]),
      ),
      md5OfBody: 'x',
      eventSource: 'aws:sqs',
      eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:orders',
      awsRegion: 'us-east-1',
    };
    expect(sequenceOf(lambda)).toEqual(seq);
  });

  it('reads SNS notifications in an SQS body, attributes one each or folded (SnsPublisher without raw delivery)', () => {
    const notified: SqsMessage = {
      MessageId: 'm',
      ReceiptHandle: 'rh',
      Body: snsNotificationBody({ [OUTBOX_HEADER_SEQUENCE]: '3' }),
    };
    expect(sequenceOf(notified)).toEqual(seq);
    expect(messageIdFromSqs(notified)).toBe(id);
    const many = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`h${i}`, 'v']));
    const folded: SqsMessage = {
      MessageId: 'm',
      ReceiptHandle: 'rh',
      Body: snsNotificationBody({ ...many, [OUTBOX_HEADER_SEQUENCE]: '3' }),
    };
    expect(sequenceOf(folded)).toEqual(seq);
  });

  it('reads Nest contexts with their data: RMQ, Kafka, NATS, MQTT, TCP and Redis (ClientProxyPublisher)', () => {
    const rmq = new RmqContext([
      amqpMessage({ ...clientProxyHeaders, [OUTBOX_HEADER_KEY]: 'order-1' }),
      {},
      'orders',
    ]);
    expect(sequenceOf(rmq, { n: 1 })).toEqual(seq);
    // Nest's Kafka server hands the context the message with key and headers decoded to text.
    const decoded = { ...kafkaMessage(null), key: 'order-1', headers: { ...clientProxyHeaders } };
    const kafka = new KafkaContext([
      decoded as unknown as KafkaMessage,
      0,
      'orders',
      {} as never,
      () => Promise.resolve(),
      {} as never,
    ]);
    expect(sequenceOf(kafka, { n: 1 })).toEqual(seq);
    const nats = natsHeaders();
    for (const [name, value] of Object.entries(clientProxyHeaders)) nats.set(name, value);
    expect(sequenceOf(new NatsContext(['orders', nats]), envelope())).toEqual(seq);
    const mqtt = new MqttContext([
      'orders',
      { cmd: 'publish', properties: { userProperties: { ...clientProxyHeaders } } } as never,
    ]);
    expect(sequenceOf(mqtt, envelope())).toEqual(seq);
    expect(sequenceOf(new TcpContext([{} as never, 'orders']), envelope())).toEqual(seq);
    expect(sequenceOf(new RedisContext(['orders']), envelope())).toEqual(seq);
    expect(messageIdFromRpcContext(new RedisContext(['orders']), envelope())).toBe(id);
    // Without the envelope a TCP or Redis context carries nothing.
    expect(sequenceOf(new TcpContext([{} as never, 'orders']), { n: 1 })).toBeNull();
  });

  it('reads an OutboxEnvelope, an @OnOutboxMessage() message and a plain object of headers', () => {
    expect(sequenceOf(envelope())).toEqual(seq);
    const local: OutboxHandlerMessage = {
      messageId: id,
      topic: 'orders',
      key: 'order-1',
      type: 't',
      payload: { n: 1 },
      rawPayload: '{"n":1}',
      headers: { [OUTBOX_HEADER_SEQUENCE]: '3' },
      attempts: 1,
      createdAt: new Date(),
      signal: new AbortController().signal,
    };
    expect(sequenceOf(local)).toEqual(seq);
    expect(sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: '7' })).toEqual({
      key: 'k',
      sequence: 7,
    });
    // A number as a number (an AMQP header of another producer).
    expect(sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: 3 })).toEqual({
      key: 'k',
      sequence: 3,
    });
  });

  it('answers null for a message of a known shape that carries no number', () => {
    expect(sequenceOf(amqpMessage({ [OUTBOX_HEADER_MESSAGE_ID]: id }))).toBeNull();
    expect(sequenceOf(amqpMessage(undefined))).toBeNull();
    expect(sequenceOf(eachMessage(kafkaMessage(null)))).toBeNull();
    expect(sequenceOf(jetStreamHeaders(false))).toBeNull();
    expect(
      sequenceOf({ subject: 'orders', headers: undefined, data: new Uint8Array() }),
    ).toBeNull();
    expect(sequenceOf(['1-0', ['payload', '{}']])).toBeNull();
    expect(sequenceOf(sqsMessage({}))).toBeNull();
    expect(sequenceOf({ MessageId: 'm', ReceiptHandle: 'rh', Body: '{"n":1}' })).toBeNull();
    expect(sequenceOf(envelope(false))).toBeNull();
    expect(sequenceOf({ ...envelope(false), key: null })).toBeNull();
    expect(sequenceOf({ 'x-tenant': 't1' })).toBeNull();
    expect(sequenceOf({})).toBeNull();
    expect(sequenceOf(undefined)).toBeNull();
    expect(sequenceOf(null)).toBeNull();
  });

  it('refuses a shape it does not know, naming what it got and what it reads', () => {
    for (const [given, named] of [
      [Buffer.from('{"n":1}'), 'a Buffer'],
      ['x-outbox-sequence: 3', 'a string'],
      [3, 'a number'],
      [new Date(), 'an instance of Date'],
      [[1, 2, 3], 'an array of 3'],
      [{ subject: 'orders', headers: 'oops' }, 'an object with the keys subject, headers'],
    ] as const) {
      let error: unknown;
      try {
        sequenceOf(given as never);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(UnknownMessageShapeError);
      expect((error as UnknownMessageShapeError).received).toContain(named);
      expect((error as Error).message).toContain('an amqplib message or its properties.headers');
      expect((error as UnknownMessageShapeError).reads).toContain(
        'a kafkajs message or its eachMessage payload',
      );
    }
  });

  it('refuses a number without its key, and a number that is none', () => {
    // A kafkajs message's headers alone: the key is the record key, which they do not carry.
    const headersOnly = kafkaMessage(Buffer.from('order-1'), '3').headers;
    expect(() => sequenceOf(headersOnly)).toThrow(InvalidSequenceError);
    expect(() => sequenceOf(headersOnly)).toThrow(/x-outbox-sequence 3 but no key/);
    // RabbitMqPublisher with outboxHeaders: false, and ClientProxyPublisher over ClientRMQ.
    expect(() => sequenceOf(amqpMessage(clientProxyHeaders))).toThrow(/outboxHeaders is false/);
    expect(() => sequenceOf(new RmqContext([amqpMessage(clientProxyHeaders), {}, 'o']))).toThrow(
      InvalidSequenceError,
    );
    for (const bad of ['0', '-1', '1.5', 'three', '12345678901234567']) {
      expect(() => sequenceOf({ [OUTBOX_HEADER_KEY]: 'k', [OUTBOX_HEADER_SEQUENCE]: bad })).toThrow(
        InvalidSequenceError,
      );
    }
  });
});
