import { randomBytes } from 'node:crypto';
import * as amqp from 'amqplib';
import { Kafka, logLevel } from 'kafkajs';
import { ClientMqtt, ClientRMQ, ClientTCP, Transport } from '@nestjs/microservices';
import * as mqtt from 'mqtt';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_MESSAGE_ID,
  type OutboxMessage,
} from '../../lib';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import { ClientProxyPublisher, type OutboxEnvelope } from '../../lib/publishers/microservices';
import { TEST_DATABASES } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith, type ServiceName } from '../support/services';
import { Collector } from '../support/transports/collector';
import { KAFKA_BROKERS, MQTT_URL, RABBITMQ_URL } from '../support/transports/native-consumers';
import { startNestConsumer } from '../support/transports/nest-consumer';
import { readStream, redisClient, REDIS_URL } from '../support/transports/redis-streams';
import { freePort } from '../support/transports/net';
import { sleep } from '../support/wait-for';

// Binary payloads and broker attributes end to end: enqueued as bytes on each database, read
// back by the claim, published by RabbitMqPublisher, KafkaPublisher, RedisStreamsPublisher and
// ClientProxyPublisher (Nest TCP), and compared byte for byte with what a real consumer received. The bytes include
// NUL, 0xFF and invalid UTF-8, which any text round trip would mangle.

const AVRO = 'application/avro';
const PROTO = 'application/x-protobuf';

/** Bytes no text encoding survives: NUL, a lone 0xFF, a cut UTF-8 sequence, then random. */
const awkwardBytes = (): Buffer =>
  Buffer.concat([Buffer.from([0x00, 0xff, 0xfe, 0xc3, 0x00, 0x80]), randomBytes(200)]);

let counter = 0;
const unique = (name: string): string =>
  `outbox-bin-${name}-${process.pid}-${Date.now() % 1_000_000}-${++counter}`;

interface RawAmqp {
  readonly content: Buffer;
  readonly properties: amqp.MessageProperties;
}

interface RawKafka {
  readonly partition: number;
  readonly key: string | null;
  readonly value: Buffer;
  readonly headers: Record<string, string>;
}

