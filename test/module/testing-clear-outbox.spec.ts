import { clearOutbox, RecordingPublisher } from '../../lib/testing';
import { readAttempts, TEST_DATABASES, TestOrder } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// The README's "Testing your app" flow, run twice against the same database: with
// clearOutbox() before each test, the second run sees only its own messages.

describe.each(TEST_DATABASES)('clearOutbox on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_clear' });
    const table = scope.baseTable;

    /** One run of the README's spec: a module, its two tests, closed at the end. */
    async function runReadmeSpec(clear: boolean): Promise<unknown[][]> {
      const publisher = new RecordingPublisher();
      const app = await scope.open({ table, publisher });
      const create = (customer: string, total: number) =>
        scope.ds.transaction(async (m) => {
          const order = await m.save(TestOrder, { customer });
          await app.outbox.enqueue(
            { topic: 'orders', type: 'order.created', payload: { id: order.id, total } },
            m,
          );
        });
      const seen: unknown[][] = [];
      try {
        // beforeEach, then "publishes OrderCreated once the order is committed"
        publisher.heal().clear();
        if (clear) await clearOutbox(scope.ds, { tableName: table });
        await create('c-1', 42);
        await app.dispatcher.drain();
        seen.push(publisher.payloads({ type: 'order.created' }));
        // beforeEach, then "keeps the event for a retry when the broker refuses it"
        publisher.heal().clear();
        if (clear) await clearOutbox(scope.ds, { tableName: table });
        publisher.failNext();
        await create('c-2', 7);
        await app.dispatcher.runOnce();
      } finally {
        await app.close();
      }
      return seen;
    }

    it('lets the README spec pass twice in a row: each run publishes only its own order', async () => {
      const first = await runReadmeSpec(true);
      // The first run's refused message left an attempt in the history; clearOutbox takes it too.
      expect(await readAttempts(scope.ds, table)).toHaveLength(1);
      await clearOutbox(scope.ds, { tableName: table });
      expect(await readAttempts(scope.ds, table)).toEqual([]);
      const second = await runReadmeSpec(true);
      expect(first[0]).toHaveLength(1);
      expect(second[0]).toHaveLength(1);
      expect(second[0]?.[0]).toMatchObject({ total: 42 });
    });

    it('without it, a message the first run left backing off is published in the second', async () => {
      await clearOutbox(scope.ds, { tableName: table });
      await runReadmeSpec(false);
      // Let the first run's retry backoff (1 s by default, with jitter) pass.
      await sleep(2_500);
      const second = await runReadmeSpec(false);
      expect(second[0]).toHaveLength(2);
      expect(await clearOutbox(scope.ds, { tableName: table })).toBeGreaterThan(0);
    });
  });
});
