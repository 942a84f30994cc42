import { OUTBOX_HEADER_SEQUENCE, REDRIVE_OF_HEADER } from '../../lib';
import { OutboxAuditStore } from '../../lib/admin';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { uniqueTable } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeSource, SOURCE_CASES, useSource } from '../support/sources';

// A gap repair's copies go out the dispatcher's normal way, whatever its source of new messages
// (the table's poll or the database's log), and in the key's repair lane: ahead of the key's
// queued messages, with the number they fill.

for (const source of SOURCE_CASES) {
  describeSource(source, 'gap repair delivery', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_grd' });
    const src = useSource(scope, source);

    it("sends a copy with its number ahead of the key's queued message", async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(
        publisher,
        { ordering: { sequence: true } },
        { sweepIntervalMs: 200 },
      );
      const auditTable = { tableName: uniqueTable('outbox_grd_aud') };
      const audit = new OutboxAuditStore(h.moduleRef.get<SqlPort>(OUTBOX_SQL), auditTable);
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));

      const ids = await h.commit([msg('k', { n: 1 }), msg('k', { n: 2 }), msg('k', { n: 3 })]);
      await src.deliver(
        h,
        'the originals delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length === 3,
      );
      // The key's next message is due in an hour: it holds the key's own lane.
      const [held] = await h.commit([
        msg('k', { n: 4 }, { availableAt: new Date(Date.now() + 3_600_000) }),
      ]);
      const answer = await h.admin
        .gapRepairer({ auditTable })
        .answer({ topic: 'orders', key: 'k', sequences: [2], consumer: 'billing' });
      expect(answer).toMatchObject({ resent: [2], pending: [] });
      await src.deliver(h, 'the copy published', () => publisher.sent.length === 4);
      const copy = publisher.sent[3];
      expect(copy?.key).toBe('k');
      expect(copy?.headers[OUTBOX_HEADER_SEQUENCE]).toBe('2');
      expect(copy?.headers[REDRIVE_OF_HEADER]).toBe(ids[1]);
      expect((await h.row(held as string)).status).toBe('pending');
    });
  });
}
