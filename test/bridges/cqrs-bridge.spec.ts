import { OutboxBridgeError, OutboxEvent, OutboxTransactionRequiredError } from '../../lib';
import { OutboxCqrsModule } from '../../lib/integrations/cqrs';
import { OutboxOptionsError } from '../../lib';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { openClsApp, OrderPlaced, OrderViewed, type ClsApp } from './cls-app';
import {
  drizzleMariadb,
  prismaPostgres,
  typeormPostgres,
  type ClsLibrary,
  uniqueOrderId,
} from './cls-targets';

// @nestjs/cqrs into the outbox: EventBus.publish()/publishAll() of an @OutboxEvent inside a
// @Transactional() method (ambient through nestjs-cls) writes the outbox row in that transaction;
// the in-process transport delivers it after commit. Other events reach their handlers at once.

class Rollback extends Error {}

@OutboxEvent({
  topic: 'orders',
  key: () => {
    throw new Error('no key today');
  },
})
class Unkeyable {}

const idsOf = (app: ClsApp, orderId: string): string[] =>
  app.received.outbox.filter((m) => m.payload.orderId === orderId).map((m) => m.messageId);
const inMemory = (app: ClsApp, orderId: string): object[] =>
  app.received.inMemory.filter((e) => (e as { orderId?: string }).orderId === orderId);

