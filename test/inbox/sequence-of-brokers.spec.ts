import { SNSClient } from '@aws-sdk/client-sns';
import { SQSClient, type Message } from '@aws-sdk/client-sqs';
import { connect as amqpConnect, type ConsumeMessage } from 'amqplib';
import { Redis } from 'ioredis';
import { Kafka, logLevel, type EachMessagePayload } from 'kafkajs';
import type { DataSource } from 'typeorm';
import type { OutboxPublisher } from '../../lib';
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
  type SequencedMessage,
} from '../../lib/inbox';
import { JetStreamPublisher } from '../../lib/publishers/jetstream';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import { SnsPublisher } from '../../lib/publishers/sns';
import { SqsPublisher } from '../../lib/publishers/sqs';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { testDatabase, uniqueTable } from '../support/databases';
import { allSettled, dispatchUntil, openOutboxHarness } from '../support/outbox-harness';
import { describeWith, type ServiceName } from '../support/services';
import {
  createQueue,
  consumeSqs,
  sqsConfig,
  startFauxqs,
  topicWithQueue,
  uniqueQueueName,
  type Fauxqs,
} from '../support/transports/aws';
import { Collector } from '../support/transports/collector';
import { consumeStream, jetStreamAdmin, JETSTREAM_URL } from '../support/transports/jetstream';
import { KAFKA_BROKERS, RABBITMQ_URL } from '../support/transports/native-consumers';
import { REDIS_URL } from '../support/transports/redis-streams';

// The gap guard's numbers, end to end on each broker: an outbox with `ordering.sequence` on
// PostgreSQL numbers each key's messages, the real publisher sends them, a consumer of the
// broker's own client library receives them, and what that client hands over (in the shapes the
// consumer examples of docs/publishers.md use) goes to sequenceOf and to the inbox's gap guard.

const db = testDatabase('postgres');

/** One broker's consumer: what it received, each message as its client library hands it. */
interface Consuming<T> {
  readonly publisher: OutboxPublisher;
  readonly topic: string;
  readonly received: Collector<T>;
  close(): Promise<void>;
}

/** `key:number` of each message, `-` for a message without a number. */
const label = (s: SequencedMessage | null): string =>
  s === null ? '-' : `${s.key}:${String(s.sequence)}`;

const perKey = (labels: readonly string[], key: string): string[] =>
  labels.filter((l) => l.startsWith(`${key}:`));

