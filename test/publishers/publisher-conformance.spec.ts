import { randomUUID } from 'node:crypto';
import { ClientProxyFactory, Transport, type ClientProxy } from '@nestjs/microservices';
import type { OutboxEnvelope } from '../../lib/publishers/microservices';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { JetStreamPublisher } from '../../lib/publishers/jetstream';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import type { OutboxPublisher } from '../../lib/publishers/outbox-publisher.interface';
import {
  publisherConformanceCases,
  type PublisherConformanceFixture,
  type PublisherConformanceTarget,
} from '../../lib/testing/publisher-conformance';
import { RecordingPublisher } from '../../lib/testing';
import { describeWith, SERVICES, type ServiceName } from '../support/services';
import {
  consumeKafka,
  consumeMqtt,
  consumeNats,
  consumeRabbitMq,
  consumeRedis,
  KAFKA_BROKERS,
  MQTT_URL,
  NATS_URL,
  RABBITMQ_URL,
  type NativeConsumer,
} from '../support/transports/native-consumers';
import { startNestConsumer } from '../support/transports/nest-consumer';
import { consumeStream, jetStreamAdmin, JETSTREAM_URL } from '../support/transports/jetstream';
import { consumeRedisStream, REDIS_URL } from '../support/transports/redis-streams';
import { freePort } from '../support/transports/net';

// Every publisher the package ships keeps the one contract the dispatcher relies on (one outcome
// per message in order, "ok" only for what reached the broker, one key's order kept, an aborted
// call that ends), proven against the real brokers by the suite nestjs-outbox/testing exports
// for third-party publishers.

const HEADER = 'x-outbox-message-id';

/** A fixture from a publisher and a native consumer whose messages name their id somewhere. */
function fixture<T>(
  publisher: OutboxPublisher,
  topic: string,
  consumer: NativeConsumer<T>,
  idOf: (item: T) => string | undefined,
): PublisherConformanceFixture {
  return {
    publisher,
    topic,
    received: () =>
      consumer.received.items.map(idOf).filter((id): id is string => id !== undefined),
    tearDown: async () => {
      await publisher.close?.();
      await consumer.close();
    },
  };
}

const envelopeId = (packet: unknown) =>
  (packet as { data?: OutboxEnvelope } | null)?.data?.messageId;

function viaClient(client: ClientProxy): ClientProxyPublisher {
  return new ClientProxyPublisher(client, { closeClient: true });
}

