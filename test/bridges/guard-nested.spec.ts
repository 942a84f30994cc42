import { OutboxBridgeError, OutboxEvent } from '../../lib';
import { describeWith } from '../support/services';
import { openClsApp, OrderPlaced, type ClsApp } from './cls-app';
import { prismaPostgres, uniqueOrderId, type ClsLibrary } from './cls-targets';

// guardOutboxWrites() with nested transactions (Propagation.Nested: savepoints of the Prisma
// adapter on PostgreSQL): a bridge write in a savepoint that rolls back goes with it, and a
// failed bridge write fails the outer transaction even when the nested one's error was caught.

class Rollback extends Error {}

/** An outbox event whose write fails: its key cannot be computed. */
@OutboxEvent({
  topic: 'orders',
  key: () => {
    throw new Error('no key today');
  },
})
class Unwritable {}

describeWith(['postgres'], 'guardOutboxWrites with nested transactions (Prisma)', () => {
  let library: ClsLibrary;
  let app: ClsApp;

  beforeAll(async () => {
    library = await prismaPostgres.open();
    await library.connection.sql.query(library.ordersDdl);
    app = await openClsApp(library, { cqrs: {} });
  });

  afterAll(async () => {
    await app?.close();
    await library?.close();
  });

  it('keeps the write of a committed savepoint and drops that of a rolled-back one', async () => {
    const kept = uniqueOrderId();
    const dropped = uniqueOrderId();
    await app.orders.place(kept, async () => {
      await app.orders.nested(async () => {
        await app.eventBus.publish(new OrderPlaced(kept, 'ann'));
      });
      await app.orders
        .nested(async () => {
          await app.eventBus.publish(new OrderPlaced(dropped, 'ann'));
          throw new Rollback();
        })
        .catch((error: unknown) => {
          if (!(error instanceof Rollback)) throw error;
        });
    });
    expect(await app.orderExists(kept)).toBe(true);
    await app.drain();
    const orderIds = app.received.outbox.map((m) => m.payload.orderId);
    expect(orderIds).toContain(kept);
    expect(orderIds).not.toContain(dropped);
  });

  it('fails the outer transaction when a bridge write failed in a caught nested one', async () => {
    const orderId = uniqueOrderId();
    const error = await app.orders
      .place(orderId, async () => {
        await app.orders
          .nested(async () => {
            await app.eventBus.publish(new Unwritable());
          })
          .catch(() => undefined);
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(OutboxBridgeError);
    expect((error as OutboxBridgeError).reason).toBe('failed-write');
    expect(await app.orderExists(orderId)).toBe(false);
  });
});