function describeBroker<T>(
  services: readonly ServiceName[],
  name: string,
  open: (ds: DataSource) => Promise<Consuming<T>>,
  shapes: Readonly<Record<string, (message: T) => ReceivedMessageLike>>,
  messageId: (message: T) => string,
  ordered = true,
): void {
  describeWith(['postgres', ...services], `sequenceOf on ${name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_sqb');
    const inboxTable = uniqueTable('inbox_sqb');

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

    it('reads each key and number the producer gave, and the inbox finds every key in order', async () => {
      const consuming = await open(ds);
      const h = await openOutboxHarness(
        ds,
        consuming.publisher,
        { ordering: { sequence: true } },
        'outbox_sqb',
      );
      try {
        for (let tx = 0; tx < 3; tx++) {
          await h.enqueue([
            { topic: consuming.topic, key: 'a', type: 't', payload: { tx } },
            { topic: consuming.topic, key: 'b', type: 't', payload: { tx } },
            { topic: consuming.topic, key: null, type: 't', payload: { tx } },
          ]);
        }
        await dispatchUntil(h, 'all delivered', allSettled(h));
        const received = await consuming.received.waitFor(9, 30_000);
        for (const [shape, of] of Object.entries(shapes)) {
          const labels = received.map((m) => label(sequenceOf(of(m))));
          const sorted = (l: string[]) => (ordered ? l : [...l].sort());
          expect({ shape, a: sorted(perKey(labels, 'a')) }).toEqual({
            shape,
            a: ['a:1', 'a:2', 'a:3'],
          });
          expect({ shape, b: sorted(perKey(labels, 'b')) }).toEqual({
            shape,
            b: ['b:1', 'b:2', 'b:3'],
          });
          expect({ shape, none: labels.filter((l) => l === '-') }).toEqual({
            shape,
            none: ['-', '-', '-'],
          });
        }
        if (!ordered) return;
        const inbox = new Inbox(ds, { tableName: inboxTable });
        const [first] = Object.values(shapes);
        const statuses: string[] = [];
        for (const m of received) {
          const outcome = await inbox.handleOnce(
            ds,
            { consumer: name, messageId: messageId(m), sequence: sequenceOf(first?.(m)) },
            (_tx, context) => Promise.resolve(context.sequence?.status ?? 'none'),
          );
          statuses.push(outcome.handled ? outcome.result : 'skipped');
        }
        expect(statuses.filter((s) => s === 'next')).toHaveLength(6);
        expect(statuses.filter((s) => s === 'none')).toHaveLength(3);
      } finally {
        await h.close();
        await consuming.close();
      }
    });
  });
}

let counter = 0;
const unique = (what: string): string =>
  `outbox_sqb_${what}_${process.pid}_${Date.now() % 1_000_000}_${++counter}`;

describeBroker<ConsumeMessage>(
  ['rabbitmq'],
  'RabbitMQ (amqplib)',
  async () => {
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
      publisher: new RabbitMqPublisher({ url: RABBITMQ_URL }),
      topic: queue,
      received,
      close: async () => {
        await channel.deleteQueue(queue);
        await connection.close();
      },
    };
  },
  { message: (m) => m, 'properties.headers': (m) => m.properties.headers },
  messageIdFromAmqp,
);

describeBroker<EachMessagePayload>(
  ['kafka'],
  'Kafka (kafkajs)',
  async () => {
    const topic = unique('kafka');
    const kafka = new Kafka({
      clientId: 'outbox-sqb',
      brokers: KAFKA_BROKERS,
      logLevel: logLevel.NOTHING,
    });
    const admin = kafka.admin();
    await admin.connect();
    // One partition: the test reads every key in the order it was sent.
    await admin.createTopics({
      topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
      waitForLeaders: true,
    });
    const consumer = kafka.consumer({ groupId: `${topic}.g`, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const received = new Collector<EachMessagePayload>();
    await consumer.run({
      eachMessage: (payload) => {
        received.push(payload);
        return Promise.resolve();
      },
    });
    return {
      publisher: new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'outbox-sqb' }),
      topic,
      received,
      close: async () => {
        await consumer.disconnect();
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.disconnect();
      },
    };
  },
  { 'eachMessage payload': (p) => p, message: (p) => p.message },
  messageIdFromKafka,
);

describeBroker(
  ['nats'],
  'JetStream (@nats-io/jetstream)',
  async () => {
    const admin = await jetStreamAdmin();
    const topic = unique('js');
    const stream = await admin.createStream({ subjects: [topic] }, 'sqb');
    const consumer = await consumeStream(admin.nc, stream.name);
    return {
      publisher: new JetStreamPublisher({ servers: JETSTREAM_URL }),
      topic,
      received: consumer.received,
      close: async () => {
        await consumer.close();
        await admin.close();
      },
    };
  },
  {
    // The client's typings hide MsgHdrs from this project's module resolution (see
    // lib/publishers/jetstream/nats-client.ts): typed as what it is at run time.
    'JsMsg.headers': (r) => r.message.headers as unknown as ReceivedMessageLike,
    JsMsg: (r) => r.message,
  },
  (r) => messageIdFromJetStream(r.message),
);

type RedisEntry = [id: string, fields: string[]];
type RedisBufferEntry = [id: Buffer, fields: Buffer[]];

describeBroker<{ text: RedisEntry; bytes: RedisBufferEntry }>(
  ['redis'],
  'Redis Streams (ioredis)',
  () => {
    const topic = unique('redis');
    const reader = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const received = new Collector<{ text: RedisEntry; bytes: RedisBufferEntry }>();
    let stopped = false;
    let last = '0-0';
    // XREAD as text (what the consumer example reads) and the same entries as bytes.
    const loop = (async () => {
      while (!stopped) {
        const reply = await reader
          .xread('COUNT', 100, 'BLOCK', 100, 'STREAMS', topic, last)
          .catch(() => null);
        for (const entry of reply?.[0]?.[1] ?? []) {
          const bytes = (await reader.xrangeBuffer(
            topic,
            entry[0],
            entry[0],
          )) as unknown as RedisBufferEntry[];
          last = entry[0];
          if (bytes[0] !== undefined) received.push({ text: entry, bytes: bytes[0] });
        }
      }
    })();
    return Promise.resolve({
      publisher: new RedisStreamsPublisher({ connection: REDIS_URL }),
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
  { 'ioredis entry': (e) => e.text, 'ioredis entry as bytes': (e) => e.bytes },
  (e) => messageIdFromRedisStream(e.text),
);

describeBroker<Message>(
  ['elasticmq'],
  'SQS (ElasticMQ)',
  async () => {
    const client = new SQSClient(sqsConfig());
    const url = await createQueue(client, uniqueQueueName('outbox-sqb', true));
    const consumer = consumeSqs(client, url);
    return {
      publisher: new SqsPublisher({ client: sqsConfig(), queue: url }),
      topic: 'orders',
      received: consumer.received,
      close: async () => {
        await consumer.close();
        client.destroy();
      },
    };
  },
  { 'ReceiveMessage result': (m) => m },
  messageIdFromSqs,
);

describe('sequenceOf on SNS (fauxqs)', () => {
  let fauxqs: Fauxqs;
  let sns: SNSClient;
  let sqs: SQSClient;

  beforeAll(async () => {
    fauxqs = await startFauxqs();
    sns = new SNSClient(fauxqs.snsConfig());
    sqs = new SQSClient(fauxqs.sqsConfig());
  });

  afterAll(async () => {
    sns?.destroy();
    sqs?.destroy();
    await fauxqs?.stop();
  });

  for (const raw of [true, false]) {
    describeBroker<Message>(
      [],
      `SNS to SQS ${raw ? 'with raw delivery (FIFO)' : 'as SNS notifications'}`,
      async () => {
        const topic = await topicWithQueue(sns, sqs, { fifo: raw, raw });
        return {
          publisher: new SnsPublisher({ client: fauxqs.snsConfig(), topicArn: topic.topicArn }),
          topic: 'orders',
          received: topic.consumer.received,
          close: () => topic.close(),
        };
      },
      { 'ReceiveMessage result': (m) => m },
      messageIdFromSqs,
      raw,
    );
  }
});