for (const target of [prismaPostgres, drizzleMariadb, typeormPostgres]) {
  describeWith(target.services, `@nestjs/cqrs bridge: ${target.name}`, () => {
    let library: ClsLibrary;
    let app: ClsApp;

    beforeAll(async () => {
      library = await target.open();
      await library.connection.sql.query(library.ordersDdl);
      app = await openClsApp(library, { cqrs: {} });
    });

    afterAll(async () => {
      await app?.close();
      if (library !== undefined && library.ordersTable.startsWith('orders_cls')) {
        await library.connection.sql.query(`DROP TABLE IF EXISTS ${library.ordersTable}`);
      }
      await library?.close();
    });

    it('writes a published @OutboxEvent in the committed transaction; delivered once, after commit', async () => {
      const orderId = uniqueOrderId();
      await app.orders.place(orderId, async () => {
        await app.eventBus.publish(new OrderPlaced(orderId, 'ann'));
      });
      expect(await app.orderExists(orderId)).toBe(true);
      // The in-memory handlers did not get it: the outbox did.
      expect(inMemory(app, orderId)).toEqual([]);
      expect(idsOf(app, orderId)).toEqual([]);
      await app.drain();
      await app.drain();
      expect(idsOf(app, orderId)).toHaveLength(1);
      expect((await app.rows()).map((r) => r.messageId)).toContain(idsOf(app, orderId)[0]);
    });

    it('writes nothing and delivers nothing when the transaction rolls back', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      await expect(
        app.orders.place(orderId, async () => {
          await app.eventBus.publish(new OrderPlaced(orderId, 'bob'));
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
      expect(await app.orderExists(orderId)).toBe(false);
      expect((await app.rows()).length).toBe(before);
      await app.drain();
      expect(idsOf(app, orderId)).toEqual([]);
      expect(inMemory(app, orderId)).toEqual([]);
    });

    it('hands events without @OutboxEvent to their handlers, untouched, inside a transaction', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      const viewed = new OrderViewed(orderId);
      await app.orders.place(orderId, async () => {
        await app.eventBus.publish(viewed);
      });
      await waitFor('the in-memory handler', () => inMemory(app, orderId).length === 1);
      expect(inMemory(app, orderId)[0]).toBe(viewed);
      expect((await app.rows()).length).toBe(before);
    });

    it('publishAll writes the outbox events in one go and hands the others on', async () => {
      const a = uniqueOrderId();
      const b = uniqueOrderId();
      await app.orders.place(a, async () => {
        await app.eventBus.publishAll([
          new OrderPlaced(a, 'dan'),
          new OrderViewed(a),
          new OrderPlaced(b, 'dan'),
        ]);
      });
      await waitFor('the in-memory handler', () => inMemory(app, a).length === 1);
      expect(inMemory(app, a)[0]).toBeInstanceOf(OrderViewed);
      await app.drain();
      expect(idsOf(app, a)).toHaveLength(1);
      expect(idsOf(app, b)).toHaveLength(1);
      expect(inMemory(app, b)).toEqual([]);
    });

    it('refuses an @OutboxEvent outside a transaction by default, at the call, writing nothing', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      expect((): unknown => app.eventBus.publish(new OrderPlaced(orderId, 'eve'))).toThrow(
        OutboxTransactionRequiredError,
      );
      expect((): unknown => app.eventBus.publishAll([new OrderPlaced(orderId, 'eve')])).toThrow(
        OutboxTransactionRequiredError,
      );
      expect((await app.rows()).length).toBe(before);
      await expectNever('an in-memory delivery', () => inMemory(app, orderId).length > 0, 300);
    });

    it('rolls back a transaction that ends while its publish is still writing (not awaited)', async () => {
      const orderId = uniqueOrderId();
      const before = (await app.rows()).length;
      const error = await app.orders
        .place(orderId, () => {
          // The bug the guard is for: the write would otherwise run after the commit.
          void app.eventBus.publish(new OrderPlaced(orderId, 'fay'));
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
      await app.drain();
      expect(idsOf(app, orderId)).toEqual([]);
    });

    it('rolls back a transaction whose bridge write failed, even when the caller caught it', async () => {
      const orderId = uniqueOrderId();
      const error = await app.orders
        .place(orderId, async () => {
          await (app.eventBus.publish(new Unkeyable()) as Promise<void>).catch(() => undefined);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxBridgeError);
      expect((error as OutboxBridgeError).reason).toBe('failed-write');
      expect(await app.orderExists(orderId)).toBe(false);
    });

    it('keeps per-key order: each key reaches the consumer in commit order', async () => {
      const keys = ['k1', 'k2'];
      const sent: Record<string, string[]> = { k1: [], k2: [] };
      const prefix = uniqueOrderId('seq');
      for (let i = 0; i < 6; i++) {
        const key = keys[i % 2] as string;
        const orderId = `${prefix}_${i}`;
        await app.orders.place(orderId, async () => {
          await app.eventBus.publish(new OrderPlaced(orderId, `${prefix}_${key}`));
        });
        sent[key]?.push(orderId);
      }
      await app.drain();
      for (const key of keys) {
        const got = app.received.outbox
          .filter((m) => m.key === `${prefix}_${key}`)
          .map((m) => m.payload.orderId);
        expect(got).toEqual(sent[key]);
      }
    });
  });

  describeWith(target.services, `@nestjs/cqrs bridge options: ${target.name}`, () => {
    let library: ClsLibrary;
    const apps: ClsApp[] = [];

    beforeAll(async () => {
      library = await target.open();
      await library.connection.sql.query(library.ordersDdl);
    });

    afterAll(async () => {
      for (const app of apps) await app.close();
      if (library !== undefined && library.ordersTable.startsWith('orders_cls')) {
        await library.connection.sql.query(`DROP TABLE IF EXISTS ${library.ordersTable}`);
      }
      await library?.close();
    });

    it("outsideTransaction: 'publish' hands an @OutboxEvent outside a transaction to the handlers only", async () => {
      const app = await openClsApp(library, { cqrs: { outsideTransaction: 'publish' } });
      apps.push(app);
      const orderId = uniqueOrderId();
      const event = new OrderPlaced(orderId, 'gus');
      app.eventBus.publish(event);
      await waitFor('the in-memory handler', () => inMemory(app, orderId).length === 1);
      expect(await app.rows()).toEqual([]);
      // Inside a transaction it still goes to the outbox.
      await app.orders.place(orderId, async () => {
        await app.eventBus.publish(new OrderPlaced(orderId, 'gus'));
      });
      expect(await app.rows()).toHaveLength(1);
      expect(inMemory(app, orderId)).toHaveLength(1);
    });

    it('refuses to write in a transaction whose adapter is not wrapped with guardOutboxWrites()', async () => {
      const app = await openClsApp(library, { cqrs: {}, unguarded: true });
      apps.push(app);
      const orderId = uniqueOrderId();
      const error = await app.orders
        .place(orderId, async () => {
          await app.eventBus.publish(new OrderPlaced(orderId, 'hal'));
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxBridgeError);
      expect((error as OutboxBridgeError).reason).toBe('unguarded-transaction');
      expect(await app.orderExists(orderId)).toBe(false);
      expect(await app.rows()).toEqual([]);
    });

    it('gives the EventBus its own publisher back when the app closes', async () => {
      const app = await openClsApp(library, { cqrs: {} });
      const bus = app.eventBus;
      expect(bus.publisher.constructor.name).toBe('OutboxEventPublisher');
      await app.close();
      expect(bus.publisher.constructor.name).toBe('DefaultPubSub');
    });
  });
}

describe('OutboxCqrsModule.forRoot options', () => {
  it('rejects bad options at bootstrap with the fix', () => {
    expect(() =>
      OutboxCqrsModule.forRoot({ outsideTransaction: 'ignore' as unknown as 'refuse' }),
    ).toThrow(OutboxOptionsError);
    expect(() =>
      OutboxCqrsModule.forRoot({ outsideTransaction: 'ignore' as unknown as 'refuse' }),
    ).toThrow(/outsideTransaction.*'refuse' \(the default\) or 'publish'/);
    expect(() => OutboxCqrsModule.forRoot({ requireGaurd: false } as never)).toThrow(
      /requireGuard/,
    );
    expect(() => OutboxCqrsModule.forRoot({ outbox: 'a b' })).toThrow(OutboxOptionsError);
  });
});
