// The README's Usage snippets as an ES module app, the shape `nest new` generates on Nest 12
// ("type": "module", module nodenext, `.js` on relative imports, as the README tells): compiled
// from src/ by pack-smoke.sh, then booted here against PostgreSQL and made to deliver one
// OrderCreated over TCP to a Nest consumer. A vitest spec runs next to it (readme.spec.ts).
import 'reflect-metadata';
import { createServer, type AddressInfo } from 'node:net';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload, Transport, type MicroserviceOptions } from '@nestjs/microservices';

const pg = {
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  user: process.env.PGUSER ?? 'postgres',
  password: process.env.PGPASSWORD ?? '',
};
const database = process.env.PACK_SMOKE_DATABASE ?? 'test';
const credentials =
  encodeURIComponent(pg.user) + (pg.password === '' ? '' : `:${encodeURIComponent(pg.password)}`);

const received: { orderId: string; total: number }[] = [];

@Controller()
class OrderEventsController {
  @EventPattern<string>('orders')
  onOrder(@Payload() envelope: { payload: { orderId: string; total: number } }): void {
    received.push(envelope.payload);
  }
}

@Module({ controllers: [OrderEventsController] })
class ConsumerModule {}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

const port = await freePort();
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
  const deadline = Date.now() + 15_000;
  while (!received.some((r) => r.orderId === order.id)) {
    if (Date.now() > deadline) throw new Error('pack-smoke (ESM README): no OrderCreated received');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  console.log(`pack-smoke (ESM README): order ${order.id} saved, OrderCreated received over TCP`);
} finally {
  await app.close();
  await consumer.close();
}
