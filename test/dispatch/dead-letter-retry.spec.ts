import type { DataSource } from 'typeorm';
import type { OutboxMessage, OutboxRecord } from '../../lib';
import { quoteTable } from '../support/outbox-harness';
import { readOutbox, storedId, TEST_DATABASES } from '../support/databases';
import { type Instance } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// Retrying a dead letter keeps its key's order: under 'block' the retried head goes back to the
// head of its key and the key flows at once; under 'skip' the decision "has the key moved past
// it?" and the requeue are one step as far as claims and enqueues can tell, so a key never has
// two messages in flight.

const msg = (key: string, n: string): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload: { n },
});

async function enqueue(d: Instance, ds: DataSource, m: OutboxMessage): Promise<string> {
  return String(await ds.transaction((em) => d.outbox.enqueue(m, em)));
}

/** Runs batches until nothing more is published. */
async function runUntilQuiet(d: Instance): Promise<void> {
  for (let i = 0; i < 20; i++) {
    const report = await d.dispatcher.runOnce();
    if (report.claimed === 0) return;
  }
}

type Retry = (d: Instance, ids: string[]) => Promise<unknown>;
const RETRIES: readonly (readonly [string, Retry])[] = [
  ['OutboxAdmin.retry', (d, ids) => d.admin.retry(ids)],
  ['OutboxAdmin.retryWhere', (d) => d.admin.retryWhere({ topic: 'orders' })],
  ['OutboxService.retryDead', (d, ids) => d.outbox.retryDead(ids)],
];

describe.each(TEST_DATABASES)('retrying dead letters on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_dlr' });
    let table: string;

    beforeEach(async () => {
      table = await scope.table();
    });

    it.each(RETRIES)(
      "under 'block', %s puts the dead head back at the head of its key, which flows at once in order",
      async (_, retry) => {
        const d = await scope.instance(table, 'block');
        const h = await enqueue(d, scope.ds, msg('K', 'H'));
        const f1 = await enqueue(d, scope.ds, msg('K', 'F1'));
        d.publisher.failNext('permanent');
        await d.dispatcher.runOnce(); // H dead
        await d.dispatcher.runOnce(); // F1 parked behind it
        const parked = await readOutbox(scope.ds, table);
        expect(parked.map((r) => r.status)).toEqual(['dead', 'waiting']);
        const f2 = await enqueue(d, scope.ds, msg('K', 'F2'));

        await retry(d, [h]);
        const first = await d.dispatcher.runOnce();
        expect(first.published).toBe(1);
        expect(d.publisher.sentIds).toEqual([h]);
        await runUntilQuiet(d);

        expect(d.publisher.sentForKey('K')).toEqual([h, f1, f2]);
        expect((await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered')).toBe(
          true,
        );
      },
    );
  });
});

describe.each(TEST_DATABASES.filter((db) => db.name !== 'sqlite'))(
  "retrying dead letters under 'skip' against concurrent enqueues and claims on $name",
  (db) => {
    // SQLite runs the decision and the requeue in one synchronous write transaction: nothing
    // can come between them there.
    describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_dls' });
      let table: string;

      beforeEach(async () => {
        table = await scope.table();
      });

      it('never lets a message enqueued and claimed during a retry run beside the retried one', async () => {
        const skip = { ordering: { onDeadLetter: 'skip' as const } };
        const a = await scope.instance(table, 'a', {
          ...skip,
          dispatcher: { leaseMs: 6_000, publishTimeoutMs: 2_000 },
        });
        const b = await scope.instance(table, 'b', skip);
        // One tracker over both dispatchers: a key must never have two messages in flight.
        const inFlight = new Set<string>();
        const overlaps: string[] = [];
        for (const d of [a, b]) {
          const publish = d.publisher.publish.bind(d.publisher);
          d.publisher.publish = async (messages: readonly OutboxRecord[], signal) => {
            for (const m of messages) {
              if (m.key !== null && inFlight.has(m.key)) overlaps.push(m.key);
              if (m.key !== null) inFlight.add(m.key);
            }
            try {
              return await publish(messages, signal);
            } finally {
              for (const m of messages) if (m.key !== null) inFlight.delete(m.key);
            }
          };
        }

        const h = await enqueue(b, scope.ds, msg('K', 'H'));
        await enqueue(b, scope.ds, msg('K', 'F1'));
        b.publisher.failNext('permanent');
        await b.dispatcher.runOnce(); // H dead; under 'skip' the key moves on
        await b.dispatcher.runOnce(); // F1 delivered
        expect((await readOutbox(scope.ds, table)).map((r) => r.status)).toEqual([
          'dead',
          'delivered',
        ]);

        // Hold H's row so that the retry's requeue waits: the gap between its decision and its
        // requeue is as wide as the test wants.
        const holder = scope.ds.createQueryRunner();
        await holder.connect();
        await holder.startTransaction();
        const param = db.name === 'postgres' ? '$1' : '?';
        await holder.query(
          `SELECT id FROM ${quoteTable(scope.ds, table)} WHERE message_id = ${param} FOR UPDATE`,
          [storedId(scope.ds.options.type, h)],
        );
        const retried = b.admin.retry([h]);
        await sleep(300);
        const f2Enqueued = enqueue(b, scope.ds, msg('K', 'F2'));
        const f2CommittedFirst = await Promise.race([
          f2Enqueued.then(() => true),
          sleep(1_000).then(() => false),
        ]);
        // Where F2 could commit in the gap, another dispatcher claims it and holds it in flight.
        a.publisher.slow(1_500);
        const aRun = f2CommittedFirst ? a.dispatcher.runOnce() : undefined;
        if (aRun !== undefined) await waitFor('F2 in flight', () => inFlight.has('K'));
        await holder.commitTransaction();
        await holder.release();
        await retried;
        const f2 = await f2Enqueued;
        await b.dispatcher.runOnce();
        await aRun;
        await waitFor(
          'every message delivered',
          async () => {
            await runUntilQuiet(b);
            return (await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered');
          },
          { timeoutMs: 20_000 },
        );

        expect(overlaps).toEqual([]);
        const published = [...a.publisher.sentForKey('K'), ...b.publisher.sentForKey('K')];
        expect(published).toContain(h);
        expect(published).toContain(f2);
      });
    });
  },
);
