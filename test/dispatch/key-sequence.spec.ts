import type { DataSource } from 'typeorm';
import { OUTBOX_HEADER_SEQUENCE } from '../../lib';
import { TestOrder } from '../support/databases';
import { quoteTable, type OutboxApp } from '../support/outbox-harness';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
} from '../../lib/store/schema/outbox-table-ddl';
import { CLAIM_LOOP } from '../support/test-claims';

// ordering.sequence: each keyed message gets the next number of its key at enqueue (key_seq and
// the x-outbox-sequence header), 1, 2, 3… in commit order, nothing burnt by a rollback or a
// skipped duplicate, kept across the cleaner's deletes, and sent with the message.

const SEQUENCE = { ordering: { sequence: true } };

/** key_seq of each row by message id (read back through the header's twin, the column). */
async function numbers(ds: DataSource, h: OutboxApp): Promise<Map<string, number | null>> {
  const rows = await h.rows();
  const raw = await ds.query<{ id: unknown; key_seq: unknown }[]>(
    `SELECT id, key_seq FROM ${quoteTable(ds, h.table)} ORDER BY id`,
  );
  const byId = new Map(raw.map((r) => [String(r.id), r.key_seq]));
  return new Map(
    rows.map((r) => {
      const value = byId.get(r.id);
      return [r.messageId, value === null || value === undefined ? null : Number(value)];
    }),
  );
}

