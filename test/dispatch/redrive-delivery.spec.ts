import { REDRIVE_ID_HEADER, REDRIVE_OF_HEADER } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { uniqueTable } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeSource, SOURCE_CASES, useSource } from '../support/sources';

// A re-drive's copies go out the dispatcher's normal way, whatever its source of new messages
// (the table's poll or the database's log): each copy is a new row written through the store's
// insert, due at its place in the rate's spread, so the claim (or the lease by id, which leaves
// a row not yet due to the table) sends them in key order, none before it is due.

for (const source of SOURCE_CASES) {
  describeSource(source, 're-drive delivery', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_rdd' });
    const src = useSource(scope, source);

    /**
     * An app on the source with an audit table. The log's reader hands over the copies at once;
     * those not due yet are the table's, which the log source sweeps every sweepIntervalMs (5 s
     * by default; 200 ms here).
     */
    async function withAudit() {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, {}, { sweepIntervalMs: 200 });
      const audit = new OutboxAuditStore(h.moduleRef.get<SqlPort>(OUTBOX_SQL), {
        tableName: uniqueTable('outbox_rdd_aud'),
      });
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
      return { publisher, h, audit };
    }

    /** `withAudit()`, and 8 messages of key k1 delivered. */
    async function eightOfK1Delivered() {
      const { publisher, h, audit } = await withAudit();
      const originals = await h.commit(Array.from({ length: 8 }, (_, n) => msg('k1', { n })));
      await src.deliver(
        h,
        'the originals delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 8,
      );
      return { publisher, h, audit, originals };
    }

    it('delivers the copies in key order, each once and none before its due time', async () => {
      const { publisher, h, audit } = await withAudit();
      const originals = await h.commit([
        msg('k1', { n: 1 }),
        msg('k2', { n: 2 }),
        msg('k1', { n: 3 }),
        msg(null, { n: 4 }),
        msg('k1', { n: 5 }),
        msg('k2', { n: 6 }),
      ]);
      // Settled, not only published: the re-drive selects delivered rows.
      await src.deliver(
        h,
        'the originals delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 6,
      );

      const preview = await h.admin.previewRedrive({ topic: 'orders' });
      expect(preview.count).toBe(6);
      const report = await h.admin.redrive(
        { topic: 'orders' },
        {
          actor: 'ops',
          reason: 'replay',
          ratePerSecond: 10,
          expected: preview.confirmation ?? '',
          auditTable: { tableName: audit.names.tableName },
        },
      );
      expect(report.count).toBe(6);
      await src.deliver(
        h,
        'the copies delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 12,
      );

      const copies = publisher.sent.slice(6);
      expect(new Set(copies.map((r) => r.messageId)).size).toBe(6);
      expect(copies.every((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId)).toBe(true);
      const of = (key: string | null): unknown[] =>
        copies.filter((r) => r.key === key).map((r) => r.headers[REDRIVE_OF_HEADER]);
      expect(of('k1')).toEqual([originals[0], originals[2], originals[4]]);
      expect(of('k2')).toEqual([originals[1], originals[5]]);
      expect([...copies.map((r) => r.headers[REDRIVE_OF_HEADER])].sort()).toEqual(
        [...originals].sort(),
      );

      // Copy i is due i tenths of a second after the copies were written (database clock), and
      // none is delivered before then: the rate holds on either source.
      const rows = (await h.admin.list({ status: 'delivered' }, { limit: 100 })).items.slice(6);
      expect(rows.map((r) => r.messageId).sort()).toEqual(copies.map((r) => r.messageId).sort());
      const written = Math.min(...rows.map((r) => r.createdAt.getTime()));
      const late = rows.map((r, i) => (r.deliveredAt?.getTime() ?? 0) - written - i * 100);
      for (const ms of late) expect(ms).toBeGreaterThanOrEqual(-2);
    });

    // Issue 68, item 2: copies to another destination ride a lane of their own (ARCHITECTURE.md,
    // "Re-drive lanes"), so a rate's pending copies never hold the key's live messages.
    it('a live message of a re-driven key goes out at once while its copies to another topic are still spread by the rate', async () => {
      const { publisher, h, audit, originals } = await eightOfK1Delivered();
      // 8 copies at 2 per second: the last one falls due 3.5 s after the re-drive.
      const report = await h.admin.redrive(
        { topic: 'orders', key: 'k1' },
        {
          actor: 'ops',
          reason: 'replay',
          destination: 'orders.replay',
          ratePerSecond: 2,
          auditTable: { tableName: audit.names.tableName },
        },
      );
      const [live] = await h.commit([msg('k1', { n: 'live' })]);
      await src.deliver(h, 'the live message published', () =>
        publisher.sent.some((r) => r.messageId === live),
      );
      // Published before most copies fell due: it did not wait for them.
      const copiesBefore = publisher.sent
        .slice(
          8,
          publisher.sent.findIndex((r) => r.messageId === live),
        )
        .filter((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId);
      expect(copiesBefore.length).toBeLessThan(4);
      await src.deliver(
        h,
        'every copy delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 17,
      );
      // The copies keep their order among themselves and show their key, not their lane.
      const copies = publisher.sent.filter(
        (r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId,
      );
      expect(copies.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual(originals);
      expect(copies.every((r) => r.key === 'k1' && r.topic === 'orders.replay')).toBe(true);
      expect(
        copies.every((r) => Object.keys(r.headers).every((name) => !name.includes('lane'))),
      ).toBe(true);
      const listed = await h.admin.list({ key: 'k1', topic: 'orders.replay' }, { limit: 100 });
      expect(listed.items.map((m) => m.key)).toEqual(copies.map(() => 'k1'));
    });

    // Issue 75, item 14: a lane is per destination and key, so a paced re-drive of a key to one
    // topic does not hold an unpaced re-drive of the same key to another.
    it("sends a key's unpaced copies to one topic while its paced copies to another are still spread by the rate", async () => {
      const { publisher, h, audit, originals } = await eightOfK1Delivered();
      const redrive = (destination: string, ratePerSecond?: number) =>
        h.admin.redrive(
          { topic: 'orders', key: 'k1' },
          {
            actor: 'ops',
            reason: 'replay',
            destination,
            ...(ratePerSecond === undefined ? {} : { ratePerSecond }),
            auditTable: { tableName: audit.names.tableName },
          },
        );
      // 8 copies at 1 per second to a.replay: the last one falls due 7 s after the re-drive.
      const paced = await redrive('a.replay', 1);
      const unpaced = await redrive('b.replay');
      const of = (report: { redriveId: string }) =>
        publisher.sent.filter((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId);
      await src.deliver(h, 'the unpaced copies published', () => of(unpaced).length === 8);
      // Published while the paced copies were still falling due: they did not wait for them.
      expect(of(paced).length).toBeLessThan(4);
      await src.deliver(
        h,
        'every copy delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 24,
      );
      // Each destination's copies in their order, showing their key.
      for (const [report, topic] of [
        [paced, 'a.replay'],
        [unpaced, 'b.replay'],
      ] as const) {
        const copies = of(report);
        expect(copies.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual(originals);
        expect(copies.every((r) => r.key === 'k1' && r.topic === topic)).toBe(true);
      }
      const listed = await h.admin.list({ key: 'k1', status: 'delivered' }, { limit: 100 });
      expect(listed.items).toHaveLength(24);
    });
  });
}
