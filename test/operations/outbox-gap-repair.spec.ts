import {
  OUTBOX_HEADER_SEQUENCE,
  OutboxAdminInputError,
  OutboxOptionsError,
  REDRIVE_ID_HEADER,
  REDRIVE_OF_HEADER,
  type OutboxMessage,
} from '../../lib';
import { GAP_REPAIR_FOR_HEADER, OutboxAuditStore } from '../../lib/admin';
import { ensureOutboxArchiveTable } from '../../lib/schema';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { RecordingPublisher } from '../../lib/testing';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { ageRows } from '../support/db-clock';
import { mergeOutboxOptions, type HarnessOverrides } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// The producer's side of gap repair on every database: a consumer asks for numbers of a key,
// and the outbox answers from its real rows (and archive) what it re-sent, what is still on its
// way, what is dead and what is gone; the copies reach the publisher with the original's number
// and key, ahead of what the key still has queued, and are recorded in the audit table.

const msg = (key: string, n: number, extra: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.changed',
  key,
  payload: { n },
  ...extra,
});

const ask = (key: string, sequences: number[]) => ({
  topic: 'orders',
  key,
  sequences,
  consumer: 'billing',
});

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `gap repair answers on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_gr' });

    const open = async (overrides: HarnessOverrides = {}, table?: string) => {
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        ...(table === undefined ? {} : { table }),
        publisher,
        options: mergeOutboxOptions(
          { dispatcher: { listen: false, pollIntervalMs: 50 }, ordering: { sequence: true } },
          overrides,
        ),
      });
      const auditTable = { tableName: uniqueTable('outbox_gr_aud') };
      const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), auditTable);
      await audit.ensure();
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
      return { c, publisher, audit, auditTable };
    };

    it('re-sends exactly the numbers asked, with their number and key, once while a copy is on its way, audited', async () => {
      const { c, publisher, audit, auditTable } = await open();
      const ids = await c.enqueue([1, 2, 3, 4, 5].map((n) => msg('k', n)));
      await c.enqueue([msg('j', 1)]);
      await c.runUntilIdle();
      publisher.clear();
      // A copy delivered less than resendAfterMs ago counts as on its way: 1 ms here, so that
      // a request after delivery sends it again.
      const repairer = c.admin.gapRepairer({ auditTable, resendAfterMs: 1 });

      const first = await repairer.answer(ask('k', [4, 2]));
      expect(first).toMatchObject({
        status: 'answered',
        resent: [2, 4],
        pending: [],
        dead: [],
        gone: [],
        retryAfterMs: null,
      });
      expect(first.repairId).toEqual(expect.any(String));
      // Asked again before the copies went out (another held message of the key, another
      // instance of the consumer): on their way, no second copy.
      const again = await repairer.answer(ask('k', [2, 4]));
      expect(again).toMatchObject({ resent: [], pending: [2, 4], repairId: null });

      await c.runUntilIdle();
      expect(
        publisher.messages.map((r) => [
          r.key,
          r.headers[OUTBOX_HEADER_SEQUENCE],
          r.headers[REDRIVE_OF_HEADER],
          r.headers[REDRIVE_ID_HEADER],
          r.headers[GAP_REPAIR_FOR_HEADER],
          r.payload,
        ]),
      ).toEqual([
        ['k', '2', ids[1], first.repairId, 'billing', '{"n":2}'],
        ['k', '4', ids[3], first.repairId, 'billing', '{"n":4}'],
      ]);
      expect(new Set(publisher.messageIds).size).toBe(2);
      expect(publisher.messageIds.some((id) => ids.includes(id))).toBe(false);

      // Just delivered: with the default resendAfterMs (5 s) still on its way to the consumer.
      expect(await c.admin.gapRepairer({ auditTable }).answer(ask('k', [2]))).toMatchObject({
        resent: [],
        pending: [2],
      });
      // Delivered a while ago, yet asked again (the copy was lost too): sent again.
      await sleep(5);
      expect(await repairer.answer(ask('k', [2]))).toMatchObject({ resent: [2] });
      // Numbers no row holds (the key never had them) are answered as gone; other keys and
      // topics are not searched.
      expect(await repairer.answer(ask('k', [9, 10]))).toMatchObject({
        resent: [],
        gone: [9, 10],
      });
      expect(await repairer.answer({ ...ask('j', [1]), topic: 'payments' })).toMatchObject({
        gone: [1],
      });

      const entries = await audit.recent(10);
      expect(entries.map((e) => [e.actor, e.action, e.scope, e.affected])).toEqual([
        ['gap-repair:billing', 'redrive', 'gap-repair', 1],
        ['gap-repair:billing', 'redrive', 'gap-repair', 2],
      ]);
      const records = await c.admin.redrives({ auditTable });
      expect(records[1]).toMatchObject({
        redriveId: first.repairId,
        filter: { topic: 'orders', key: 'k', sequences: '2,4' },
        count: 2,
      });
    });

    it("goes out ahead of the key's queued messages, and answers pending and dead from the rows", async () => {
      const { c, publisher, auditTable } = await open();
      await c.enqueue([msg('k', 1), msg('k', 2), msg('d', 1)]);
      await c.runUntilIdle();
      // The key's next message waits an hour: it holds the key's lane, not the repair lane.
      const [held] = await c.enqueue([msg('k', 3, { availableAt: new Date(Date.now() + 3.6e6) })]);
      publisher.clear();
      const repairer = c.admin.gapRepairer({ auditTable });
      expect(await repairer.answer(ask('k', [1, 3]))).toMatchObject({
        resent: [1],
        pending: [3],
      });
      await c.runUntilIdle();
      expect(publisher.messages.map((r) => r.headers[OUTBOX_HEADER_SEQUENCE])).toEqual(['1']);
      expect((await c.row(held as string)).status).toBe('pending');

      publisher.fail((r) => r.key === 'd', 'permanent');
      await c.enqueue([msg('d', 2)]);
      await c.runUntilIdle();
      expect(await repairer.answer(ask('d', [1, 2]))).toMatchObject({
        resent: [1],
        dead: [2],
      });
    });

    it('finds numbers in the archive; numbers the cleaner deleted without one are gone', async () => {
      const table = await scope.table('outbox_gr');
      await ensureOutboxArchiveTable(scope.ds, { tableName: table });
      scope.defer(() =>
        scope.ds.query(`DROP TABLE IF EXISTS ${scope.ds.driver.escape(`${table}_archive`)}`),
      );
      const archived = await open(
        { cleaner: { archive: true, deliveredRetentionMs: 60_000 } },
        table,
      );
      const ids = await archived.c.enqueue([msg('a', 1), msg('a', 2)]);
      await archived.c.runUntilIdle();
      await ageRows(scope.ds, table, 'delivered', 120);
      expect(await archived.c.cleaner.runOnce()).toMatchObject({ delivered: 2 });
      archived.publisher.clear();
      const fromArchive = archived.c.admin.gapRepairer({ auditTable: archived.auditTable });
      expect(await fromArchive.answer(ask('a', [2]))).toMatchObject({ resent: [2] });
      await archived.c.runUntilIdle();
      expect(archived.publisher.messages.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([
        ids[1],
      ]);

      const plain = await open({ cleaner: { deliveredRetentionMs: 60_000 } });
      await plain.c.enqueue([msg('a', 1), msg('a', 2)]);
      await plain.c.runUntilIdle();
      await ageRows(scope.ds, plain.c.table, 'delivered', 120);
      expect(await plain.c.cleaner.runOnce()).toMatchObject({ delivered: 2 });
      const answer = await plain.c.admin
        .gapRepairer({ auditTable: plain.auditTable })
        .answer(ask('a', [1, 2]));
      expect(answer).toMatchObject({
        status: 'answered',
        resent: [],
        gone: [1, 2],
        repairId: null,
      });
    });

    it('answers rate-limited past its rate without reading, and refuses bad requests and options', async () => {
      const { c, auditTable } = await open();
      await c.enqueue([msg('k', 1)]);
      await c.runUntilIdle();
      const repairer = c.admin.gapRepairer({ auditTable, ratePerSecond: 0.01, burst: 1 });
      expect(await repairer.answer(ask('k', [1]))).toMatchObject({ resent: [1] });
      const limited = await repairer.answer(ask('k', [1]));
      expect(limited).toMatchObject({ status: 'rate-limited', resent: [], pending: [] });
      expect(limited.retryAfterMs).toBeGreaterThan(0);

      const strict = c.admin.gapRepairer({ auditTable, maxSequences: 2 });
      for (const bad of [
        ask('k', []),
        ask('k', [1, 2, 3]),
        ask('k', [0]),
        ask('k', [1.5]),
        { ...ask('k', [1]), key: '' },
        { ...ask('k', [1]), consumer: 'x'.repeat(129) },
      ]) {
        await expect(strict.answer(bad)).rejects.toBeInstanceOf(OutboxAdminInputError);
      }
      expect(() => c.admin.gapRepairer({ ratePerSecond: 0 })).toThrow(OutboxOptionsError);
      const unnumbered = await open({ ordering: { sequence: false } });
      expect(() => unnumbered.c.admin.gapRepairer()).toThrow(/ordering: \{ sequence: true \}/);
    });
  });
}
