// A CommonJS Nest app outside the repository, using nestjs-outbox from the packed tarball the way
// a user would. It runs the README's Usage snippets (copied next to this file by pack-smoke.sh)
// against PostgreSQL, with the TCP consumer they publish to; then RabbitMqPublisher against
// RabbitMQ, the strict option checks and nestjs-outbox/testing, all through require(); the
// subpaths' types resolve through package.json typesVersions here (node10 resolution).
import 'reflect-metadata';
import { createServer, type AddressInfo } from 'node:net';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  MessagePattern,
  Payload,
  Transport,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { connect } from 'amqplib';
import {
  OutboxCleaner,
  OutboxDispatcher,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
} from 'nestjs-outbox';
import type { OutboxCleanReport, OutboxDispatcherStatus } from 'nestjs-outbox/admin';
import { fromClsTransactionHost } from 'nestjs-outbox/cls';
import { ensureOutboxTable } from 'nestjs-outbox/schema';
import { KafkaPublisher } from 'nestjs-outbox/kafka';
import { RabbitMqPublisher } from 'nestjs-outbox/rabbitmq';
import { RecordingPublisher } from 'nestjs-outbox/testing';
import { DataSource } from 'typeorm';
import { OrderCreated } from './order-created.event';

const pg = {
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  user: process.env.PGUSER ?? 'postgres',
  password: process.env.PGPASSWORD ?? '',
  database: process.env.PGDATABASE ?? 'test',
};
const rabbitUrl = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
// The README app creates tables `orders`, `outbox` and `migrations`: a database of its own.
const database = `pack_smoke_${process.pid}`;
const credentials =
  encodeURIComponent(pg.user) + (pg.password === '' ? '' : `:${encodeURIComponent(pg.password)}`);
const pgUrl = (db: string) => `postgres://${credentials}@${pg.host}:${pg.port}/${db}`;

