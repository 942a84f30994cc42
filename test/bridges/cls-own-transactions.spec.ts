import { OutboxAdmin, PermanentPublishError, type OutboxPublisher } from '../../lib';
import { describeWith } from '../support/services';
import { openClsApp, OrderPlaced, type ClsApp, type Orders } from './cls-app';
import {
  drizzleMariadb,
  drizzlePostgres,
  prismaPostgres,
  typeormPostgres,
  uniqueOrderId,
  type ClsLibrary,
} from './cls-targets';

// The outbox's own work (admin calls, runOnce(), drain()) made inside a @Transactional() method
// of @nestjs-cls/transactional, whose transaction lives in the async context: the outbox's
// changes stand when the method rolls back, and an in-process consumer's own @Transactional()
// work during that runOnce() is a transaction of its own, not a part of the caller's.

class Rollback extends Error {}

/** The topic the consumer refuses for good: its messages go dead. */
const REFUSED = 'refused';

for (const target of [typeormPostgres, prismaPostgres, drizzlePostgres, drizzleMariadb]) {
  describeWith(target.services, `the outbox's work inside ${target.name}'s transaction`, () => {
    let library: ClsLibrary;
    let app: ClsApp;
    let admin: OutboxAdmin;
    /** Consumes every delivered message with a @Transactional() write of its own. */
    let consumer: Orders | undefined;

    beforeAll(async () => {
      library = await target.open();
      await library.connection.sql.query(library.ordersDdl);
      app = await openClsApp(library, {
        publisher: (local): OutboxPublisher => ({
          async publish(records, signal) {
            const accepted = records.filter((r) => r.topic !== REFUSED);
            for (const record of accepted) {
              await consumer?.place(`consumed_${record.messageId}`, () => Promise.resolve());
            }
            const outcomes = await local.publish(accepted, signal);
            let next = 0;
            return records.map((r) =>
              r.topic === REFUSED
                ? { ok: false, error: new PermanentPublishError('refused') }
                : (outcomes[next++] ?? { ok: false, error: new Error('no outcome') }),
            );
          },
        }),
      });
      consumer = app.orders;
      admin = app.moduleRef.get(OutboxAdmin);
    });

    afterAll(async () => {
      await app?.close();
      if (library !== undefined && library.ordersTable.startsWith('orders_cls')) {
        await library.connection.sql.query(`DROP TABLE IF EXISTS ${library.ordersTable}`);
      }
      await library?.close();
    });

    /** Runs `work` inside a @Transactional() method that writes an order, then rolls back. */
    async function insideRolledBack<T>(work: () => Promise<T>): Promise<T> {
      const orderId = uniqueOrderId('outer');
      let value: { of: T } | undefined;
      await expect(
        app.orders.place(orderId, async () => {
          value = { of: await work() };
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      expect(await app.orderExists(orderId)).toBe(false);
      if (value === undefined) throw new Error('the work did not finish');
      return value.of;
    }

    const enqueue = (topic = 'orders'): Promise<string> => {
      const orderId = uniqueOrderId();
      return app.orders.place(orderId, () =>
        topic === 'orders'
          ? app.outbox.enqueue(new OrderPlaced(orderId, 'ann'))
          : app.outbox.enqueue({ topic, payload: { orderId } }),
      );
    };

    it('keeps a retry and a purge of dead messages made inside a transaction that rolls back', async () => {
      const retried = await enqueue(REFUSED);
      const purged = await enqueue(REFUSED);
      await app.drain();
      expect((await admin.get(retried))?.status).toBe('dead');
      expect((await admin.get(purged))?.status).toBe('dead');

      expect((await insideRolledBack(() => admin.retry([retried]))).requeued).toBe(1);
      expect(await insideRolledBack(() => admin.purge([purged]))).toBe(1);

      expect((await admin.get(retried))?.status).toBe('pending');
      expect(await admin.get(purged)).toBeNull();
      await admin.purge([retried]);
    });

    it("records runOnce()'s and drain()'s deliveries, and commits the consumer's own transactions, inside a transaction that rolls back", async () => {
      const first = await enqueue();
      expect((await insideRolledBack(() => app.dispatcher.runOnce())).published).toBe(1);
      const second = await enqueue();
      expect(await insideRolledBack(() => app.dispatcher.drain())).toBe(1);

      for (const id of [first, second]) {
        expect((await admin.get(id))?.status).toBe('delivered');
        expect(await app.orderExists(`consumed_${id}`)).toBe(true);
      }
      expect(app.received.outbox.map((m) => m.messageId)).toEqual([first, second]);
    });
  });
}
