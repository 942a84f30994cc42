import {
  ClientProxyFactory,
  Transport,
  type ClientOptions,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import type { OutboxPublisher } from '../../lib';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { RabbitMqOutboxDeserializer, RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import type { TransportConfig } from './sample.config';

function redisOptions(url: string) {
  const u = new URL(url);
  return {
    host: u.hostname,
    port: u.port === '' ? 6379 : Number(u.port),
    username: u.username === '' ? undefined : decodeURIComponent(u.username),
    password: u.password === '' ? undefined : decodeURIComponent(u.password),
    db: u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined,
  };
}

/**
 * The publisher the outbox sends through. RabbitMQ gets the native `RabbitMqPublisher` (broker
 * confirms, persistent and mandatory messages, reconnection), as the README recommends; the
 * other transports a Nest client. Either way the consumer's handler pattern is the event type.
 */
export function createPublisher(t: TransportConfig): OutboxPublisher {
  if (t.type === 'rmq') {
    return new RabbitMqPublisher({
      url: t.url,
      // The default exchange routes a message to the queue named by its routing key.
      routingKey: () => t.queue,
      assertTopology: async (channel) => {
        await channel.assertQueue(t.queue, { durable: true });
      },
      connectionName: 'orders-sample',
    });
  }
  // The client is created here and handed over: the publisher closes it on shutdown.
  return new ClientProxyPublisher(ClientProxyFactory.create(clientOptions(t)), {
    closeClient: true,
    pattern: (record) => record.type,
  });
}

function clientOptions(t: Exclude<TransportConfig, { type: 'rmq' }>): ClientOptions {
  switch (t.type) {
    case 'tcp':
      return { transport: Transport.TCP, options: { host: t.host, port: t.port } };
    case 'nats':
      return { transport: Transport.NATS, options: { servers: [t.url] } };
    case 'redis':
      return { transport: Transport.REDIS, options: redisOptions(t.url) };
    case 'mqtt':
      return { transport: Transport.MQTT, options: { url: t.url } };
  }
}

/** Options of the consumer microservice that receives what the outbox publishes. */
export function consumerOptions(t: TransportConfig): MicroserviceOptions {
  switch (t.type) {
    case 'tcp':
      return { transport: Transport.TCP, options: { host: t.host, port: t.port } };
    case 'rmq':
      // Manual acks: a message is removed from the queue only once its handler has returned.
      return {
        transport: Transport.RMQ,
        options: {
          urls: [t.url],
          queue: t.queue,
          queueOptions: { durable: true },
          noAck: false,
          // RabbitMqPublisher sends the event itself as the body, for any AMQP consumer; Nest's
          // RMQ server routes by pattern, taken here from the AMQP `type` property.
          deserializer: new RabbitMqOutboxDeserializer(),
        },
      };
    case 'nats':
      return { transport: Transport.NATS, options: { servers: [t.url] } };
    case 'redis':
      return { transport: Transport.REDIS, options: redisOptions(t.url) };
    case 'mqtt':
      return { transport: Transport.MQTT, options: { url: t.url } };
  }
}