function check(condition: boolean, what: string, detail?: unknown): void {
  if (!condition) throw new Error(`pack-smoke: ${what} ${JSON.stringify(detail) ?? ''}`);
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

async function eventually(probe: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`pack-smoke: timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const received: { orderId: string; total: number }[] = [];

@Controller()
class OrderEventsController {
  // The documentation's publisher sends in 'send' mode: the handler's answer acknowledges.
  @MessagePattern('orders')
  onOrder(@Payload() envelope: { payload: { orderId: string; total: number } }): boolean {
    received.push(envelope.payload);
    return true;
  }
}

@Module({ controllers: [OrderEventsController] })
class ConsumerModule {}

/** The README's app, as written: TypeORM from DATABASE_URL, publishing over TCP to EVENTS_PORT. */
async function readmeApp(): Promise<void> {
  const port = await freePort();
  const consumer = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port },
    logger: ['error', 'warn'],
  });
  await consumer.listen();
  process.env.DATABASE_URL = pgUrl(database);
  process.env.EVENTS_PORT = String(port);
  // Loaded now: the README's AppModule reads the environment when its file is evaluated.
  const { AppModule } = await import('./app.module.js');
  const { OrdersService } = await import('./orders.service.js');
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  try {
    const order = await app.get(OrdersService).create('c-1', 42);
    await eventually(() => received.length > 0, 'the TCP consumer to receive OrderCreated');
    check(
      received[0]?.orderId === order.id && received[0].total === 42,
      'the consumer got',
      received,
    );
    console.log(`pack-smoke: README app: order ${order.id} saved, OrderCreated received over TCP`);
  } finally {
    await app.close();
    await consumer.close();
  }
}

/**
 * RabbitMqPublisher with the installed amqplib, through the dispatcher, to a real queue; with the
 * x-outbox-* headers (the default) or without them (`outboxHeaders: false`).
 */
async function rabbitMq(dataSource: DataSource, outboxHeaders: boolean): Promise<void> {
  const table = `outbox_pack_rmq_${process.pid}`;
  const queue = `outbox-pack-smoke-${process.pid}`;
  await ensureOutboxTable(dataSource, { tableName: table });
  const app = await NestFactory.createApplicationContext(
    OutboxModule.forRoot({
      dataSource,
      tableName: table,
      autoStart: false,
      publisher: new RabbitMqPublisher({
        url: rabbitUrl,
        outboxHeaders,
        assertTopology: async (channel) => {
          await channel.assertQueue(queue, { durable: false });
        },
      }),
    }),
    { logger: ['error', 'warn'] },
  );
  const connection = await connect(rabbitUrl);
  try {
    const id = await dataSource.transaction((manager) =>
      app.get(OutboxService).enqueue({ topic: queue, key: 'k', payload: { n: 1 } }, manager),
    );
    const report = await app.get(OutboxDispatcher).runOnce();
    check(report.published === 1, 'RabbitMQ publish report', report);
    // The workers' answers, typed from nestjs-outbox/admin: not started (autoStart: false), and
    // nothing past the default retention to clean.
    const status: OutboxDispatcherStatus = app.get(OutboxDispatcher).status();
    const cleaned: OutboxCleanReport = await app.get(OutboxCleaner).runOnce();
    check(!status.started && cleaned.delivered === 0, 'dispatcher status and clean report', {
      status,
      cleaned,
    });
    const channel = await connection.createChannel();
    const message = await channel.get(queue, { noAck: true });
    const headers = (message === false ? {} : message.properties.headers) ?? {};
    check(
      message !== false &&
        message.properties.messageId === id &&
        (headers['x-outbox-message-id'] === id) === outboxHeaders,
      'message in the queue',
      message === false ? null : message.properties,
    );
    await channel.deleteQueue(queue);
    console.log(
      `pack-smoke: RabbitMqPublisher${outboxHeaders ? '' : ' (outboxHeaders: false)'}: ${id} confirmed by RabbitMQ and consumed`,
    );
  } finally {
    await connection.close();
    await app.close();
    await dataSource.query(`DROP TABLE IF EXISTS "${table}_attempts"`);
    await dataSource.query(`DROP TABLE IF EXISTS "${table}"`);
  }
}

/** nestjs-outbox/cls: outside a transaction of the host, the ambient transaction supplies none. */
function clsAdapter(): void {
  const ambient = fromClsTransactionHost({ isTransactionActive: () => false, tx: {} });
  check(ambient.currentManager() === undefined, 'fromClsTransactionHost outside a transaction');
  console.log('pack-smoke: nestjs-outbox/cls: fromClsTransactionHost');
}

/** Misspelt options fail at bootstrap with the typed error, in the module and the publishers. */
async function strictOptions(dataSource: DataSource): Promise<void> {
  const failure = await NestFactory.createApplicationContext(
    OutboxModule.forRoot({
      dataSource,
      publisher: new RecordingPublisher(),
      retry: { maxAttemps: 3 } as never,
    }),
    { logger: false, abortOnError: false },
  ).then(
    () => undefined,
    (error: unknown) => error,
  );
  check(
    failure instanceof OutboxOptionsError &&
      failure.message.includes('did you mean retry.maxAttempts?'),
    'misspelt option error',
    String(failure),
  );
  let kafka: unknown;
  try {
    new KafkaPublisher({ brokers: ['127.0.0.1:9092'], clientID: 'x' } as never);
  } catch (error) {
    kafka = error;
  }
  check(kafka instanceof OutboxOptionsError, 'KafkaPublisher option error', String(kafka));
  console.log('pack-smoke: misspelt options fail at bootstrap with OutboxOptionsError');
}

async function main(): Promise<void> {
  check(new OrderCreated('o', 1).orderId === 'o', 'README event class');
  clsAdapter();
  const admin = await new DataSource({ type: 'postgres', url: pgUrl(pg.database) }).initialize();
  await admin.query(`CREATE DATABASE "${database}"`);
  let dataSource: DataSource | undefined;
  try {
    await readmeApp();
    dataSource = await new DataSource({ type: 'postgres', url: pgUrl(database) }).initialize();
    await rabbitMq(dataSource, true);
    await rabbitMq(dataSource, false);
    await strictOptions(dataSource);
  } finally {
    await dataSource?.destroy();
    await admin.query(`DROP DATABASE IF EXISTS "${database}"`);
    await admin.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
