import { OutboxBridgeError, OutboxOptionsError, OutboxTransactionRequiredError } from '../../lib';
import { EventEmitter2 } from '@nestjs/event-emitter';
import { OutboxEventEmitterModule } from '../../lib/integrations/event-emitter';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { openClsApp, OrderPlaced, OrderViewed, type ClsApp } from './cls-app';
import { drizzleMariadb, prismaPostgres, type ClsLibrary, uniqueOrderId } from './cls-targets';

// @nestjs/event-emitter into the outbox: `await emitter.emitAsync(name, event)` of an
// @OutboxEvent inside a @Transactional() method writes the outbox row in that transaction (no
// listener runs now; the in-process transport delivers after commit); emit() of one inside a
// transaction is refused, since it cannot wait for the write; other emits are untouched.

class Rollback extends Error {}

const idsOf = (app: ClsApp, orderId: string): string[] =>
  app.received.outbox.filter((m) => m.payload.orderId === orderId).map((m) => m.messageId);
const heard = (app: ClsApp, orderId: string): object[] =>
  app.received.inMemory.filter((e) => (e as { orderId?: string }).orderId === orderId);

for (const target of [prismaPostgres, drizzleMariadb]) {
  describeWith(target.services, `@nestjs/event-emitter bridge: ${target.name}`, () => {
    let library: ClsLibrary;
    const apps: ClsApp[] = [];
    let app: ClsApp;

    beforeAll(async () => {
      library = await target.open();
      await library.connection.sql.query(library.ordersDdl);
      app = await openClsApp(library, { emitter: {} });
      apps.push(app);
    });

    afterAll(async () => {
      for (const opened of apps) await opened.close();
      if (library !== undefined && library.ordersTable.startsWith('orders_cls')) {
        await library.connection.sql.query(`DROP TABLE IF EXISTS ${library.ordersTable}`);
      }
      await library?.close();
    });

    it('writes an emitAsync @OutboxEvent in the committed transaction; delivered once, after commit', async () => {
      const orderId = uniqueOrderId();
      const answers = await app.orders.place(orderId, () =>
        app.emitter.emitAsync('order.placed', new OrderPlaced(orderId, 'ann')),
      );
      expect(answers).toEqual([]);
      expect(await app.orderExists(orderId)).toBe(true);
      expect(heard(app, orderId)).toEqual([]);
      await app.drain();
      await app.drain();
      expect(idsOf(app, orderId)).toHaveLength(1);
    });

    it('writes and delivers nothing when the transaction rolls back', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      await expect(
        app.orders.place(orderId, async () => {
          await app.emitter.emitAsync('order.placed', new OrderPlaced(orderId, 'bob'));
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      expect((await app.rows()).length).toBe(before);
      expect(await app.orderExists(orderId)).toBe(false);
      await app.drain();
      expect(idsOf(app, orderId)).toEqual([]);
    });

    it('refuses emit() of an @OutboxEvent inside a transaction, rolling it back', async () => {
      const orderId = uniqueOrderId();
      const error = await app.orders
        .place(orderId, () => {
          app.emitter.emit('order.placed', new OrderPlaced(orderId, 'cy'));
          return Promise.resolve();
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxBridgeError);
      expect((error as OutboxBridgeError).reason).toBe('synchronous-emit');
      expect(await app.orderExists(orderId)).toBe(false);
      expect(heard(app, orderId)).toEqual([]);
    });

    it('rolls back a transaction that ends while its emitAsync is still writing (not awaited)', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      const error = await app.orders
        .place(orderId, () => {
          void app.emitter.emitAsync('order.placed', new OrderPlaced(orderId, 'dan'));
          return Promise.resolve();
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxBridgeError);
      expect((error as OutboxBridgeError).reason).toBe('unsettled-write');
      expect(await app.orderExists(orderId)).toBe(false);
      expect((await app.rows()).length).toBe(before);
    });

    it('passes other values to the listeners untouched, inside and outside a transaction', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      await app.orders.place(orderId, async () => {
        app.emitter.emit('order.viewed', new OrderViewed(orderId));
        await app.emitter.emitAsync('order.viewed', new OrderViewed(orderId));
      });
      app.emitter.emit('order.viewed', new OrderViewed(orderId));
      await waitFor('three listener calls', () => heard(app, orderId).length === 3);
      expect((await app.rows()).length).toBe(before);
    });

    it('refuses an @OutboxEvent outside a transaction by default, writing nothing', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      expect(() => app.emitter.emit('order.placed', new OrderPlaced(orderId, 'eve'))).toThrow(
        OutboxTransactionRequiredError,
      );
      expect(() => app.emitter.emitAsync('order.placed', new OrderPlaced(orderId, 'eve'))).toThrow(
        OutboxTransactionRequiredError,
      );
      expect((await app.rows()).length).toBe(before);
      await expectNever('a listener call', () => heard(app, orderId).length > 0, 300);
    });

    it('keeps per-key order: each key reaches the consumer in commit order', async () => {
      const prefix = uniqueOrderId('seq');
      const sent: Record<string, string[]> = { a: [], b: [] };
      for (let i = 0; i < 6; i++) {
        const key = i % 3 === 0 ? 'a' : 'b';
        const orderId = `${prefix}_${i}`;
        await app.orders.place(orderId, () =>
          app.emitter.emitAsync('order.placed', new OrderPlaced(orderId, `${prefix}_${key}`)),
        );
        sent[key]?.push(orderId);
      }
      await app.drain();
      for (const key of ['a', 'b']) {
        const got = app.received.outbox
          .filter((m) => m.key === `${prefix}_${key}`)
          .map((m) => m.payload.orderId);
        expect(got).toEqual(sent[key]);
      }
    });

    it("outsideTransaction: 'publish' hands an @OutboxEvent outside a transaction to the listeners", async () => {
      const passing = await openClsApp(library, { emitter: { outsideTransaction: 'publish' } });
      apps.push(passing);
      const orderId = uniqueOrderId();
      passing.emitter.emit('order.placed', new OrderPlaced(orderId, 'fay'));
      await passing.emitter.emitAsync('order.placed', new OrderPlaced(orderId, 'fay'));
      await waitFor('two listener calls', () => heard(passing, orderId).length === 2);
      expect(await passing.rows()).toEqual([]);
      await passing.close();
      // Closed: the emitter's own methods are back.
      expect(passing.emitter.emit).toBe(EventEmitter2.prototype.emit);
      expect(passing.emitter.emitAsync).toBe(EventEmitter2.prototype.emitAsync);
    });
  });
}

describe('OutboxEventEmitterModule.forRoot options', () => {
  it('rejects bad options at bootstrap with the fix', () => {
    expect(() => OutboxEventEmitterModule.forRoot({ requireGuard: 'yes' as never })).toThrow(
      OutboxOptionsError,
    );
    expect(() => OutboxEventEmitterModule.forRoot({ requireGuard: 'yes' as never })).toThrow(
      /OutboxEventEmitterModule option "requireGuard"/,
    );
  });
});
