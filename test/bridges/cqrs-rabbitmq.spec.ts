import { connect, type ChannelModel } from 'amqplib';
import { OutboxEvent } from '../../lib';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { describeWith, SERVICES } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { openClsApp, type ClsApp } from './cls-app';
import { prismaPostgres, type ClsLibrary, uniqueOrderId } from './cls-targets';

// The @nestjs/cqrs bridge with a real broker: events published on the EventBus inside
// @Transactional() methods (Prisma on PostgreSQL, ambient through nestjs-cls) reach an amqplib
// consumer of RabbitMQ once when committed, never when rolled back, in commit order per key.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const QUEUE = `outbox-it-bridge-${process.pid}`;

@OutboxEvent({ topic: QUEUE, type: 'payment.taken', key: (e: PaymentTaken) => e.account })
class PaymentTaken {
  constructor(
    readonly paymentId: string,
    readonly account: string,
  ) {}
}

class Rollback extends Error {}

describeWith(
  ['postgres', 'rabbitmq'],
  '@nestjs/cqrs bridge to RabbitMQ (Prisma on PostgreSQL)',
  () => {
    let library: ClsLibrary;
    let app: ClsApp;
    let consumer: ChannelModel | undefined;
    const received: { messageId: string; key: string; paymentId: string }[] = [];

    beforeAll(async () => {
      library = await prismaPostgres.open();
      await library.connection.sql.query(library.ordersDdl);
      consumer = await connect(RABBITMQ_URL);
      const ch = await consumer.createChannel();
      await ch.assertQueue(QUEUE, { durable: true });
      await ch.purgeQueue(QUEUE);
      await ch.consume(QUEUE, (message) => {
        if (message === null) return;
        const body = JSON.parse(message.content.toString('utf8')) as PaymentTaken;
        received.push({
          messageId: String(message.properties.messageId),
          key: body.account,
          paymentId: body.paymentId,
        });
        ch.ack(message);
      });
      app = await openClsApp(library, {
        cqrs: {},
        publisher: () =>
          new RabbitMqPublisher({
            url: RABBITMQ_URL,
            assertTopology: async (channel) => {
              await channel.assertQueue(QUEUE, { durable: true });
            },
          }),
      });
    });

    afterAll(async () => {
      await app?.close();
      const ch = await consumer?.createChannel();
      await ch?.deleteQueue(QUEUE).catch(() => undefined);
      await consumer?.close().catch(() => undefined);
      await library?.close();
    });

    it('delivers a committed publish once and a rolled-back one never, keys in commit order', async () => {
      const prefix = uniqueOrderId('pay');
      const committed: Record<string, string[]> = { a: [], b: [] };
      const rolledBack: string[] = [];
      for (let i = 0; i < 8; i++) {
        const account = i % 2 === 0 ? 'a' : 'b';
        const paymentId = `${prefix}_${i}`;
        const rollback = i % 4 === 3;
        const placed = app.orders.place(paymentId, async () => {
          await app.eventBus.publish(new PaymentTaken(paymentId, `${prefix}_${account}`));
          if (rollback) throw new Rollback();
        });
        if (rollback) {
          await expect(placed).rejects.toBeInstanceOf(Rollback);
          rolledBack.push(paymentId);
        } else {
          await placed;
          committed[account]?.push(paymentId);
        }
      }
      await app.drain();
      const total = (committed.a?.length ?? 0) + (committed.b?.length ?? 0);
      await waitFor('the committed payments in the queue', () => received.length >= total);
      await expectNever('another delivery', () => received.length > total, 500);
      expect(new Set(received.map((r) => r.messageId)).size).toBe(total);
      for (const account of ['a', 'b']) {
        expect(
          received.filter((r) => r.key === `${prefix}_${account}`).map((r) => r.paymentId),
        ).toEqual(committed[account]);
      }
      for (const id of rolledBack) {
        expect(received.some((r) => r.paymentId === id)).toBe(false);
      }
    });
  },
);
