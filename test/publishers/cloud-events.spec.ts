import { connect as amqpConnect, type ConsumeMessage } from 'amqplib';
import { Redis } from 'ioredis';
import { SNSClient } from '@aws-sdk/client-sns';
import { SQSClient, type Message as SqsMessage } from '@aws-sdk/client-sqs';
import { CloudEvent, Kafka as CloudEventsKafka } from 'cloudevents';
import { Kafka, logLevel, type KafkaMessage } from 'kafkajs';
import type { DataSource } from 'typeorm';
import type { OutboxMessage, OutboxPublisher } from '../../lib';
import {
  ensureInboxTable,
  Inbox,
  inboxTableDropDdl,
  messageIdFromAmqp,
  messageIdFromJetStream,
  messageIdFromKafka,
  messageIdFromRedisStream,
  messageIdFromSqs,
  sequenceOf,
  type ReceivedMessageLike,
} from '../../lib/inbox';
import { cloudEvents, type CloudEventsMode } from '../../lib/integrations/cloudevents';
import { JetStreamPublisher } from '../../lib/publishers/jetstream';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import { SnsPublisher } from '../../lib/publishers/sns';
import { readOutboxSqsMessage, SqsPublisher } from '../../lib/publishers/sqs';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { testDatabase, uniqueTable } from '../support/databases';
import { allSettled, dispatchUntil, openOutboxHarness } from '../support/outbox-harness';
import { describeWith, type ServiceName } from '../support/services';
import { Collector } from '../support/transports/collector';
import {
  consumeStream,
  jetStreamAdmin,
  JETSTREAM_URL,
  type JetStreamReceived,
} from '../support/transports/jetstream';
import { KAFKA_BROKERS, RABBITMQ_URL } from '../support/transports/native-consumers';
import { REDIS_URL } from '../support/transports/redis-streams';
import {
  consumeSqs,
  createQueue,
  sqsConfig,
  startFauxqs,
  topicWithQueue,
  uniqueQueueName,
} from '../support/transports/aws';

// Messages sent as CloudEvents, end to end on each broker and in each content mode its binding
// defines: an outbox with `ordering.sequence` on PostgreSQL, the real publisher with the
// `cloudEvents` option, a consumer of the broker's own client library. Each test reads what
// arrived the way the binding says a CloudEvents consumer reads it (and, where the SDK has the
// binding, with the SDK itself), and hands the messages to the inbox's id and sequence readers.

const db = testDatabase('postgres');
const SOURCE = 'urn:example:orders';
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const TRACESTATE = 'vendor=opaque';
const BYTES = Buffer.from([0, 1, 2, 250, 255]);

/** A received message as a CloudEvents consumer sees it, whatever the mode. */
interface Seen {
  /** Every context attribute, `datacontenttype` included. */
  readonly attributes: Record<string, string>;
  /** The payload: the body in binary mode, `data` (as JSON text) or `data_base64` in structured. */
  readonly data: Buffer;
  /** The structured body as it arrived (undefined in binary mode). */
  readonly body: string | undefined;
  /** The broker metadata that is not a CloudEvent attribute. */
  readonly headers: Record<string, string>;
}

interface Consuming<T> {
  readonly publisher: OutboxPublisher;
  readonly topic: string;
  readonly received: Collector<T>;
  close(): Promise<void>;
}

interface Broker<T> {
  readonly services: readonly ServiceName[];
  readonly name: string;
  /** The modes the broker's CloudEvents binding defines. */
  readonly modes: readonly CloudEventsMode[];
  open(ds: DataSource, mode: CloudEventsMode): Promise<Consuming<T>>;
  /** The message read by the binding's rules (prefix, content type, body). */
  seen(message: T): Seen;
  /** The message as the inbox's readers take it. */
  readable(message: T): ReceivedMessageLike;
  messageId(message: T): string;
  /** The message read by the CloudEvents SDK's own binding, where it has one. */
  sdk?(message: T): { id: string; type: string; partitionkey?: unknown; data?: unknown };
}

