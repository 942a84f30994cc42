// Drives the documentation's app inside a Nest 12 project made by `nest new` (an ES module app:
// "type": "module", module nodenext, vitest), built by `nest build` with the snippets copied in
// unedited: boots the README's AppModule against PostgreSQL and makes it deliver one
// OrderCreated over TCP to a Nest consumer; then ClientProxyPublisher over NATS, whose client
// Nest 12 loads from @nats-io/transport-node, delivers one message with its outbox headers.
import 'reflect-metadata';
import { createServer, type AddressInfo } from 'node:net';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  Ctx,
  EventPattern,
  MessagePattern,
  NatsContext,
  Payload,
  Transport,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { ClientProxyPublisher } from 'nestjs-outbox/microservices';

const pg = {
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  user: process.env.PGUSER ?? 'postgres',
  password: process.env.PGPASSWORD ?? '',
};
const database = process.env.PACK_SMOKE_DATABASE ?? 'test';
const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const credentials =
  encodeURIComponent(pg.user) + (pg.password === '' ? '' : `:${encodeURIComponent(pg.password)}`);

const received: { orderId: string; total: number }[] = [];
const overNats: { messageId: string | undefined; payload: unknown }[] = [];
const natsSubject = `pack-smoke.${process.pid}`;

@Controller()
class OrderEventsController {
  // The documentation's publisher sends in 'send' mode: the handler's answer acknowledges.
  @MessagePattern<string>('orders')
  onOrder(@Payload() envelope: { payload: { orderId: string; total: number } }): boolean {
    received.push(envelope.payload);
    return true;
  }
}

@Controller()
class NatsEventsController {
  @EventPattern<string>(natsSubject)
  onEvent(@Payload() envelope: { payload: unknown }, @Ctx() context: NatsContext): void {
    const headers = context.getHeaders() as { get(name: string): string } | undefined;
    overNats.push({ messageId: headers?.get('x-outbox-message-id'), payload: envelope.payload });
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function eventually(probe: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`pack-smoke (Nest 12 app): no ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function readmeApp(): Promise<void> {
  const port = await freePort();
  @Module({ controllers: [OrderEventsController] })
  class ConsumerModule {}
  const consumer = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port },
    logger: ['error', 'warn'],
  });
  await consumer.listen();
  process.env.DATABASE_URL = `postgres://${credentials}@${pg.host}:${pg.port}/${database}`;
  process.env.EVENTS_PORT = String(port);
  // Loaded now: the README's AppModule reads the environment when its file is evaluated.
  const { AppModule } = await import('./app.module.js');
  const { OrdersService } = await import('./orders.service.js');
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  try {
    const order = await app.get(OrdersService).create('c-esm', 7);
    await eventually(() => received.some((r) => r.orderId === order.id), 'OrderCreated over TCP');
    console.log(
      `pack-smoke (Nest 12 app): order ${order.id} saved, OrderCreated received over TCP`,
    );
  } finally {
    await app.close();
    await consumer.close();
  }
}

async function nats(): Promise<void> {
  @Module({ controllers: [NatsEventsController] })
  class NatsConsumerModule {}
  const consumer = await NestFactory.createMicroservice<MicroserviceOptions>(NatsConsumerModule, {
    transport: Transport.NATS,
    options: { servers: [natsUrl] },
    logger: ['error', 'warn'],
  });
  await consumer.listen();
  const publisher = new ClientProxyPublisher(
    ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [natsUrl] } }),
    { closeClient: true },
  );
  try {
    const messageId = '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b';
    const outcomes = await publisher.publish(
      [
        {
          id: '1',
          messageId,
          topic: natsSubject,
          key: 'o-1',
          type: 'order.created',
          payload: '{"orderId":"o-1"}',
          headers: {},
          attempts: 1,
          createdAt: new Date(),
        },
      ],
      new AbortController().signal,
    );
    if (!outcomes[0]?.ok)
      throw new Error(`pack-smoke (Nest 12 app): NATS publish ${JSON.stringify(outcomes)}`);
    await eventually(() => overNats.length > 0, 'message over NATS');
    if (overNats[0]?.messageId !== messageId) {
      throw new Error(`pack-smoke (Nest 12 app): NATS headers ${JSON.stringify(overNats)}`);
    }
    console.log(
      'pack-smoke (Nest 12 app): ClientProxyPublisher delivered over NATS with its headers',
    );
  } finally {
    await publisher.close();
    await consumer.close();
  }
}

await readmeApp();
await nats();
