import { Test } from '@nestjs/testing';
import { connect } from 'amqplib';
import { OutboxModule, OutboxService } from '../../lib';
import { type OutboxConnection, type SqlPort } from '../../lib/testing';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { storedId, uniqueTable } from '../support/databases';
import { SERVICES } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// One library's app end to end: OutboxModule on its connection with the real RabbitMqPublisher,
// a rolled-back and a committed transaction (a business row and a message each), and what a
// real RabbitMQ queue received.

const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

export interface RabbitMqDeliveryApp<Tx> {
  readonly connection: OutboxConnection<Tx>;
  /** The outbox table, made by the caller. */
  readonly table: string;
  /** Reads the table (the admin's own port, or the connection's). */
  readonly admin: SqlPort;
  inTransaction<T>(work: (tx: Tx) => Promise<T>, rollback?: boolean): Promise<T>;
  insertOrder(tx: Tx, id: string): Promise<void>;
}

/** Asserts RabbitMQ got the committed message once, as written, and nothing of the rollback. */
export async function expectDeliveredToRabbitMq<Tx>(app: RabbitMqDeliveryApp<Tx>): Promise<void> {
  const amqp = await connect(RABBITMQ_URL);
  amqp.on('error', () => undefined);
  const channel = await amqp.createChannel();
  const queue = uniqueTable('outbox_orm_q');
  await channel.assertQueue(queue, { durable: false, autoDelete: false });
  const received: { id: string; payload: unknown }[] = [];
  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      if (message === null) return;
      received.push({
        id: String(message.properties.messageId),
        payload: JSON.parse(message.content.toString()) as unknown,
      });
    },
    { noAck: true },
  );
  const publisher = new RabbitMqPublisher({ url: RABBITMQ_URL });
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        connection: app.connection,
        publisher,
        tableName: app.table,
        dispatcher: { pollIntervalMs: 100 },
      }),
    ],
  }).compile();
  await moduleRef.init();
  try {
    const outbox = moduleRef.get<OutboxService<Tx>>(OutboxService);
    const orderId = uniqueTable('order');
    const rolledBack = await app.inTransaction(async (tx) => {
      await app.insertOrder(tx, `${orderId}-gone`);
      return outbox.enqueue({ topic: queue, key: orderId, payload: { gone: true } }, tx);
    }, true);
    const committed = await app.inTransaction(async (tx) => {
      await app.insertOrder(tx, orderId);
      return outbox.enqueue({ topic: queue, key: orderId, payload: { orderId } }, tx);
    });

    await waitFor('the message in RabbitMQ', () => received.some((m) => m.id === committed));
    const placeholder = app.admin.databaseType === 'postgres' ? '$1' : '?';
    const status = async (): Promise<unknown> =>
      (
        await app.admin.query<{ status: string }>(
          `SELECT status FROM ${app.table} WHERE message_id = ${placeholder}`,
          [storedId(app.admin.databaseType, committed)],
        )
      ).rows[0]?.status;
    await waitFor('the row settled as delivered', async () => (await status()) === 'delivered');
    await sleep(300);
    expect(received).toEqual([{ id: committed, payload: { orderId } }]);
    expect(received.map((m) => m.id)).not.toContain(rolledBack);
  } finally {
    await moduleRef.close();
    await publisher.close();
    await channel.cancel(consumerTag).catch(() => undefined);
    await channel.deleteQueue(queue).catch(() => undefined);
    await amqp.close().catch(() => undefined);
  }
}