/** A structured body's attributes and data, as the JSON event format defines them. */
function fromStructured(body: string, headers: Record<string, string>): Seen {
  const event = JSON.parse(body) as Record<string, unknown>;
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(event)) {
    if (name !== 'data' && name !== 'data_base64') attributes[name] = String(value);
  }
  const data =
    typeof event.data_base64 === 'string'
      ? Buffer.from(event.data_base64, 'base64')
      : Buffer.from(JSON.stringify(event.data));
  return { attributes, data, body, headers };
}

/** Binary mode: the attributes under `prefix`, the content type apart, the body as the data. */
function fromBinary(
  all: Record<string, string>,
  prefix: string,
  contentType: string | undefined,
  body: Buffer,
): Seen {
  const attributes: Record<string, string> = {};
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(all)) {
    if (name.startsWith(prefix)) attributes[name.slice(prefix.length)] = value;
    else headers[name] = value;
  }
  if (contentType !== undefined) attributes.datacontenttype = contentType;
  return { attributes, data: body, body: undefined, headers };
}

function describeCloudEvents<T>(broker: Broker<T>): void {
  describeWith(['postgres', ...broker.services], `CloudEvents on ${broker.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_ce');
    const inboxTable = uniqueTable('inbox_ce');

    beforeAll(async () => {
      ds = await db.open(baseTable);
      await ensureInboxTable(ds, { tableName: inboxTable });
    });

    afterAll(async () => {
      if (ds === undefined) return;
      for (const sql of inboxTableDropDdl(outboxDialectOf(ds.options.type), {
        tableName: inboxTable,
      })) {
        await ds.query(sql);
      }
      await db.close(ds, baseTable);
    });

    for (const mode of broker.modes) {
      it(`${mode} mode: the outbox's id, type, time, key, number and trace context as the spec's attributes, the payload as enqueued; the inbox reads id and number`, async () => {
        const consuming = await broker.open(ds, mode);
        const h = await openOutboxHarness(
          ds,
          consuming.publisher,
          { ordering: { sequence: true } },
          'outbox_ce',
        );
        try {
          const topic = consuming.topic;
          const started = Date.now();
          const sent: OutboxMessage[] = [];
          for (let tx = 0; tx < 3; tx++) {
            sent.push(
              {
                topic,
                key: 'a',
                type: 'order.created',
                payload: { tx, text: 'é✓ "quoted"', big: 12345678901234 },
                headers: { 'x-tenant-note': 't1' },
              },
              {
                topic,
                // A space and a letter past ASCII: percent-encoded in a `ce-` header.
                key: 'b ü',
                type: 'order.paid',
                payload: { tx },
                headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE },
              },
              { topic, key: null, type: 'order.noted', payload: [tx] },
            );
          }
          sent.push({
            topic,
            key: 'a',
            type: 'blob.stored',
            payload: BYTES,
            contentType: 'application/octet-stream',
          });
          // Its type is sent as a plain outbox message (types: { 'audit.note': false }).
          sent.push({ topic, key: 'c', type: 'audit.note', payload: { plain: true } });
          const ids: string[] = [];
          for (let tx = 0; tx < 3; tx++)
            ids.push(...(await h.enqueue(sent.slice(tx * 3, tx * 3 + 3))));
          ids.push(...(await h.enqueue(sent.slice(9))));
          await dispatchUntil(h, 'all delivered', allSettled(h));
          const received = await consuming.received.waitFor(sent.length, 30_000);
          expect(received).toHaveLength(sent.length);

          const seen = new Map(received.map((m) => [broker.messageId(m), m]));
          expect([...seen.keys()].sort()).toEqual([...ids].sort());
          const sequences: Record<string, number> = {};
          ids.forEach((id, i) => {
            const message = seen.get(id) as T;
            const given = sent[i] as OutboxMessage;
            const key = given.key ?? null;
            const number = key === null ? undefined : (sequences[key] = (sequences[key] ?? 0) + 1);
            // The inbox's readers, on the message as the client library handed it over.
            expect(sequenceOf(broker.readable(message))).toEqual(
              number === undefined ? null : { key, sequence: number },
            );
            if (given.type === 'audit.note') {
              expect(broker.seen(message).attributes).not.toHaveProperty('id');
              return;
            }
            const { attributes, data, body, headers } = broker.seen(message);
            const expected: Record<string, string> = {
              specversion: '1.0',
              id,
              source: SOURCE,
              type: given.type ?? '',
              time: attributes.time ?? '',
              datacontenttype: Buffer.isBuffer(given.payload)
                ? 'application/octet-stream'
                : 'application/json',
            };
            if (key !== null) Object.assign(expected, { subject: key, partitionkey: key });
            if (number !== undefined) expected.sequence = String(number).padStart(16, '0');
            if (given.headers?.traceparent !== undefined)
              Object.assign(expected, { traceparent: TRACEPARENT, tracestate: TRACESTATE });
            expect(attributes).toEqual(expected);
            const time = Date.parse(attributes.time ?? '');
            expect(time).toBeGreaterThanOrEqual(started - 5_000);
            expect(time).toBeLessThanOrEqual(Date.now());
            // The message's own headers travel beside the event; the outbox's are its attributes.
            for (const [name, value] of Object.entries(given.headers ?? {}))
              expect(headers[name]).toBe(value);
            expect(Object.keys(headers).filter((n) => n.startsWith('x-outbox-'))).toEqual([]);
            if (Buffer.isBuffer(given.payload)) {
              expect(data.equals(given.payload)).toBe(true);
            } else {
              const text = JSON.stringify(given.payload);
              expect(JSON.parse(data.toString())).toEqual(given.payload);
              // The enqueued JSON text itself, never parsed and written again.
              if (body !== undefined) expect(body.endsWith(`,"data":${text}}`)).toBe(true);
              else expect(data.toString()).toBe(text);
            }
            const sdk = broker.sdk?.(message);
            if (sdk !== undefined) {
              expect({ id: sdk.id, type: sdk.type }).toEqual({ id, type: given.type });
            }
          });

          // The inbox's gap guard, fed by the readers: every keyed message is the next one.
          const inbox = new Inbox(ds, { tableName: inboxTable });
          const statuses: string[] = [];
          for (const id of ids) {
            const message = seen.get(id) as T;
            const outcome = await inbox.handleOnce(
              ds,
              {
                consumer: `${broker.name}-${mode}`,
                messageId: broker.messageId(message),
                sequence: sequenceOf(broker.readable(message)),
              },
              (_tx, context) => Promise.resolve(context.sequence?.status ?? 'none'),
            );
            statuses.push(outcome.handled ? outcome.result : 'skipped');
          }
          expect(statuses.filter((s) => s === 'next')).toHaveLength(8);
          expect(statuses.filter((s) => s === 'none')).toHaveLength(3);
        } finally {
          await h.close();
          await consuming.close();
        }
      });
    }
  });
}

let counter = 0;
const unique = (what: string): string =>
  `outbox_ce_${what}_${process.pid}_${Date.now() % 1_000_000}_${++counter}`;

const encoder = (mode: CloudEventsMode) =>
  cloudEvents({ source: SOURCE, mode, types: { 'audit.note': false } });

const text = (value: unknown): string =>
  Buffer.isBuffer(value) ? value.toString('utf8') : String(value);

describeCloudEvents<ConsumeMessage>({
  services: ['rabbitmq'],
  name: 'RabbitMQ (amqplib)',
  modes: ['binary', 'structured'],
  open: async (_ds, mode) => {
    const queue = unique('rmq');
    const connection = await amqpConnect(RABBITMQ_URL);
    const channel = await connection.createChannel();
    await channel.assertQueue(queue, { durable: false });
    const received = new Collector<ConsumeMessage>();
    await channel.consume(queue, (message) => {
      if (message === null) return;
      received.push(message);
      channel.ack(message);
    });
    return {
      publisher: new RabbitMqPublisher({ url: RABBITMQ_URL, cloudEvents: encoder(mode) }),
      topic: queue,
      received,
      close: async () => {
        await channel.deleteQueue(queue);
        await connection.close();
      },
    };
  },
  seen: (m) => {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(m.properties.headers ?? {}))
      headers[name] = text(value);
    const contentType = m.properties.contentType as string | undefined;
    if (contentType?.startsWith('application/cloudevents+json') === true)
      return fromStructured(m.content.toString('utf8'), headers);
    return fromBinary(headers, 'cloudEvents_', contentType, m.content);
  },
  readable: (m) => m,
  messageId: messageIdFromAmqp,
});

describeCloudEvents<KafkaMessage>({
  services: ['kafka'],
  name: 'Kafka (kafkajs)',
  modes: ['binary', 'structured'],
  open: async (_ds, mode) => {
    const topic = unique('kafka');
    const kafka = new Kafka({
      clientId: 'outbox-ce',
      brokers: KAFKA_BROKERS,
      logLevel: logLevel.NOTHING,
    });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    const consumer = kafka.consumer({ groupId: `${topic}.g`, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const received = new Collector<KafkaMessage>();
    await consumer.run({
      eachMessage: ({ message }) => {
        received.push(message);
        return Promise.resolve();
      },
    });
    return {
      publisher: new KafkaPublisher({
        brokers: KAFKA_BROKERS,
        clientId: 'outbox-ce',
        cloudEvents: encoder(mode),
      }),
      topic,
      received,
      close: async () => {
        await consumer.disconnect();
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.disconnect();
      },
    };
  },
  seen: (m) => {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(m.headers ?? {})) headers[name] = text(value);
    const contentType = headers['content-type'];
    delete headers['content-type'];
    const value = m.value ?? Buffer.alloc(0);
    if (contentType?.startsWith('application/cloudevents+json') === true)
      return fromStructured(value.toString('utf8'), headers);
    return fromBinary(headers, 'ce_', contentType, value);
  },
  readable: (m) => m,
  messageId: messageIdFromKafka,
  // The SDK's own Kafka binding reads the message, in either mode.
  sdk: (m) => {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(m.headers ?? {})) headers[name] = text(value);
    const value = m.value ?? Buffer.alloc(0);
    const incoming = {
      headers,
      key: m.key ?? '',
      value:
        headers['content-type']?.startsWith('application/cloudevents') === true
          ? value.toString('utf8')
          : value,
      body: value,
    };
    const event = CloudEventsKafka.toEvent(incoming);
    return Array.isArray(event) ? (event[0] as never) : event;
  },
});

describeCloudEvents<JetStreamReceived>({
  services: ['nats'],
  name: 'JetStream (@nats-io/jetstream)',
  modes: ['binary', 'structured'],
  open: async (_ds, mode) => {
    const admin = await jetStreamAdmin();
    const topic = unique('js');
    const stream = await admin.createStream({ subjects: [topic] }, 'ce');
    const consumer = await consumeStream(admin.nc, stream.name);
    return {
      publisher: new JetStreamPublisher({ servers: JETSTREAM_URL, cloudEvents: encoder(mode) }),
      topic,
      received: consumer.received,
      close: async () => {
        await consumer.close();
        await admin.close();
      },
    };
  },
  seen: (r) => {
    const headers = { ...r.headers };
    const contentType = headers['Content-Type'];
    if (contentType?.startsWith('application/cloudevents+json') === true) {
      delete headers['Content-Type'];
      return fromStructured(r.data.toString('utf8'), headers);
    }
    // The binding's `ce-` values are percent-encoded UTF-8.
    for (const name of Object.keys(headers)) {
      if (!name.startsWith('ce-')) continue;
      expect({ name, value: headers[name] }).toEqual({
        name,
        value: expect.stringMatching(
          /^[\x21\x23\x24\x26-\x7e]*(%[0-9A-F]{2}[\x21\x23\x24\x26-\x7e]*)*$/,
        ),
      });
      headers[name] = decodeURIComponent(headers[name] ?? '');
    }
    return fromBinary(headers, 'ce-', undefined, r.data);
  },
  readable: (r) => r.message,
  messageId: (r) => messageIdFromJetStream(r.message),
});

/** A stream entry as ioredis returns it with the `…Buffer` commands: binary payloads intact. */
type RedisBufferEntry = [id: Buffer, fields: Buffer[]];

describeCloudEvents<RedisBufferEntry>({
  services: ['redis'],
  name: 'Redis Streams (ioredis)',
  modes: ['binary', 'structured'],
  open: (_ds, mode) => {
    const topic = unique('redis');
    const reader = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const received = new Collector<RedisBufferEntry>();
    let stopped = false;
    let last = '0-0';
    const loop = (async () => {
      while (!stopped) {
        const reply: [Buffer, RedisBufferEntry[]][] | null = await reader
          .xreadBuffer('COUNT', 100, 'BLOCK', 100, 'STREAMS', topic, last)
          .catch(() => null);
        for (const entry of reply?.[0]?.[1] ?? []) {
          last = entry[0].toString();
          received.push(entry);
        }
      }
    })();
    return Promise.resolve({
      publisher: new RedisStreamsPublisher({
        connection: REDIS_URL,
        stream: () => topic,
        cloudEvents: encoder(mode),
      }),
      topic,
      received,
      close: async () => {
        stopped = true;
        await loop;
        await reader.del(topic);
        await reader.quit();
      },
    });
  },
  seen: ([, fields]) => {
    const all: Record<string, string> = {};
    let payload: Buffer = Buffer.alloc(0);
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const name = (fields[i] as Buffer).toString();
      if (name === 'payload') payload = fields[i + 1] as Buffer;
      else all[name] = (fields[i + 1] as Buffer).toString();
    }
    const contentType = all['content-type'];
    if (contentType?.startsWith('application/cloudevents+json') === true) {
      delete all['content-type'];
      return fromStructured(payload.toString('utf8'), all);
    }
    return fromBinary(all, 'ce_', undefined, payload);
  },
  readable: (entry) => entry,
  messageId: (entry) => messageIdFromRedisStream(entry),
});

/**
 * What reached an SQS queue, read by hand as the outbox's SQS mapping of CloudEvents says (the
 * HTTP binding's rules on message attributes): the attributes of the message (or of the SNS
 * notification that is its body), `x-outbox-headers` unfolded, `ce-` values percent-decoded,
 * `content-type` the data's content type, a base64 body when `content-transfer-encoding` says so.
 */
function seenOnSqs(m: SqsMessage, viaNotification: boolean): Seen {
  const raw: Record<string, string> = {};
  let body = m.Body ?? '';
  if (viaNotification) {
    const notification = JSON.parse(body) as {
      Type: string;
      Message: string;
      MessageAttributes?: Record<string, { Type: string; Value: string }>;
    };
    expect(notification.Type).toBe('Notification');
    for (const [name, value] of Object.entries(notification.MessageAttributes ?? {}))
      raw[name] = value.Value;
    body = notification.Message;
  } else {
    for (const [name, value] of Object.entries(m.MessageAttributes ?? {}))
      raw[name] = value.StringValue ?? '';
  }
  // SQS's limit, whatever the message carried.
  expect(Object.keys(raw).length).toBeLessThanOrEqual(10);
  const { 'x-outbox-headers': folded, ...all } = raw;
  if (folded !== undefined) Object.assign(all, JSON.parse(folded) as Record<string, string>);
  const contentType = all['content-type'];
  delete all['content-type'];
  if (contentType?.startsWith('application/cloudevents+json') === true)
    return fromStructured(body, all);
  const base64 = all['content-transfer-encoding'] === 'base64';
  delete all['content-transfer-encoding'];
  for (const name of Object.keys(all)) {
    if (!name.startsWith('ce-')) continue;
    expect({ name, value: all[name] }).toEqual({
      name,
      value: expect.stringMatching(
        /^[\x21\x23\x24\x26-\x7e]*(%[0-9A-F]{2}[\x21\x23\x24\x26-\x7e]*)*$/,
      ),
    });
    all[name] = decodeURIComponent(all[name] ?? '');
  }
  return fromBinary(all, 'ce-', contentType, Buffer.from(body, base64 ? 'base64' : 'utf8'));
}

/** The event the outbox's SQS reader gives back, made a CloudEvent by the SDK (which checks it). */
function sdkOfSqs(m: SqsMessage): { id: string; type: string } {
  const read = readOutboxSqsMessage(m);
  const attributes = read.cloudEvent?.attributes ?? {};
  const data: unknown = Buffer.isBuffer(read.payload) ? read.payload : JSON.parse(read.payload);
  // Strict: the SDK checks every attribute against the spec's schema.
  return new CloudEvent({ ...attributes, data }, true);
}

describeCloudEvents<SqsMessage>({
  services: ['elasticmq'],
  name: 'SQS (ElasticMQ)',
  modes: ['binary', 'structured'],
  open: async (_ds, mode) => {
    const sqs = new SQSClient(sqsConfig());
    const queue = uniqueQueueName('outbox-ce');
    const consumer = consumeSqs(sqs, await createQueue(sqs, queue));
    return {
      publisher: new SqsPublisher({
        client: sqsConfig(),
        queue: consumer.url,
        cloudEvents: encoder(mode),
      }),
      topic: queue,
      received: consumer.received,
      close: async () => {
        await consumer.close();
        sqs.destroy();
      },
    };
  },
  seen: (m) => seenOnSqs(m, false),
  readable: (m) => m,
  messageId: messageIdFromSqs,
  sdk: sdkOfSqs,
});

for (const raw of [true, false]) {
  describeCloudEvents<SqsMessage>({
    services: [],
    name: `SNS to SQS, ${raw ? 'raw message delivery' : 'as SNS notifications'} (fauxqs)`,
    modes: ['binary', 'structured'],
    open: async (_ds, mode) => {
      const fauxqs = await startFauxqs();
      const sns = new SNSClient(fauxqs.snsConfig());
      const sqs = new SQSClient(fauxqs.sqsConfig());
      const topic = await topicWithQueue(sns, sqs, { raw });
      return {
        publisher: new SnsPublisher({
          client: fauxqs.snsConfig(),
          topicArn: topic.topicArn,
          cloudEvents: encoder(mode),
        }),
        topic: 'orders',
        received: topic.consumer.received,
        close: async () => {
          await topic.close();
          sns.destroy();
          sqs.destroy();
          await fauxqs.stop();
        },
      };
    },
    seen: (m) => seenOnSqs(m, !raw),
    readable: (m) => m,
    messageId: messageIdFromSqs,
    sdk: sdkOfSqs,
  });
}

describeWith(
  ['postgres', 'elasticmq'],
  "CloudEvents on SQS: SQS's ten attributes and its size limit",
  () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_ce_sqs');
    const sqs = new SQSClient(sqsConfig());

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterAll(async () => {
      sqs.destroy();
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    // 14 headers: with the event's attributes far more than ten. Names SQS refuses as attributes
    // and an empty value (which SQS refuses too) travel in the JSON attribute as well.
    const headers: Record<string, string> = { traceparent: TRACEPARENT, tracestate: TRACESTATE };
    for (let i = 1; i <= 10; i++) headers[`h${String(i).padStart(2, '0')}`] = `value ${i} é`;
    headers['not an attribute name!'] = 'x';
    headers.empty = '';

    it('a message with many headers goes out in either mode, its required attributes alone and the rest in x-outbox-headers, and reads back whole', async () => {
      const queue = uniqueQueueName('outbox-ce-wide');
      const consumer = consumeSqs(sqs, await createQueue(sqs, queue));
      const publisher = new SqsPublisher({
        client: sqsConfig(),
        queue: consumer.url,
        cloudEvents: cloudEvents({
          source: SOURCE,
          types: { 'wide.structured': 'structured', 'wide.plain': false },
        }),
      });
      const h = await openOutboxHarness(
        ds,
        publisher,
        { ordering: { sequence: true } },
        'outbox_ce_sqs',
      );
      try {
        const sent: OutboxMessage[] = [
          { topic: queue, key: 'k ü', type: 'wide.binary', payload: { a: 1 }, headers },
          { topic: queue, key: 'k ü', type: 'wide.structured', payload: { b: 2 }, headers },
          {
            topic: queue,
            key: 'k ü',
            type: 'wide.bytes',
            payload: BYTES,
            contentType: 'application/json',
            headers,
          },
          { topic: queue, key: 'k ü', type: 'wide.plain', payload: { c: 3 }, headers },
        ];
        const ids = await h.enqueue(sent);
        await dispatchUntil(h, 'all delivered', allSettled(h));
        const received = await consumer.received.waitFor(sent.length, 30_000);
        const byId = new Map(received.map((m) => [messageIdFromSqs(m), m]));
        expect([...byId.keys()].sort()).toEqual([...ids].sort());

        const names = (i: number): string[] =>
          Object.keys(byId.get(ids[i] ?? '')?.MessageAttributes ?? {}).sort();
        // Binary mode: the required attributes and content-type alone, then the optional ones in
        // the documented order while room is left beside the JSON attribute.
        expect(names(0)).toEqual(
          [
            'ce-specversion',
            'ce-id',
            'ce-source',
            'ce-type',
            'content-type',
            'ce-time',
            'ce-subject',
            'ce-partitionkey',
            'ce-sequence',
            'x-outbox-headers',
          ].sort(),
        );
        // Structured mode: the event is the body; the trace context headers keep attributes.
        expect(names(1)).toEqual(
          ['content-type', 'traceparent', 'tracestate', 'x-outbox-headers'].sort(),
        );
        // Bytes (with a JSON content type: only content-transfer-encoding says they are base64).
        expect(names(2)).toEqual(
          [
            'ce-specversion',
            'ce-id',
            'ce-source',
            'ce-type',
            'content-type',
            'content-transfer-encoding',
            'ce-time',
            'ce-subject',
            'ce-partitionkey',
            'x-outbox-headers',
          ].sort(),
        );

        ids.forEach((id, i) => {
          const message = byId.get(id) as SqsMessage;
          const given = sent[i] as OutboxMessage;
          const read = readOutboxSqsMessage(message);
          expect(read.messageId).toBe(id);
          expect(read.type).toBe(given.type);
          expect(read.key).toBe('k ü');
          // Every header back, whichever way it travelled; nothing of the event among them (a
          // plain message's number is one of its headers, folded with the others here).
          expect(read.headers).toEqual(
            given.type === 'wide.plain'
              ? { ...headers, 'x-outbox-sequence': String(i + 1) }
              : headers,
          );
          expect(sequenceOf(message)).toEqual({ key: 'k ü', sequence: i + 1 });
          if (Buffer.isBuffer(given.payload)) {
            expect(read.payload).toEqual(given.payload);
            expect(read.contentType).toBe('application/json');
          } else {
            expect(read.payload).toBe(JSON.stringify(given.payload));
          }
          if (given.type === 'wide.plain') {
            expect(read.cloudEvent).toBeUndefined();
            return;
          }
          expect(read.cloudEvent).toEqual({
            mode: given.type === 'wide.structured' ? 'structured' : 'binary',
            attributes: {
              specversion: '1.0',
              id,
              source: SOURCE,
              type: given.type,
              time: expect.any(String),
              datacontenttype: 'application/json',
              subject: 'k ü',
              partitionkey: 'k ü',
              sequence: String(i + 1).padStart(16, '0'),
              traceparent: TRACEPARENT,
              tracestate: TRACESTATE,
            },
          });
        });
      } finally {
        await h.close();
        await consumer.close();
      }
    });

    it('refuses at enqueue a message that fits SQS as a plain message but not as its CloudEvent', async () => {
      const queue = uniqueQueueName('outbox-ce-size');
      const consumer = consumeSqs(sqs, await createQueue(sqs, queue));
      // A long source: every event carries it, once as an attribute or in the body.
      const source = `urn:example:${'s'.repeat(400)}`;
      const open = (mode: CloudEventsMode | false) =>
        openOutboxHarness(
          ds,
          new SqsPublisher({
            client: sqsConfig(),
            queue: consumer.url,
            maxMessageBytes: 1_024,
            cloudEvents: cloudEvents({ source, mode }),
          }),
          {},
          'outbox_ce_sqs',
        );
      const payload = { text: 'x'.repeat(700) };
      try {
        for (const mode of ['binary', 'structured'] as const) {
          const h = await open(mode);
          try {
            const enqueued = h.enqueue({ topic: queue, key: 'k', type: 'big', payload });
            await expect(enqueued).rejects.toMatchObject({ reason: 'payload-too-large' });
            await expect(enqueued).rejects.toThrow(/over the limit of 1024 bytes/);
            expect(await h.rows()).toEqual([]);
          } finally {
            await h.close();
          }
        }
        // The same message as a plain outbox message fits, goes out and arrives.
        const h = await open(false);
        try {
          const [id] = await h.enqueue({ topic: queue, key: 'k', type: 'big', payload });
          await dispatchUntil(h, 'all delivered', allSettled(h));
          const [message] = await consumer.received.waitFor(1, 30_000);
          expect(messageIdFromSqs(message as SqsMessage)).toBe(id);
        } finally {
          await h.close();
        }
      } finally {
        await consumer.close();
      }
    });
  },
);