const targets: readonly (PublisherConformanceTarget & { readonly services: ServiceName[] })[] = [
  {
    name: 'RecordingPublisher',
    services: [],
    setUp: () => {
      const publisher = new RecordingPublisher();
      return Promise.resolve({
        publisher,
        topic: 'recorded',
        received: () => publisher.messageIds,
        tearDown: () => Promise.resolve(),
      });
    },
  },
  {
    name: 'KafkaPublisher',
    services: ['kafka'],
    setUp: async () => {
      const topic = `conformance-${randomUUID()}`;
      const consumer = await consumeKafka(topic);
      const publisher = new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'conformance' });
      return fixture(publisher, topic, consumer, (m) => m.headers[HEADER]);
    },
  },
  {
    name: 'RabbitMqPublisher',
    services: ['rabbitmq'],
    setUp: async () => {
      const queue = `conformance-${randomUUID()}`;
      const consumer = await consumeRabbitMq(queue);
      const publisher = new RabbitMqPublisher({ url: RABBITMQ_URL });
      return fixture(publisher, queue, consumer, (m) => m.properties.messageId as string);
    },
  },
  {
    // Its other wire format: no x-outbox-* headers, the publish id in correlationId.
    name: 'RabbitMqPublisher with outboxHeaders: false',
    services: ['rabbitmq'],
    setUp: async () => {
      const queue = `conformance-${randomUUID()}`;
      const consumer = await consumeRabbitMq(queue);
      const publisher = new RabbitMqPublisher({ url: RABBITMQ_URL, outboxHeaders: false });
      return fixture(publisher, queue, consumer, (m) => m.properties.messageId as string);
    },
  },
  {
    // A stream of its own per case, read by an ordered consumer, deleted afterwards.
    name: 'JetStreamPublisher',
    services: ['nats'],
    setUp: async () => {
      const admin = await jetStreamAdmin();
      const stream = await admin.createStream({}, 'conformance');
      const consumer = await consumeStream(admin.nc, stream.name);
      const publisher = new JetStreamPublisher({ servers: JETSTREAM_URL });
      return {
        publisher,
        topic: `${stream.name}.events`,
        received: () => consumer.received.items.map((m) => m.messageId),
        tearDown: async () => {
          await publisher.close();
          await consumer.close();
          await admin.close();
        },
      };
    },
  },
  {
    name: 'RedisStreamsPublisher',
    services: ['redis'],
    setUp: async () => {
      const stream = `conformance:${randomUUID()}`;
      const consumer = await consumeRedisStream(stream);
      const publisher = new RedisStreamsPublisher({ connection: REDIS_URL });
      return fixture(publisher, stream, consumer, (e) => e.fields[HEADER]);
    },
  },
  {
    name: 'ClientProxyPublisher over TCP',
    services: [],
    setUp: async () => {
      const topic = `conformance.${randomUUID()}`;
      const port = await freePort();
      const consumer = await startNestConsumer(
        { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
        [topic],
      );
      const publisher = viaClient(
        ClientProxyFactory.create({
          transport: Transport.TCP,
          options: { host: '127.0.0.1', port },
        }),
      );
      return fixture(publisher, topic, consumer, (m) => (m.data as OutboxEnvelope).messageId);
    },
  },
  {
    name: 'ClientProxyPublisher over RabbitMQ (ClientRMQ)',
    services: ['rabbitmq'],
    setUp: async () => {
      const queue = `conformance-${randomUUID()}`;
      const consumer = await consumeRabbitMq(queue);
      const publisher = viaClient(
        ClientProxyFactory.create({
          transport: Transport.RMQ,
          options: { urls: [RABBITMQ_URL], queue, queueOptions: { durable: true } },
        }),
      );
      return fixture(publisher, queue, consumer, (m) => m.properties.messageId as string);
    },
  },
  {
    name: 'ClientProxyPublisher over NATS',
    services: ['nats'],
    setUp: async () => {
      const subject = `conformance.${randomUUID()}`;
      const consumer = await consumeNats(subject);
      const publisher = viaClient(
        ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } }),
      );
      return fixture(publisher, subject, consumer, (m) => m.headers[HEADER]);
    },
  },
  {
    name: 'ClientProxyPublisher over Redis',
    services: ['redis'],
    setUp: async () => {
      const channel = `conformance.${randomUUID()}`;
      const consumer = await consumeRedis(channel);
      const publisher = viaClient(
        ClientProxyFactory.create({
          transport: Transport.REDIS,
          options: { host: SERVICES.redis.host, port: SERVICES.redis.port },
        }),
      );
      return fixture(publisher, channel, consumer, (m) => envelopeId(m.data));
    },
  },
  {
    name: 'ClientProxyPublisher over MQTT',
    services: ['mqtt'],
    setUp: async () => {
      const topic = `conformance/${randomUUID()}`;
      const consumer = await consumeMqtt(topic);
      const publisher = viaClient(
        ClientProxyFactory.create({ transport: Transport.MQTT, options: { url: MQTT_URL } }),
      );
      return fixture(publisher, topic, consumer, (m) => envelopeId(m.data));
    },
  },
];

for (const target of targets) {
  describeWith(target.services, `publisher conformance: ${target.name}`, () => {
    it.each(publisherConformanceCases())('$name', (c) => c.run(target));
  });
}
