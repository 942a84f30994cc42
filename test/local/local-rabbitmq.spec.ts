import { Injectable } from '@nestjs/common';
import { connect, type ChannelModel } from 'amqplib';
import { OnOutboxMessage, routePublishers, type OutboxHandlerMessage } from '../../lib';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { useOutboxScope } from '../support/outbox-scope';
import { SERVICES } from '../support/services';
import { describeSource, SERVER_SOURCE_CASES, useSource } from '../support/sources';
import { expectNever, waitFor } from '../support/wait-for';
import { openLocalApp } from './local-app';

// Local handlers and a real broker behind one outbox: routePublishers() sends the topic this
// app's modules handle to the LocalPublisher and every other topic to RabbitMQ. Asserts what the
// handler got, what an amqplib consumer got from the queue, and what the table says.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

// Run on each source of new messages (test/support/sources.ts): the poll on PostgreSQL, as
// always; the log (the sources project) on PostgreSQL and MariaDB.
const CASES = SERVER_SOURCE_CASES.filter((c) => c.name === 'log' || c.db.name === 'postgres');

for (const source of CASES) {
  describeSource(
    source,
    'in-process handlers beside RabbitMQ',
    () => {
      const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_localr' });
      const src = useSource(scope, source);
      let consumer: ChannelModel | undefined;
      const queue = `outbox-it-local-${process.pid}-${source.db.name}`;

      beforeAll(async () => {
        consumer = await connect(RABBITMQ_URL);
      });
      afterAll(async () => {
        const ch = await consumer?.createChannel();
        await ch?.deleteQueue(queue).catch(() => undefined);
        await consumer?.close().catch(() => undefined);
      });

      it('delivers the locally handled topic in-process and every other topic to RabbitMQ, each message once and only where it was routed', async () => {
        const handled: OutboxHandlerMessage<{ n: number }>[] = [];
        @Injectable()
        class Billing {
          @OnOutboxMessage('orders')
          on(message: OutboxHandlerMessage<{ n: number }>): void {
            handled.push(message);
          }
        }
        const rabbit = new RabbitMqPublisher({
          url: RABBITMQ_URL,
          assertTopology: async (channel) => {
            await channel.assertQueue(queue, { durable: true });
          },
          reconnect: { initialDelayMs: 100, maxDelayMs: 1_000 },
        });
        const table = await scope.table('outbox_local');
        const observed = await src.prepare(table);
        const app = await openLocalApp(scope.ds, {
          table,
          options: observed,
          handlers: [Billing],
          publisher: (local) =>
            routePublishers({
              routes: [{ topics: ['orders'], publisher: local }],
              fallback: rabbit,
            }),
        });
        scope.defer(() => app.close());
        await src.started(table);

        const received: { messageId: string; body: string }[] = [];
        const ch = await consumer!.createChannel();
        await ch.assertQueue(queue, { durable: true });
        await ch.consume(queue, (message) => {
          if (message === null) return;
          received.push({
            messageId: String(message.properties.messageId),
            body: message.content.toString('utf8'),
          });
          ch.ack(message);
        });

        // One transaction, both kinds mixed, so batches hold local and broker messages together.
        const messages = Array.from({ length: 20 }, (_, n) =>
          n % 2 === 0
            ? { topic: 'orders', key: `o-${n % 3}`, type: 'order.created', payload: { n } }
            : { topic: queue, key: `s-${n % 3}`, type: 'shipment.booked', payload: { n } },
        );
        const ids = await app.commit(messages);
        const localIds = ids.filter((_, n) => n % 2 === 0);
        const brokerIds = ids.filter((_, n) => n % 2 === 1);

        await waitFor(
          'every message delivered',
          async () => {
            // The poll's dispatcher is driven by hand; the log's runs on its own.
            if (source.name === 'poll') await app.dispatcher.drain();
            return (await app.rows()).every((r) => r.status === 'delivered');
          },
          { timeoutMs: 20_000, intervalMs: 20 },
        );
        await waitFor('the broker messages consumed', () => received.length >= brokerIds.length);
        await expectNever(
          'a duplicate or a misrouted message',
          () => received.length > brokerIds.length || handled.length > localIds.length,
          500,
        );

        expect(handled.map((m) => m.messageId).sort()).toEqual([...localIds].sort());
        expect(received.map((m) => m.messageId).sort()).toEqual([...brokerIds].sort());
        expect(handled.every((m) => m.payload.n % 2 === 0)).toBe(true);
        expect(received.every((m) => (JSON.parse(m.body) as { n: number }).n % 2 === 1)).toBe(true);
        await ch.close();
      });
    },
    ['rabbitmq'],
  );
}
