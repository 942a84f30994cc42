import { OutboxDispatcher, OutboxEvent, OutboxService } from '../../lib';
import { RecordingPublisher } from '../../lib/testing';
import { testDatabase, TestOrder } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';

const sqlite = testDatabase('sqlite');

@OutboxEvent({ topic: 'orders', type: 'order.created', key: 'orderId' })
class OrderCreated {
  constructor(
    readonly orderId: string,
    readonly total: number,
  ) {}
}

// What a user of nestjs-outbox/testing does: the real module on a real database, with the
// recording publisher in place of the broker, driven by the dispatcher's runOnce/drain.
describe('nestjs-outbox/testing RecordingPublisher, in an app', () => {
  const scope = useOutboxScope(sqlite);
  let publisher: RecordingPublisher;
  let outbox: OutboxService;
  let dispatcher: OutboxDispatcher;

  const placeOrder = (orderId: string, total: number) =>
    scope.ds.transaction(async (manager) => {
      await manager.save(TestOrder, { customer: orderId });
      return outbox.enqueue(new OrderCreated(orderId, total), manager);
    });

  beforeEach(async () => {
    publisher = new RecordingPublisher();
    ({ outbox, dispatcher } = await scope.open({
      publisher,
      options: { retry: { initialDelayMs: 0, jitter: 0 } },
    }));
  });

  it('records what was published, with payloads and filters', async () => {
    const first = await placeOrder('o-1', 10);
    await placeOrder('o-2', 20);
    await dispatcher.drain();

    expect(publisher.messages.map((m) => m.type)).toEqual(['order.created', 'order.created']);
    expect(publisher.messageIds[0]).toBe(first);
    expect(publisher.payloads<{ orderId: string; total: number }>({ key: 'o-2' })).toEqual([
      { orderId: 'o-2', total: 20 },
    ]);
    expect(publisher.messagesFor({ topic: 'other' })).toEqual([]);
  });

  it('a rolled-back transaction publishes nothing', async () => {
    await expect(
      scope.ds.transaction(async (manager) => {
        await outbox.enqueue(new OrderCreated('o-9', 1), manager);
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    await dispatcher.drain();
    expect(publisher.calls).toEqual([]);
  });

  it('failNext fails the next message once: it is retried, then published', async () => {
    const id = await placeOrder('o-1', 10);
    publisher.failNext();

    const first = await dispatcher.runOnce();
    expect(first).toMatchObject({ claimed: 1, published: 0, retried: 1 });
    expect(publisher.messages).toEqual([]);

    await dispatcher.drain();
    expect(publisher.messageIds).toEqual([id]);
    expect(publisher.attemptsOf(id)).toBe(2);
  });

  it('a permanent failure dead-letters the message; clear() forgets the record', async () => {
    await placeOrder('o-1', 10);
    publisher.fail({ key: 'o-1' }, 'permanent');
    const report = await dispatcher.runOnce();
    expect(report).toMatchObject({ deadLettered: 1, published: 0 });
    expect((await outbox.stats()).dead).toBe(1);

    publisher.clear();
    expect(publisher.calls).toEqual([]);
  });

  it('goDown() is an outage: nothing published, no attempt burnt, delivered after comeBack()', async () => {
    const id = await placeOrder('o-1', 10);
    publisher.goDown();
    await expect(publisher.ping()).rejects.toThrow(/ECONNREFUSED/);
    const during = await dispatcher.runOnce();
    expect(during).toMatchObject({ published: 0, retried: 0, deadLettered: 0 });

    publisher.comeBack();
    await publisher.ping();
    // The outage pause is still running: wait for it like an app would, through the publisher.
    await dispatcher.start();
    await publisher.until((p) => p.messageIds.includes(id), 10_000, 'delivery after the outage');
    expect(publisher.messages).toHaveLength(1);
  });
});