for (const db of TEST_DATABASES) {
  const services = (...more: ServiceName[]): ServiceName[] =>
    db.service === null ? more : [db.service, ...more];

  describeWith(services(), `binary dead letters retried on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('keeps the bytes, content type and attributes of a dead letter moved behind a later message of its key', async () => {
      const publisher = new RecordingPublisher();
      const h = await scope.open({
        publisher,
        options: {
          ordering: { enabled: true, onDeadLetter: 'skip' },
          retry: { initialDelayMs: 200, maxDelayMs: 200, jitter: 0 },
        },
      });
      const bytes = awkwardBytes();
      const attributes = { rabbitmq: { priority: 4 } };
      const [dead, later] = (await h.commit([
        { topic: 't', key: 'k', payload: bytes, contentType: AVRO, attributes },
        { topic: 't', key: 'k', payload: { n: 2 } },
      ])) as [string, string];
      publisher.fail(dead, 'permanent', { times: 1 }).fail(later, 'retryable', { times: 1 });
      await h.runUntilIdle();
      expect((await h.row(dead)).status).toBe('dead');
      // The later message is pending (backing off): the retry moves the dead one behind it,
      // re-inserting its row (the path that copies the bytes through the app on MySQL/SQLite).
      expect(await h.admin.retry([dead])).toEqual({ requeued: 0, resequenced: 1, expired: [] });
      await sleep(300);
      await h.runUntilIdle();
      expect(publisher.sentForKey('k')).toEqual([later, dead]);
      const record = publisher.sent.find((r) => r.messageId === dead);
      expect(record?.encoding).toBe('binary');
      expect(record?.contentType).toBe(AVRO);
      expect(Buffer.isBuffer(record?.payload) && record.payload.equals(bytes)).toBe(true);
      expect(record?.attributes).toEqual(attributes);
    });
  });

  describeWith(services('rabbitmq'), `binary payloads through RabbitMQ on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('publishes the bytes as the content with their content type, and applies priority and expiration', async () => {
      const queue = unique('rmq');
      const connection = await amqp.connect(RABBITMQ_URL);
      scope.defer(() => connection.close());
      const channel = await connection.createChannel();
      await channel.assertQueue(queue, { durable: false, autoDelete: false, maxPriority: 10 });
      scope.defer(() => channel.deleteQueue(queue));
      const received = new Collector<RawAmqp>();
      await channel.consume(queue, (m) => {
        if (m === null) return;
        received.push({ content: m.content, properties: m.properties });
        channel.ack(m);
      });

      const h = await scope.open({ publisher: new RabbitMqPublisher({ url: RABBITMQ_URL }) });
      const plain = awkwardBytes();
      const urgent = awkwardBytes();
      const [binaryId, jsonId, urgentId] = await h.commit([
        { topic: queue, key: 'k1', payload: plain, contentType: AVRO },
        { topic: queue, key: 'k1', payload: { n: 1 } },
        {
          topic: queue,
          key: 'k2',
          payload: new Uint8Array(urgent),
          contentType: PROTO,
          attributes: { rabbitmq: { priority: 7, expiration: 600_000 } },
        },
      ]);
      await h.runUntilIdle();

      const items = await received.settle(3);
      const byId = new Map(items.map((i) => [i.properties.messageId as string, i]));
      const binary = byId.get(binaryId as string);
      expect(binary?.content.equals(plain)).toBe(true);
      expect(binary?.properties.contentType).toBe(AVRO);
      expect(binary?.properties.contentEncoding).toBeUndefined();
      expect(binary?.properties.priority).toBeUndefined();

      const json = byId.get(jsonId as string);
      expect(JSON.parse(json?.content.toString('utf8') ?? 'null')).toEqual({ n: 1 });
      expect(json?.properties.contentType).toBe('application/json');

      const withAttributes = byId.get(urgentId as string);
      expect(withAttributes?.content.equals(urgent)).toBe(true);
      expect(withAttributes?.properties.contentType).toBe(PROTO);
      expect(withAttributes?.properties.priority).toBe(7);
      expect(withAttributes?.properties.expiration).toBe('600000');

      const rows = await h.rows();
      expect(rows.map((r) => r.status)).toEqual(['delivered', 'delivered', 'delivered']);
    });

    it("routes a message by its own exchange and routing key attributes instead of the publisher's route", async () => {
      const routed = unique('rmq-own');
      const elsewhere = unique('rmq-route');
      const connection = await amqp.connect(RABBITMQ_URL);
      scope.defer(() => connection.close());
      const channel = await connection.createChannel();
      const exchange = unique('rmq-x');
      await channel.assertExchange(exchange, 'direct', { durable: false, autoDelete: false });
      scope.defer(() => channel.deleteExchange(exchange));
      for (const queue of [routed, elsewhere]) {
        await channel.assertQueue(queue, { durable: false });
        scope.defer(() => channel.deleteQueue(queue));
      }
      await channel.bindQueue(routed, exchange, 'own-key');
      const received = new Collector<RawAmqp & { queue: string }>();
      for (const queue of [routed, elsewhere]) {
        await channel.consume(queue, (m) => {
          if (m === null) return;
          received.push({ queue, content: m.content, properties: m.properties });
          channel.ack(m);
        });
      }

      const h = await scope.open({
        publisher: new RabbitMqPublisher({ url: RABBITMQ_URL, routingKey: () => elsewhere }),
      });
      const bytes = awkwardBytes();
      const [ownId, routeId] = await h.commit([
        {
          topic: 'ignored-by-this-route',
          payload: bytes,
          contentType: AVRO,
          attributes: { rabbitmq: { exchange, routingKey: 'own-key' } },
        },
        { topic: 'ignored-by-this-route', payload: { n: 2 } },
      ]);
      await h.runUntilIdle();

      const items = await received.settle(2);
      const own = items.find((i) => i.properties.messageId === ownId);
      expect(own?.queue).toBe(routed);
      expect(own?.content.equals(bytes)).toBe(true);
      expect(items.find((i) => i.properties.messageId === routeId)?.queue).toBe(elsewhere);
    });
  });

  describeWith(services('redis'), `binary payloads through Redis Streams on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('adds the bytes as the payload field with a content-type field, and applies the stream and maxLen attributes', async () => {
      const topic = unique('redis');
      const own = unique('redis-own');
      const redis = redisClient();
      scope.defer(async () => {
        await redis.del(topic, own);
        await redis.quit();
      });
      await redis.xadd(own, '*', 'earlier', '1', 'earlier', '2');
      await redis.xadd(own, '*', 'earlier', '3');

      const h = await scope.open({
        publisher: new RedisStreamsPublisher({
          connection: REDIS_URL,
          trim: { maxLen: 100, exact: true },
        }),
      });
      const plain = awkwardBytes();
      const routed = awkwardBytes();
      const [binaryId, jsonId, routedId] = await h.commit([
        { topic, key: 'k1', payload: plain, contentType: AVRO },
        { topic, key: 'k1', payload: { n: 1 } },
        {
          topic,
          key: 'k2',
          payload: new Uint8Array(routed),
          contentType: PROTO,
          attributes: { redis: { stream: own, maxLen: 1 } },
        },
      ]);
      await h.runUntilIdle();

      const entries = await readStream(redis, topic);
      const field = (id: string | undefined, name: string) =>
        entries
          .find((e) => e.fields[OUTBOX_HEADER_MESSAGE_ID] === id)
          ?.pairs.find(([n]) => n === name)?.[1];
      expect(field(binaryId, 'payload')?.equals(plain)).toBe(true);
      expect(field(binaryId, OUTBOX_HEADER_CONTENT_TYPE)?.toString()).toBe(AVRO);
      expect(JSON.parse(field(jsonId, 'payload')?.toString('utf8') ?? 'null')).toEqual({ n: 1 });
      expect(field(jsonId, OUTBOX_HEADER_CONTENT_TYPE)).toBeUndefined();
      expect(entries).toHaveLength(2);

      // Its own stream, trimmed to its own length: only the entry itself is left.
      const [ownEntry, ...more] = await readStream(redis, own);
      expect(more).toEqual([]);
      expect(ownEntry?.fields[OUTBOX_HEADER_MESSAGE_ID]).toBe(routedId);
      expect(ownEntry?.pairs.find(([n]) => n === 'payload')?.[1].equals(routed)).toBe(true);
      expect(ownEntry?.fields[OUTBOX_HEADER_CONTENT_TYPE]).toBe(PROTO);
      expect((await h.rows()).map((r) => r.status)).toEqual([
        'delivered',
        'delivered',
        'delivered',
      ]);
    });
  });

  describeWith(services('kafka'), `binary payloads through Kafka on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('sends the bytes as the value with a content-type header, and honours an explicit partition', async () => {
      const topic = unique('kafka');
      const kafka = new Kafka({
        clientId: 'outbox-bin-it',
        brokers: KAFKA_BROKERS,
        logLevel: logLevel.NOTHING,
      });
      const admin = kafka.admin();
      await admin.connect();
      scope.defer(async () => {
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.disconnect();
      });
      await admin.createTopics({
        topics: [{ topic, numPartitions: 3, replicationFactor: 1 }],
        waitForLeaders: true,
      });
      const consumer = kafka.consumer({ groupId: `${topic}.g`, maxWaitTimeInMs: 100 });
      await consumer.connect();
      scope.defer(() => consumer.disconnect());
      await consumer.subscribe({ topic, fromBeginning: true });
      const received = new Collector<RawKafka>();
      await consumer.run({
        eachMessage: ({ partition, message }) => {
          const headers: Record<string, string> = {};
          for (const [name, value] of Object.entries(message.headers ?? {}))
            headers[name] = String(value);
          received.push({
            partition,
            key: message.key?.toString() ?? null,
            value: message.value ?? Buffer.alloc(0),
            headers,
          });
          return Promise.resolve();
        },
      });

      const h = await scope.open({
        publisher: new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'outbox-bin-it' }),
      });
      const first = awkwardBytes();
      const pinned = awkwardBytes();
      const messages: OutboxMessage[] = [
        { topic, key: 'k1', payload: first, contentType: AVRO },
        { topic, key: 'k1', payload: { n: 1 } },
        // Every message of k2 names partition 2: its order holds there.
        ...[0, 1, 2].map((n): OutboxMessage => ({
          topic,
          key: 'k2',
          payload: n === 0 ? pinned : Buffer.from([n]),
          contentType: PROTO,
          attributes: { kafka: { partition: 2 } },
        })),
      ];
      const ids = await h.commit(messages);
      await h.runUntilIdle();

      const items = await received.settle(5, 300, 30_000);
      const byId = new Map(items.map((i) => [i.headers[OUTBOX_HEADER_MESSAGE_ID], i]));
      const binary = byId.get(ids[0]);
      expect(binary?.value.equals(first)).toBe(true);
      expect(binary?.headers[OUTBOX_HEADER_CONTENT_TYPE]).toBe(AVRO);
      expect(binary?.key).toBe('k1');
      const json = byId.get(ids[1]);
      expect(JSON.parse(json?.value.toString('utf8') ?? 'null')).toEqual({ n: 1 });
      expect(json?.headers[OUTBOX_HEADER_CONTENT_TYPE]).toBeUndefined();
      const onTwo = items.filter((i) => i.key === 'k2');
      expect(onTwo.map((i) => i.partition)).toEqual([2, 2, 2]);
      expect(onTwo.map((i) => i.headers[OUTBOX_HEADER_MESSAGE_ID])).toEqual(ids.slice(2));
      expect(onTwo[0]?.value.equals(pinned)).toBe(true);
      expect(onTwo[1]?.value).toEqual(Buffer.from([1]));
    });
  });

  describeWith(services('kafka'), `Kafka partition attribute on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('dead-letters a message pinned to a partition the topic lacks (kafkajs would drop it and answer success) and delivers the rest', async () => {
      const topic = unique('kafka-missing');
      const kafka = new Kafka({
        clientId: 'outbox-bin-it',
        brokers: KAFKA_BROKERS,
        logLevel: logLevel.NOTHING,
      });
      const admin = kafka.admin();
      await admin.connect();
      scope.defer(async () => {
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.disconnect();
      });
      await admin.createTopics({
        topics: [{ topic, numPartitions: 2, replicationFactor: 1 }],
        waitForLeaders: true,
      });
      const h = await scope.open({
        publisher: new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'outbox-bin-it' }),
      });
      const [missing, present, plain] = await h.commit([
        { topic, key: 'a', payload: { n: 1 }, attributes: { kafka: { partition: 5 } } },
        { topic, key: 'b', payload: { n: 2 }, attributes: { kafka: { partition: 1 } } },
        { topic, key: 'c', payload: { n: 3 } },
      ]);
      await h.runUntilIdle();

      const dead = await h.row(missing as string);
      expect(dead.status).toBe('dead');
      expect(dead.lastError).toContain(`has no partition 5 (it has 2)`);
      expect((await h.row(present as string)).status).toBe('delivered');
      expect((await h.row(plain as string)).status).toBe('delivered');
      const offsets = await admin.fetchTopicOffsets(topic);
      expect(offsets.find((o) => o.partition === 1)?.high).not.toBe('0');
    });
  });

  describeWith(services('rabbitmq'), `ClientProxyPublisher over ClientRMQ on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('sends the bytes base64 as the data of its JSON body with a content-type header, and applies priority and expiration', async () => {
      const queue = unique('client-rmq');
      const queueOptions = { durable: false, maxPriority: 10 };
      const connection = await amqp.connect(RABBITMQ_URL);
      scope.defer(() => connection.close());
      const channel = await connection.createChannel();
      await channel.assertQueue(queue, queueOptions);
      scope.defer(() => channel.deleteQueue(queue));
      const received = new Collector<RawAmqp>();
      await channel.consume(queue, (m) => {
        if (m === null) return;
        received.push({ content: m.content, properties: m.properties });
        channel.ack(m);
      });
      const client = new ClientRMQ({ urls: [RABBITMQ_URL], queue, queueOptions });
      scope.defer(async () => {
        await (client.close() as unknown);
      });
      const h = await scope.open({ publisher: new ClientProxyPublisher(client) });
      const bytes = awkwardBytes();
      const [id] = await h.commit([
        {
          topic: 'events',
          payload: bytes,
          contentType: AVRO,
          attributes: {
            rabbitmq: { priority: 7, expiration: 600_000, routingKey: 'not-applied-here' },
          },
        },
      ]);
      await h.runUntilIdle();

      const [item] = await received.settle(1);
      const body = JSON.parse(item?.content.toString('utf8') ?? 'null') as {
        pattern: string;
        data: string;
      };
      expect(body.pattern).toBe('events');
      expect(Buffer.from(body.data, 'base64').equals(bytes)).toBe(true);
      expect(item?.properties.contentType).toBe('application/json');
      expect((item?.properties.headers ?? {})[OUTBOX_HEADER_CONTENT_TYPE]).toBe(AVRO);
      expect(item?.properties.messageId).toBe(id);
      expect(item?.properties.priority).toBe(7);
      expect(item?.properties.expiration).toBe('600000');
    });
  });

  describeWith(services('mqtt'), `ClientProxyPublisher over ClientMqtt on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('applies the qos and retain attributes', async () => {
      const topic = unique('mqtt');
      const client = new ClientMqtt({ url: MQTT_URL });
      scope.defer(async () => {
        await (client.close() as unknown);
      });
      const h = await scope.open({ publisher: new ClientProxyPublisher(client) });
      const [retained] = await h.commit([
        { topic, payload: { n: 1 }, attributes: { mqtt: { qos: 2, retain: true } } },
      ]);
      await h.runUntilIdle();
      expect((await h.row(retained as string)).status).toBe('delivered');

      // Subscribed only after the publish: only a retained message reaches this subscriber.
      const subscriber = await mqtt.connectAsync(MQTT_URL, { reconnectPeriod: 0 });
      scope.defer(async () => {
        // Clears the retained message (an empty retained payload deletes it).
        await subscriber.publishAsync(topic, '', { retain: true, qos: 1 });
        await subscriber.endAsync();
      });
      const received = new Collector<{ qos: number; retain: boolean; data: unknown }>();
      subscriber.on('message', (_t, payload, packet) => {
        if (payload.length > 0)
          received.push({
            qos: packet.qos,
            retain: packet.retain,
            data: JSON.parse(payload.toString()) as unknown,
          });
      });
      await subscriber.subscribeAsync(topic, { qos: 2 });
      const [got] = await received.settle(1);
      expect(got?.retain).toBe(true);
      expect(got?.qos).toBe(2);
      expect(got?.data).toMatchObject({ data: { messageId: retained, payload: { n: 1 } } });
    });
  });

  describeWith(services(), `binary payloads through a Nest transport (TCP) on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_bin' });

    it('carries the bytes base64 in the envelope, with their content type, since Nest JSON-encodes TCP packets', async () => {
      const host = '127.0.0.1';
      const port = await freePort();
      const topic = unique('tcp');
      const consumer = await startNestConsumer(
        { transport: Transport.TCP, options: { host, port } },
        [topic],
      );
      scope.defer(() => consumer.close());
      const client = new ClientTCP({ host, port });
      scope.defer(async () => {
        await (client.close() as unknown);
      });
      const h = await scope.open({ publisher: new ClientProxyPublisher(client) });
      const bytes = awkwardBytes();
      const [binaryId, jsonId] = await h.commit([
        { topic, key: 'k', payload: bytes, contentType: AVRO, headers: { 'x-tenant': 't1' } },
        { topic, key: 'k', payload: { n: 1 } },
      ]);
      await h.runUntilIdle();

      const items = await consumer.received.settle(2);
      const envelopes = items.map((i) => i.data as OutboxEnvelope);
      const binary = envelopes.find((e) => e.messageId === binaryId);
      expect(binary?.encoding).toBe('base64');
      expect(binary?.contentType).toBe(AVRO);
      expect(binary?.headers).toEqual({ 'x-tenant': 't1' });
      expect(Buffer.from(binary?.payload as string, 'base64').equals(bytes)).toBe(true);
      const json = envelopes.find((e) => e.messageId === jsonId);
      expect(json?.payload).toEqual({ n: 1 });
      expect(json?.encoding).toBeUndefined();
      expect(json?.contentType).toBeUndefined();
    });
  });
}
