import { OutboxTransactionRequiredError } from '../../lib';
import { describeWith } from '../support/services';
import { openClsApp, OrderPlaced, type ClsApp } from './cls-app';
import {
  drizzleMariadb,
  drizzlePostgres,
  prismaPostgres,
  typeormPostgres,
  type ClsLibrary,
  uniqueOrderId,
} from './cls-targets';

// The ambient path beyond TypeORM: a @Transactional() method of @nestjs-cls/transactional (with
// the library's own adapter) writes its business row through txHost.tx and enqueues without
// passing a transaction; fromClsTransactionHost(txHost) hands the adapter's tx to the module's
// connection for that library.

class Rollback extends Error {}

for (const target of [prismaPostgres, drizzlePostgres, drizzleMariadb, typeormPostgres]) {
  describeWith(target.services, `ambient transaction: ${target.name}`, () => {
    let library: ClsLibrary;
    let app: ClsApp;

    beforeAll(async () => {
      library = await target.open();
      await library.connection.sql.query(library.ordersDdl);
      app = await openClsApp(library);
    });

    afterAll(async () => {
      await app?.close();
      if (library !== undefined && library.ordersTable.startsWith('orders_cls')) {
        await library.connection.sql.query(`DROP TABLE IF EXISTS ${library.ordersTable}`);
      }
      await library?.close();
    });

    it('commits the business row and the message enqueued without a transaction argument', async () => {
      const orderId = uniqueOrderId();
      const messageId = await app.orders.place(orderId, () =>
        app.outbox.enqueue(new OrderPlaced(orderId, 'ann')),
      );
      expect(await app.orderExists(orderId)).toBe(true);
      expect((await app.rows()).map((r) => r.messageId)).toContain(messageId);
      await app.drain();
      expect(app.received.outbox.map((m) => m.messageId)).toContain(messageId);
      expect(app.received.outbox.find((m) => m.messageId === messageId)?.payload).toEqual({
        orderId,
        customer: 'ann',
      });
    });

    it('leaves neither the row nor the message when the method throws', async () => {
      const orderId = uniqueOrderId();
      let messageId: string | undefined;
      await expect(
        app.orders.place(orderId, async () => {
          messageId = await app.outbox.enqueue(new OrderPlaced(orderId, 'bob'));
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      expect(messageId).toBeDefined();
      expect(await app.orderExists(orderId)).toBe(false);
      expect((await app.rows()).map((r) => r.messageId)).not.toContain(messageId);
      await app.drain();
      expect(app.received.outbox.map((m) => m.messageId)).not.toContain(messageId);
    });

    it('refuses an enqueue outside a transaction with the typed error, writing nothing', async () => {
      const before = (await app.rows()).length;
      await expect(app.outbox.enqueue(new OrderPlaced('outside', 'cy'))).rejects.toBeInstanceOf(
        OutboxTransactionRequiredError,
      );
      expect((await app.rows()).length).toBe(before);
    });
  });
}
