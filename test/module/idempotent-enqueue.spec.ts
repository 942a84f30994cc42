import {
  OutboxDispatcher,
  OutboxEvent,
  OutboxInvalidMessageError,
  OutboxService,
  type OutboxMessage,
} from '../../lib';
import { readOutbox, TEST_DATABASES, TestOrder } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

@OutboxEvent<OrderPaid>({ topic: 'orders', key: 'orderId', dedupeKey: (e) => `paid:${e.orderId}` })
class OrderPaid {
  constructor(readonly orderId: string) {}
}

const msg = (extra: Partial<OutboxMessage>): OutboxMessage => ({
  topic: 'orders',
  type: 'order.created',
  key: 'o-1',
  payload: { orderId: 'o-1' },
  ...extra,
});

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `idempotent enqueue on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_idem' });
    const table = scope.baseTable;
    let outbox: OutboxService;
    let dispatcher: OutboxDispatcher;
    let publisher: RecordingPublisher;

    beforeEach(async () => {
      await scope.ds.query(`DELETE FROM ${db.name === 'mariadb' ? `\`${table}\`` : `"${table}"`}`);
      publisher = new RecordingPublisher();
      ({ outbox, dispatcher } = await scope.open({
        table,
        publisher,
        options: { dispatcher: { listen: false } },
      }));
    });

    const inTx = <T>(work: (m: import('typeorm').EntityManager) => Promise<T>) =>
      scope.ds.transaction(async (m) => {
        await m.save(TestOrder, { customer: 'idem' });
        return work(m);
      });

    it('a business operation retried in a new transaction enqueues its message once', async () => {
      const first = await inTx((m) => outbox.enqueue(msg({ dedupeKey: 'order-1:created' }), m));
      // The client retries the request; the second transaction commits too.
      const second = await inTx((m) => outbox.enqueue(msg({ dedupeKey: 'order-1:created' }), m));
      expect(second).toBe(first);
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => r.messageId)).toEqual([first]);
      await dispatcher.drain();
      expect(publisher.sentIds).toEqual([first]);
      // Delivered rows still deduplicate while they are kept.
      await inTx((m) => outbox.enqueue(msg({ dedupeKey: 'order-1:created' }), m));
      expect(await readOutbox(scope.ds, table)).toHaveLength(1);
    });

    it('uses a caller-supplied message id, and skips it when it is already there', async () => {
      const id = '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b';
      expect(await inTx((m) => outbox.enqueue(msg({ messageId: id.toUpperCase() }), m))).toBe(id);
      // In a batch, the known id is skipped and the others are written.
      const ids = await inTx((m) =>
        outbox.enqueue([msg({ messageId: id }), msg({ dedupeKey: 'other' }), msg({})], m),
      );
      expect(ids[0]).toBe(id);
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => r.messageId).sort()).toEqual([...new Set(ids)].sort());
      expect(rows).toHaveLength(3);
    });

    it('reports which ids were already there, and keeps the first payload under a reused id', async () => {
      const id = '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a6c';
      const first = await inTx((m) =>
        outbox.enqueueWithReport(msg({ messageId: id, payload: { v: 1 } }), m),
      );
      expect(first).toEqual({ messageIds: [id], duplicates: [] });
      const again = await inTx((m) =>
        outbox.enqueueWithReport(
          [msg({ messageId: id, payload: { v: 2 } }), msg({ dedupeKey: 'fresh-one' })],
          m,
        ),
      );
      expect(again.duplicates).toEqual([id]);
      expect(again.messageIds).toHaveLength(2);
      const row = (await readOutbox(scope.ds, table)).find((r) => r.messageId === id);
      expect(row?.payload).toEqual({ v: 1 });
    });

    it('an event class can derive its dedupe key', async () => {
      const a = await inTx((m) => outbox.enqueue(new OrderPaid('o-7'), m));
      const b = await inTx((m) => outbox.enqueue(new OrderPaid('o-7'), m));
      const c = await inTx((m) => outbox.enqueue(new OrderPaid('o-8'), m));
      expect(b).toBe(a);
      expect(c).not.toBe(a);
      expect(await readOutbox(scope.ds, table)).toHaveLength(2);
    });

    it.each([
      ['a malformed messageId', [msg({ messageId: 'not-a-uuid' })]],
      [
        'messageId and dedupeKey together',
        [msg({ messageId: '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b', dedupeKey: 'x' })],
      ],
      ['an empty dedupeKey', [msg({ dedupeKey: '' })]],
      ['one id twice in one call', [msg({ dedupeKey: 'same' }), msg({ dedupeKey: 'same' })]],
    ])('rejects %s with OutboxInvalidMessageError and writes nothing', async (_what, messages) => {
      const orders = await scope.ds.getRepository(TestOrder).countBy({ customer: 'idem' });
      const attempt = inTx((m) => outbox.enqueue(messages, m));
      await expect(attempt).rejects.toBeInstanceOf(OutboxInvalidMessageError);
      await expect(attempt).rejects.toMatchObject({ reason: 'invalid-message-id' });
      expect(await readOutbox(scope.ds, table)).toHaveLength(0);
      // The business write rolled back with it.
      expect(await scope.ds.getRepository(TestOrder).countBy({ customer: 'idem' })).toBe(orders);
    });

    if (db.name !== 'sqlite') {
      it('two transactions enqueueing one dedupe key at once write it once', async () => {
        let release!: () => void;
        const bothIn = new Promise<void>((resolve) => (release = resolve));
        let inside = 0;
        const attempt = () =>
          inTx(async (m) => {
            const id = await outbox
              .enqueue(msg({ dedupeKey: 'race', key: null }), m)
              .catch((error: unknown) => {
                // The second waits on the first's row until it commits: it must not block
                // the first from reaching its commit.
                throw error;
              });
            if (++inside === 2) release();
            await Promise.race([bothIn, sleep(500)]);
            return id;
          });
        const [a, b] = await Promise.all([attempt(), attempt()]);
        expect(a).toBe(b);
        expect(await readOutbox(scope.ds, table)).toHaveLength(1);
      });
    }
  });
}
