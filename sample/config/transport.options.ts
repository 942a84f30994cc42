import { Transport, type ClientOptions, type MicroserviceOptions } from '@nestjs/microservices';
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

/** Options of the client the outbox publishes through. */
export function clientOptions(t: TransportConfig): ClientOptions {
  switch (t.type) {
    case 'tcp':
      return { transport: Transport.TCP, options: { host: t.host, port: t.port } };
    case 'rmq':
      // Durable queue; the publisher marks each message persistent, so a broker restart keeps it.
      return {
        transport: Transport.RMQ,
        options: { urls: [t.url], queue: t.queue, queueOptions: { durable: true } },
      };
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
        options: { urls: [t.url], queue: t.queue, queueOptions: { durable: true }, noAck: false },
      };
    case 'nats':
      return { transport: Transport.NATS, options: { servers: [t.url] } };
    case 'redis':
      return { transport: Transport.REDIS, options: redisOptions(t.url) };
    case 'mqtt':
      return { transport: Transport.MQTT, options: { url: t.url } };
  }
}
