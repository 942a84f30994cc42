import * as amqp from 'amqplib';
import Redis from 'ioredis';
import { Kafka, logLevel, type Admin, type Consumer } from 'kafkajs';
import * as mqtt from 'mqtt';
import * as nats from 'nats';
import { SERVICES } from '../services';
import { Collector } from './collector';

export const RABBITMQ_URL =
  process.env.RABBITMQ_URL ??
  `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
export const NATS_URL = `nats://${SERVICES.nats.host}:${SERVICES.nats.port}`;
export const MQTT_URL = `mqtt://${SERVICES.mqtt.host}:${SERVICES.mqtt.port}`;
export const KAFKA_BROKERS = [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`];

export interface NativeConsumer<T> {
  readonly received: Collector<T>;
  close(): Promise<void>;
}

export interface RmqReceived {
  readonly content: unknown;
  readonly properties: amqp.MessageProperties;
}

/** Consumes one queue with amqplib (acking each message); `close` deletes the queue. */
export async function consumeRabbitMq(queue: string): Promise<NativeConsumer<RmqReceived>> {
  const received = new Collector<RmqReceived>();
  const connection = await amqp.connect(RABBITMQ_URL);
  const channel = await connection.createChannel();
  // Same arguments as the ClientRMQ under test asserts (queueOptions: { durable: true }).
  await channel.assertQueue(queue, { durable: true });
  await channel.consume(queue, (msg) => {
    if (msg === null) return;
    received.push({
      content: JSON.parse(msg.content.toString()) as unknown,
      properties: msg.properties,
    });
    channel.ack(msg);
  });
  return {
    received,
    close: async () => {
      await channel.deleteQueue(queue);
      await connection.close();
    },
  };
}

export interface NatsReceived {
  readonly subject: string;
  readonly data: unknown;
  readonly headers: Record<string, string>;
}

/** A core NATS subscription on one subject, registered on the server before this resolves. */
export async function consumeNats(subject: string): Promise<NativeConsumer<NatsReceived>> {
  const received = new Collector<NatsReceived>();
  const connection = await nats.connect({ servers: NATS_URL });
  const codec = nats.JSONCodec();
  connection.subscribe(subject, {
    callback: (error, msg) => {
      if (error !== null) return;
      const headers: Record<string, string> = {};
      for (const [name] of msg.headers ?? []) headers[name] = msg.headers?.get(name) ?? '';
      received.push({ subject: msg.subject, data: codec.decode(msg.data), headers });
    },
  });
  await connection.flush();
  return { received, close: () => connection.close() };
}

export interface RedisReceived {
  readonly channel: string;
  readonly data: unknown;
}

/** A Redis pub/sub subscriber on one channel (subscribed before this resolves). */
export async function consumeRedis(channel: string): Promise<NativeConsumer<RedisReceived>> {
  const received = new Collector<RedisReceived>();
  const subscriber = new Redis({
    host: SERVICES.redis.host,
    port: SERVICES.redis.port,
    lazyConnect: true,
    maxRetriesPerRequest: 1,
  });
  await subscriber.connect();
  subscriber.on('message', (ch: string, message: string) =>
    received.push({ channel: ch, data: JSON.parse(message) as unknown }),
  );
  await subscriber.subscribe(channel);
  return { received, close: async () => void (await subscriber.quit()) };
}

export interface MqttReceived {
  readonly topic: string;
  readonly data: unknown;
  readonly qos: number;
  readonly userProperties: Record<string, string | string[]> | undefined;
}

/** An MQTT 5 subscriber (QoS 1) on one topic. */
export async function consumeMqtt(topic: string): Promise<NativeConsumer<MqttReceived>> {
  const received = new Collector<MqttReceived>();
  const client = await mqtt.connectAsync(MQTT_URL, {
    protocolVersion: 5,
    clean: true,
    reconnectPeriod: 0,
  });
  client.on('message', (t, payload, packet) => {
    received.push({
      topic: t,
      data: JSON.parse(payload.toString()) as unknown,
      qos: packet.qos,
      userProperties: packet.properties?.userProperties,
    });
  });
  await client.subscribeAsync(topic, { qos: 1 });
  return { received, close: () => client.endAsync() };
}

export interface KafkaReceived {
  readonly partition: number;
  readonly key: string | null;
  readonly value: unknown;
  readonly headers: Record<string, string>;
}

/** Creates the topic and reads it from the beginning with a fresh consumer group (kafkajs). */
export async function consumeKafka(
  topic: string,
  partitions = 3,
): Promise<NativeConsumer<KafkaReceived>> {
  const received = new Collector<KafkaReceived>();
  const kafka = new Kafka({
    clientId: 'outbox-test-consumer',
    brokers: KAFKA_BROKERS,
    logLevel: logLevel.NOTHING,
  });
  const admin: Admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }],
    waitForLeaders: true,
  });
  const consumer: Consumer = kafka.consumer({ groupId: `${topic}.consumer`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: ({ partition, message }) => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(message.headers ?? {}))
        headers[name] = String(value);
      received.push({
        partition,
        key: message.key?.toString() ?? null,
        value: JSON.parse(message.value?.toString() ?? 'null') as unknown,
        headers,
      });
      return Promise.resolve();
    },
  });
  return {
    received,
    close: async () => {
      await consumer.disconnect();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    },
  };
}