for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `key sequence on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_seq', options: CLAIM_LOOP });
    const apps = dispatchApps(scope);

    it('numbers concurrent enqueues of one key 1..n in commit order; a rolled-back one burns nothing', async () => {
      const h = await apps.boot(new RecordingPublisher(), SEQUENCE);
      const committedInOrder: string[] = [];
      const write = (i: number) =>
        scope.ds
          .transaction(async (manager) => {
            await manager.save(TestOrder, { customer: `seq-${i}` });
            const [id] = await h.outbox.enqueue([msg('hot', { i })], manager);
            // Hold the key a while, so that the others queue behind this transaction.
            await sleep(20 + ((i * 37) % 50));
            if (i === 2) throw new Error('business failure after enqueue');
            return id as string;
          })
          .then(
            (id) => committedInOrder.push(id),
            (error: unknown) => {
              if (!String(error).includes('business failure')) throw error;
            },
          );
      // SQLite's one connection runs one transaction at a time: its writers go one after another.
      if (db.name === 'sqlite') for (let i = 0; i < 6; i++) await write(i);
      else await Promise.all(Array.from({ length: 6 }, (_, i) => write(i)));
      expect(committedInOrder).toHaveLength(5);
      const seq = await numbers(scope.ds, h);
      expect(committedInOrder.map((id) => seq.get(id))).toEqual([1, 2, 3, 4, 5]);
      const rows = await h.rows();
      for (const row of rows) {
        expect(row.headers[OUTBOX_HEADER_SEQUENCE]).toBe(String(seq.get(row.messageId)));
      }
      // The next writer takes 6: the rolled-back enqueue gave its number back.
      const [next] = await h.commit([msg('hot')]);
      expect((await numbers(scope.ds, h)).get(next as string)).toBe(6);
    });

    it('numbers a batch per key in the order given, leaves keyless messages unnumbered, and gives a skipped duplicate no number', async () => {
      const h = await apps.boot(new RecordingPublisher(), SEQUENCE);
      const first = await h.commit([msg('a'), msg('b'), msg(null), msg('a'), msg('a')]);
      const dup = await h.commit([msg('b', {}, { messageId: first[1] }), msg('b')]);
      const seq = await numbers(scope.ds, h);
      expect(first.map((id) => seq.get(id))).toEqual([1, 1, null, 2, 3]);
      expect(seq.get(dup[1] as string)).toBe(2);
      const keyless = (await h.rows()).find((r) => r.messageId === first[2]);
      expect(keyless?.headers[OUTBOX_HEADER_SEQUENCE]).toBeUndefined();
    });

    it('counts per destination and key: a key used on two topics gives each topic 1, 2, 3 without a gap', async () => {
      const h = await apps.boot(new RecordingPublisher(), SEQUENCE);
      const pay = (key: string) => msg(key, {}, { topic: 'payments' });
      const ids = await h.commit([msg('o-1'), pay('o-1'), msg('o-1'), pay('o-1'), pay('o-1')]);
      const more = await h.commit([msg('o-1'), pay('o-1')]);
      const seq = await numbers(scope.ds, h);
      expect(ids.map((id) => seq.get(id))).toEqual([1, 1, 2, 2, 3]);
      expect(more.map((id) => seq.get(id))).toEqual([3, 4]);
    });

    it('sends the number as x-outbox-sequence, and keeps counting after the cleaner deleted the delivered rows', async () => {
      const publisher = new RecordingPublisher();
      const h = await apps.boot(publisher, {
        ...SEQUENCE,
        cleaner: { deliveredRetentionMs: 1 },
      });
      await h.commit([msg('k'), msg('k'), msg('j')]);
      await h.runUntilIdle();
      await sleep(20);
      expect(await h.cleaner.runOnce()).toMatchObject({ delivered: 3 });
      expect(await h.rows()).toEqual([]);
      await h.commit([msg('k'), msg('j')]);
      await h.runUntilIdle();
      const of = (key: string) =>
        publisher.sent.filter((r) => r.key === key).map((r) => r.headers[OUTBOX_HEADER_SEQUENCE]);
      expect(of('k')).toEqual(['1', '2', '3']);
      expect(of('j')).toEqual(['1', '2']);
    });

    it('keeps counting when delivered rows are deleted at settle', async () => {
      const publisher = new RecordingPublisher();
      const h = await apps.boot(publisher, { ...SEQUENCE, cleaner: { deliveredRetentionMs: 0 } });
      await h.commit([msg('k')]);
      await h.runUntilIdle();
      expect(await h.rows()).toEqual([]);
      await h.commit([msg('k')]);
      await h.runUntilIdle();
      expect(publisher.sent.map((r) => r.headers[OUTBOX_HEADER_SEQUENCE])).toEqual(['1', '2']);
    });

    it('refuses to start with the option on until schema step 6 is there, and works without it when off', async () => {
      const table = await scope.table('outbox_seqm');
      const dialect = outboxDialectOf(scope.ds.options.type);
      await outboxDatabase(dialect).schema.keySequence?.drop(
        (sql, params) => scope.ds.query(sql, params),
        tableNamesFor(dialect, { tableName: table }),
      );
      await expect(apps.enqueuer(table, SEQUENCE)).rejects.toThrow(
        /lacks the key_seq column or the counter table .*schema migrate/s,
      );
      const plain = await apps.enqueuer(table);
      await expect(plain.commit([msg('k')])).resolves.toHaveLength(1);
    });

    it('writes no number with the option off', async () => {
      const h = await apps.boot(new RecordingPublisher());
      const [id] = await h.commit([msg('k')]);
      expect((await numbers(scope.ds, h)).get(id as string)).toBeNull();
      expect((await h.rows())[0]?.headers[OUTBOX_HEADER_SEQUENCE]).toBeUndefined();
    });
  });
}

// The number reaches the broker whatever brought the row to the dispatcher: on the log source
// it is read from the table when the row is leased, after the numbering's update committed.
for (const source of SOURCE_CASES) {
  describeSource(source, 'key sequence delivery', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_seqd' });
    const src = useSource(scope, source);

    it('publishes each keyed message with its number, in order', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, SEQUENCE);
      for (let tx = 0; tx < 4; tx++) await h.commit([msg('k', { tx }), msg('m', { tx })]);
      await src.deliver(h, 'all delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
      const of = (key: string) =>
        publisher.sent.filter((r) => r.key === key).map((r) => r.headers[OUTBOX_HEADER_SEQUENCE]);
      expect(of('k')).toEqual(['1', '2', '3', '4']);
      expect(of('m')).toEqual(['1', '2', '3', '4']);
    });
  });
}
