import {
  OUTBOX_HEADER_SEQUENCE,
  OutboxAdminInputError,
  OutboxRedriveRefusedError,
  REDRIVE_ID_HEADER,
  REDRIVE_OF_HEADER,
  type OutboxMessage,
} from '../../lib';
import { OutboxAuditStore, type OutboxRedrivePreview } from '../../lib/admin';
import { ensureOutboxArchiveTable } from '../../lib/schema';
import { OUTBOX_SQL } from '../../lib/outbox.constants';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { keyLaneOf, redriveLaneOf } from '../../lib/store/rows/redrive-lane';
import { RecordingPublisher } from '../../lib/testing';
import { readOutbox, storedId, TEST_DATABASES, uniqueTable } from '../support/databases';
import { ageRows } from '../support/db-clock';
import {
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// OutboxAdmin.redrive on every database: real rows delivered by the real dispatcher, copies
// written through the store's insert and delivered again by the dispatcher; every assertion
// reads what reached the publisher, the outbox table or the audit table.

/** The preview's confirmation, which a preview of a selection within maxCount always has. */
function confirmation(preview: OutboxRedrivePreview): string {
  expect(preview.confirmation).toMatch(/^[0-9]+-[0-9a-f]{32}$/);
  return preview.confirmation as string;
}

const msg = (key: string | null, n: number, extra: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.created',
  key,
  payload: { n },
  ...extra,
});

for (const db of TEST_DATABASES) {
  describeWith(
    db.service === null ? [] : [db.service],
    `OutboxAdmin re-drive on ${db.name}`,
    () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_rd' });

      const open = async (overrides: HarnessOverrides = {}, publisher = true) => {
        const c = await scope.open({
          ...(publisher ? { publisher: new RecordingPublisher() } : {}),
          options: mergeOutboxOptions(
            { dispatcher: { listen: false, pollIntervalMs: 50 } },
            overrides,
          ),
        });
        const auditTable = { tableName: uniqueTable('outbox_rd_aud') };
        const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), auditTable);
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));
        return { c, audit, auditTable };
      };

      const who = { actor: 'alice', reason: 'consumer lost its database' };

      /** Drives the app's dispatcher until `done()` holds. */
      const deliverUntil = (c: OutboxApp, what: string, done: () => boolean) =>
        waitFor(
          what,
          async () => {
            await c.runUntilIdle();
            return done();
          },
          { timeoutMs: 15_000, intervalMs: 50 },
        );

      it('previews the exact count and a sample in queue order, and refuses bad filters', async () => {
        const { c } = await open();
        const ids = await c.enqueue([
          msg('a', 1),
          msg('b', 2),
          msg('a', 3, { type: 'order.paid' }),
          msg(null, 4, { topic: 'billing' }),
        ]);
        await c.runUntilIdle();
        // Not delivered: never selected.
        await c.enqueue(msg('a', 5, { availableAt: new Date(Date.now() + 3_600_000) }));

        const all = await c.admin.previewRedrive({ topic: 'orders' });
        expect(all.count).toBe(3);
        expect(all.includesArchive).toBe(false);
        expect(all.sample.map((m) => m.messageId)).toEqual([ids[0], ids[1], ids[2]]);
        expect(all.sample[0]).toMatchObject({ source: 'outbox', key: 'a', type: 'order.created' });
        expect(all.sample[0]?.deliveredAt).toBeInstanceOf(Date);
        expect((await c.admin.previewRedrive({ key: 'a' })).count).toBe(2);
        expect((await c.admin.previewRedrive({ key: null })).count).toBe(1);
        expect((await c.admin.previewRedrive({ type: 'order.paid' })).count).toBe(1);
        const small = await c.admin.previewRedrive({ topic: 'orders' }, { sampleSize: 1 });
        expect(small).toMatchObject({ count: 3 });
        expect(small.sample).toHaveLength(1);
        const first = await c.admin.get(ids[0] as string);
        const createdAfter = new Date((first?.createdAt.getTime() ?? 0) - 60_000);
        expect((await c.admin.previewRedrive({ createdAfter })).count).toBe(4);
        expect((await c.admin.previewRedrive({ createdBefore: createdAfter })).count).toBe(0);
        const deliveredAfter = new Date((first?.deliveredAt?.getTime() ?? 0) - 60_000);
        expect((await c.admin.previewRedrive({ deliveredAfter })).count).toBe(4);
        expect((await c.admin.previewRedrive({ deliveredBefore: deliveredAfter })).count).toBe(0);

        for (const bad of [
          {},
          { topic: undefined },
          { status: 'dead' },
          { topic: '' },
          { createdAfter: new Date('nope') },
          { createdAfter: new Date(2), createdBefore: new Date(1) },
        ]) {
          await expect(c.admin.previewRedrive(bad as never)).rejects.toBeInstanceOf(
            OutboxAdminInputError,
          );
        }
      });

      it('sends copies in key order with new ids and the re-drive headers, and audits it', async () => {
        const { c, audit, auditTable } = await open();
        const ids = await c.enqueue([
          msg('a', 1, { headers: { tenant: 't1' } }),
          msg('b', 2),
          msg('a', 3),
          msg(null, 4, { topic: 'billing' }),
          msg('a', 5),
        ]);
        await c.runUntilIdle();
        c.publisher.clear();

        const preview = await c.admin.previewRedrive({ topic: 'orders' });
        expect(preview.count).toBe(4);
        const report = await c.admin.redrive(
          { topic: 'orders' },
          { ...who, expected: confirmation(preview), auditTable },
        );
        expect(report).toMatchObject({ count: 4, destination: null, ratePerSecond: null });
        await c.runUntilIdle();

        const sent = c.publisher.messages;
        expect(sent.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([
          ids[0],
          ids[1],
          ids[2],
          ids[4],
        ]);
        expect(sent.every((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId)).toBe(true);
        expect(sent.map((r) => r.topic)).toEqual(['orders', 'orders', 'orders', 'orders']);
        // New messages: new ids, so consumers' inboxes take them.
        expect(sent.some((r) => ids.includes(r.messageId))).toBe(false);
        expect(sent[0]?.headers).toMatchObject({ tenant: 't1' });
        expect(c.publisher.payloads({ key: 'a' })).toEqual([{ n: 1 }, { n: 3 }, { n: 5 }]);
        // The copies' rows follow their originals' order per key.
        const rows = await readOutbox(scope.ds, c.table);
        const copies = rows.filter((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId);
        expect(
          copies.filter((r) => r.key === 'a').map((r) => r.headers[REDRIVE_OF_HEADER]),
        ).toEqual([ids[0], ids[2], ids[4]]);
        expect(copies.every((r) => r.status === 'delivered')).toBe(true);

        const [entry] = await audit.recent(10);
        expect(entry).toMatchObject({
          actor: 'alice',
          action: 'redrive',
          scope: 'filter',
          confirmed: 4,
          affected: 4,
        });
        const [listed] = await c.admin.redrives({ auditTable });
        expect(listed).toMatchObject({
          redriveId: report.redriveId,
          actor: 'alice',
          reason: 'consumer lost its database',
          filter: { topic: 'orders' },
          destination: null,
          count: 4,
        });
        expect(listed?.at).toBeInstanceOf(Date);
      });

      it('numbers the copies after their keys last message with ordering.sequence, and drops the originals number without it', async () => {
        const { c, auditTable } = await open({ ordering: { sequence: true } });
        await c.enqueue([msg('a', 1), msg('a', 2), msg(null, 3)]);
        await c.runUntilIdle();
        c.publisher.clear();
        const preview = await c.admin.previewRedrive({ topic: 'orders' });
        expect(preview.count).toBe(3);
        await c.admin.redrive(
          { topic: 'orders' },
          { ...who, expected: confirmation(preview), auditTable },
        );
        await c.runUntilIdle();
        // A consumer's gap guard sees the copies as the key's next messages, not as replays.
        const numbers = (key: string | null) =>
          c.publisher.messages
            .filter((r) => r.key === key)
            .map((r) => r.headers[OUTBOX_HEADER_SEQUENCE]);
        expect(numbers('a')).toEqual(['3', '4']);
        expect(numbers(null)).toEqual([undefined]);

        // The same table, by an instance that does not number keys: the copies carry no number.
        const publisher = new RecordingPublisher();
        const plain = await scope.open({
          table: c.table,
          publisher,
          options: { dispatcher: { listen: false, pollIntervalMs: 50 } },
        });
        await plain.admin.redrive({ key: 'a' }, { ...who, auditTable });
        await plain.runUntilIdle();
        expect(publisher.messages.map((r) => r.headers[OUTBOX_HEADER_SEQUENCE])).toEqual([
          undefined,
          undefined,
          undefined,
          undefined,
        ]);
      });

      it('numbers copies sent to another destination in that destination, burning none of the original topics numbers', async () => {
        const { c, auditTable } = await open({ ordering: { sequence: true } });
        await c.enqueue([msg('a', 1), msg('a', 2)]);
        await c.runUntilIdle();
        c.publisher.clear();
        const preview = await c.admin.previewRedrive({ topic: 'orders' });
        await c.admin.redrive(
          { topic: 'orders' },
          { ...who, destination: 'orders-replay', expected: confirmation(preview), auditTable },
        );
        await c.enqueue(msg('a', 3));
        await c.runUntilIdle();
        const numbers = (topic: string) =>
          c.publisher.messages
            .filter((r) => r.topic === topic)
            .map((r) => r.headers[OUTBOX_HEADER_SEQUENCE]);
        // A consumer of `orders` sees 1, 2, 3; one of `orders-replay` sees its own 1, 2.
        expect(numbers('orders-replay')).toEqual(['1', '2']);
        expect(numbers('orders')).toEqual(['3']);
      });

      it('copies a binary payload with its content type, and the broker attributes', async () => {
        const { c, auditTable } = await open();
        const bytes = Buffer.from([0, 1, 2, 254, 255]);
        const [id] = await c.enqueue({
          topic: 'blobs',
          key: 'x',
          payload: bytes,
          contentType: 'application/octet-stream',
          attributes: { rabbitmq: { priority: 3 } },
        });
        await c.runUntilIdle();
        c.publisher.clear();
        await c.admin.redrive({ topic: 'blobs' }, { ...who, auditTable });
        await c.runUntilIdle();
        const [copy] = c.publisher.messages;
        expect(copy?.headers[REDRIVE_OF_HEADER]).toBe(id);
        expect(copy).toMatchObject({
          encoding: 'binary',
          contentType: 'application/octet-stream',
          attributes: { rabbitmq: { priority: 3 } },
        });
        expect(Buffer.from(copy?.payload ?? '')).toEqual(bytes);
      });

      it('sends the copies to the destination topic instead', async () => {
        const { c, auditTable } = await open();
        const ids = await c.enqueue([msg('a', 1), msg('a', 2, { topic: 'billing' })]);
        await c.runUntilIdle();
        c.publisher.clear();
        const report = await c.admin.redrive(
          { key: 'a' },
          { ...who, destination: 'orders.replay', auditTable },
        );
        expect(report).toMatchObject({ count: 2, destination: 'orders.replay' });
        await c.runUntilIdle();
        expect(c.publisher.messages.map((r) => [r.topic, r.headers[REDRIVE_OF_HEADER]])).toEqual([
          ['orders.replay', ids[0]],
          ['orders.replay', ids[1]],
        ]);
        const [listed] = await c.admin.redrives({ auditTable });
        expect(listed?.destination).toBe('orders.replay');
      });

      it('spreads the copies over available_at at the rate asked for', async () => {
        const { c, auditTable } = await open({}, false);
        await c.enqueue([msg('a', 1), msg('b', 2), msg('c', 3), msg('d', 4)]);
        // Delivered by hand: the module has no dispatcher here.
        await scope.ds.query(
          `UPDATE ${scope.ds.driver.escape(c.table)} SET status = 'delivered', delivered_at = created_at`,
        );
        const report = await c.admin.redrive(
          { topic: 'orders' },
          { ...who, ratePerSecond: 2, auditTable },
        );
        const copies = (await readOutbox(scope.ds, c.table)).filter(
          (r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId,
        );
        expect(copies).toHaveLength(4);
        const due = await Promise.all(copies.map((r) => c.dueAtMs(r.messageId)));
        const gaps = due.slice(1).map((t, i) => t - (due[i] as number));
        for (const gap of gaps) {
          expect(gap).toBeGreaterThanOrEqual(450);
          expect(gap).toBeLessThanOrEqual(550);
        }
      });

      it("counts a rate-spread copy's age from when it is due: a type's expiry dead-letters none of the later copies", async () => {
        // 'block' (the default): a copy dead-lettered by its own spread would also wedge its key.
        const { c, auditTable } = await open({ policies: { 'order.created': { maxAgeMs: 300 } } });
        await c.enqueue([msg('a', 1), msg('a', 2), msg('a', 3), msg('a', 4)]);
        await c.runUntilIdle();
        c.publisher.clear();
        // Copy i is due i × 200 ms after the copies were written: the last two past 300 ms.
        const report = await c.admin.redrive(
          { topic: 'orders' },
          { ...who, ratePerSecond: 5, auditTable },
        );
        await waitFor(
          'every copy delivered or dead',
          async () => {
            await c.runUntilIdle();
            const rows = (await readOutbox(scope.ds, c.table)).filter(
              (r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId,
            );
            return rows.every((r) => r.status !== 'pending') ? rows : false;
          },
          { timeoutMs: 15_000, intervalMs: 50 },
        );
        const rows = (await readOutbox(scope.ds, c.table)).filter(
          (r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId,
        );
        expect(rows.map((r) => [r.status, r.attempts])).toEqual([
          ['delivered', 1],
          ['delivered', 1],
          ['delivered', 1],
          ['delivered', 1],
        ]);
        expect(c.publisher.payloads<{ n: number }>().map((p) => p.n)).toEqual([1, 2, 3, 4]);
      });

      it("queues copies to the same topic in their key's lane: after the key's earlier live messages, before its later ones", async () => {
        const { c, auditTable } = await open();
        const [a1, a2] = await c.enqueue([msg('a', 1), msg('a', 2)]);
        await c.runUntilIdle();
        c.publisher.clear();
        const [a3] = await c.enqueue(msg('a', 3));
        const preview = await c.admin.previewRedrive({ topic: 'orders', key: 'a' });
        expect(preview.count).toBe(2);
        await c.admin.redrive(
          { topic: 'orders', key: 'a' },
          { ...who, ratePerSecond: 5, expected: confirmation(preview), auditTable },
        );
        const [a4] = await c.enqueue(msg('a', 4));
        await deliverUntil(
          c,
          'the live messages and the copies delivered',
          () => c.publisher.messages.length === 4,
        );
        const sent = c.publisher.messages.map((m) => m.headers[REDRIVE_OF_HEADER] ?? m.messageId);
        expect(sent).toEqual([a3, a1, a2, a4]);
      });

      it("queues copies to another topic in their key's lane of their own: the live message is not behind them, and every view shows the key", async () => {
        const { c, auditTable } = await open({}, false);
        const originals = await c.enqueue([msg('a', 1), msg('a', 2), msg('a', 3)]);
        // Delivered by hand: the module has no dispatcher here, so nothing moves meanwhile.
        await scope.ds.query(
          `UPDATE ${scope.ds.driver.escape(c.table)} SET status = 'delivered', delivered_at = created_at`,
        );
        const report = await c.admin.redrive(
          { topic: 'orders', key: 'a' },
          { ...who, destination: 'orders.replay', ratePerSecond: 1, auditTable },
        );
        const [live] = (await c.enqueue(msg('a', 4))) as [string];
        const copies = (await c.admin.list({ topic: 'orders.replay' }, { limit: 10 })).items;
        expect(copies.map((m) => m.key)).toEqual(['a', 'a', 'a']);
        // A lookup by key finds the originals, the copies and the live message.
        const byKey = (await c.admin.list({ key: 'a' }, { limit: 10 })).items;
        expect(byKey.map((m) => m.messageId)).toEqual([
          ...originals,
          ...copies.map((m) => m.messageId),
          live,
        ]);
        const [first, , third] = copies;
        const detail = await c.admin.get(third?.messageId ?? '');
        expect(detail?.key).toBe('a');
        expect(detail?.headers[REDRIVE_ID_HEADER]).toBe(report.redriveId);
        expect(Object.keys(detail?.headers ?? {}).some((name) => name.includes('lane'))).toBe(
          false,
        );
        // The last copy waits for its due time behind the first copy, in the copies' lane;
        // the live message is behind nothing: the key's own lane has only delivered messages.
        const whyCopy = await c.admin.why(third?.messageId ?? '');
        expect(whyCopy).toMatchObject({
          state: 'scheduled',
          head: { messageId: first?.messageId },
        });
        const whyLive = await c.admin.why(live);
        expect(whyLive).toMatchObject({ state: 'due', head: null });
        // Copies re-driven again (delivered by hand) keep showing their key, and their copies too.
        await scope.ds.query(
          `UPDATE ${scope.ds.driver.escape(c.table)} SET status = 'delivered', delivered_at = created_at WHERE topic = 'orders.replay'`,
        );
        const again = await c.admin.previewRedrive({ key: 'a', topic: 'orders.replay' });
        expect(again.sample.map((m) => m.key)).toEqual(['a', 'a', 'a']);
        await c.admin.redrive(
          { topic: 'orders.replay' },
          { ...who, destination: 'audit', auditTable },
        );
        const copiesOfCopies = (await c.admin.list({ topic: 'audit' }, { limit: 10 })).items;
        expect(copiesOfCopies.map((m) => m.key)).toEqual(['a', 'a', 'a']);
      });

      // Issue 75, item 14: lanes are per destination and key. Copies an earlier build wrote to one
      // lane of their key, still pending at the upgrade, keep their place before the copies to
      // the same topic written after it.
      it("after an upgrade, queues a copy behind the key's pending copies to its topic in an earlier build's lane, and a copy to another topic in its own", async () => {
        const { c, auditTable } = await open();
        const originals = await c.enqueue([msg('a', 1), msg('a', 2), msg('a', 3)]);
        await c.runUntilIdle();
        c.publisher.clear();
        const redrive = (destination: string, ratePerSecond?: number) =>
          c.admin.redrive(
            { topic: 'orders', key: 'a' },
            {
              ...who,
              destination,
              ...(ratePerSecond === undefined ? {} : { ratePerSecond }),
              auditTable,
            },
          );
        // Copies as an earlier build stored them: every copy of the key in the key's one lane.
        // Paced: the last one is due 2 s after the re-drive.
        const earlier = await redrive('orders.replay', 1);
        const table = scope.ds.driver.escape(c.table);
        const param = scope.ds.options.type === 'postgres' ? '$1' : '?';
        await scope.ds.query(
          `UPDATE ${table} SET message_key = ${param} WHERE topic = 'orders.replay'`,
          [keyLaneOf('a')],
        );
        const later = await redrive('orders.replay');
        const elsewhere = await redrive('audit.replay');
        const stored = await readOutbox(scope.ds, c.table);
        const lanesOf = (report: { redriveId: string }) => [
          ...new Set(
            stored
              .filter((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId)
              .map((r) => r.key),
          ),
        ];
        expect(lanesOf(later)).toEqual([keyLaneOf('a')]);
        expect(lanesOf(elsewhere)).toEqual([redriveLaneOf('audit.replay', 'a')]);

        const of = (report: { redriveId: string }) =>
          c.publisher.messages.filter((r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId);
        await deliverUntil(
          c,
          'the copies to audit.replay published',
          () => of(elsewhere).length === 3,
        );
        // Not behind the earlier build's paced copies of the key.
        expect(of(earlier).length).toBeLessThan(3);
        await deliverUntil(c, 'every copy published', () => c.publisher.messages.length === 9);
        // The copies to orders.replay in the order they were written, all showing their key.
        const replay = c.publisher.messages.filter((r) => r.topic === 'orders.replay');
        expect(replay.map((r) => r.headers[REDRIVE_ID_HEADER])).toEqual([
          ...originals.map(() => earlier.redriveId),
          ...originals.map(() => later.redriveId),
        ]);
        expect(replay.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([
          ...originals,
          ...originals,
        ]);
        expect(c.publisher.messages.every((r) => r.key === 'a')).toBe(true);
        // Once the earlier lane is empty, new copies to that topic take their own lane.
        await scope.ds.query(
          `UPDATE ${table} SET status = 'delivered' WHERE status <> 'delivered'`,
        );
        const fresh = await redrive('orders.replay');
        const after = await readOutbox(scope.ds, c.table);
        expect([
          ...new Set(
            after.filter((r) => r.headers[REDRIVE_ID_HEADER] === fresh.redriveId).map((r) => r.key),
          ),
        ]).toEqual([redriveLaneOf('orders.replay', 'a')]);
      });

      it('writes more than one transaction of copies in the originals order, audited once', async () => {
        const { c, audit, auditTable } = await open({}, false);
        const messages = Array.from({ length: 1_100 }, (_, n) => msg(`k${n % 3}`, n));
        const ids: string[] = [];
        for (let i = 0; i < messages.length; i += 250) {
          ids.push(...(await c.enqueue(messages.slice(i, i + 250))));
        }
        await scope.ds.query(
          `UPDATE ${scope.ds.driver.escape(c.table)} SET status = 'delivered', delivered_at = created_at`,
        );
        const preview = await c.admin.previewRedrive({ topic: 'orders' });
        expect(preview.count).toBe(1_100);
        const report = await c.admin.redrive(
          { topic: 'orders' },
          { ...who, expected: confirmation(preview), auditTable },
        );
        expect(report.count).toBe(1_100);
        const copies = (await readOutbox(scope.ds, c.table)).filter(
          (r) => r.headers[REDRIVE_ID_HEADER] === report.redriveId,
        );
        // Rows read in id order: the copies' order is the originals'.
        expect(copies.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual(ids);
        expect(copies.every((r) => r.status === 'pending')).toBe(true);
        expect((await audit.recent(10)).map((e) => e.affected)).toEqual([1_100]);
      });

      it('refuses, writing nothing, when the selection grew since the preview, or is above maxCount, or no audit table', async () => {
        const { c, audit, auditTable } = await open();
        await c.enqueue([msg('a', 1), msg('a', 2)]);
        await c.runUntilIdle();
        const preview = await c.admin.previewRedrive({ key: 'a' });
        expect(preview).toMatchObject({ count: 2, maxCount: 10_000 });
        await c.enqueue(msg('a', 3));
        await c.runUntilIdle();
        const before = (await readOutbox(scope.ds, c.table)).length;

        const changed = await c.admin
          .redrive({ key: 'a' }, { ...who, expected: confirmation(preview), auditTable })
          .catch((e: unknown) => e);
        expect(changed).toBeInstanceOf(OutboxRedriveRefusedError);
        expect(changed).toMatchObject({ reason: 'selection-changed', expected: 2, actual: 3 });
        expect((changed as Error).message).toContain('not the 2 confirmed');

        const tooMany = await c.admin
          .redrive({ key: 'a' }, { ...who, maxCount: 2, auditTable })
          .catch((e: unknown) => e);
        expect(tooMany).toMatchObject({ reason: 'too-many', expected: 2 });
        // The preview says so up front: counted, but no confirmation to give.
        expect(await c.admin.previewRedrive({ key: 'a' }, { maxCount: 2 })).toMatchObject({
          count: 3,
          confirmation: null,
          maxCount: 2,
        });

        const noTable = await c.admin
          .redrive({ key: 'a' }, { ...who, auditTable: { tableName: uniqueTable('no_such') } })
          .catch((e: unknown) => e);
        expect(noTable).toMatchObject({ reason: 'no-audit-table' });

        await expect(
          c.admin.redrive({ key: 'a' }, { actor: '', reason: 'x', auditTable }),
        ).rejects.toBeInstanceOf(OutboxAdminInputError);
        await expect(
          c.admin.redrive({ key: 'a' }, { actor: 'bob', reason: '  ', auditTable }),
        ).rejects.toBeInstanceOf(OutboxAdminInputError);
        await expect(
          c.admin.redrive({ key: 'a' }, { ...who, expected: '3', auditTable }),
        ).rejects.toMatchObject({ field: 'expected' });

        expect((await readOutbox(scope.ds, c.table)).length).toBe(before);
        expect(await audit.recent(10)).toEqual([]);
      });

      it('refuses a confirmed set that changed with its count kept: one row cleaned, another delivered', async () => {
        const { c, audit, auditTable } = await open();
        const ids = await c.enqueue([msg('a', 1), msg('a', 2)]);
        await c.runUntilIdle();
        const preview = await c.admin.previewRedrive({ key: 'a' });
        expect(preview.count).toBe(2);
        // The cleaner took the first, and the app delivered a new message of the key since.
        await scope.ds.query(
          `DELETE FROM ${scope.ds.driver.escape(c.table)} WHERE message_id = ${db.name === 'postgres' ? '$1' : '?'}`,
          [storedId(db.name, ids[0] as string)],
        );
        await c.enqueue(msg('a', 3));
        await c.runUntilIdle();
        expect((await c.admin.previewRedrive({ key: 'a' })).count).toBe(2);
        const before = await readOutbox(scope.ds, c.table);
        c.publisher.clear();

        const refused = await c.admin
          .redrive({ key: 'a' }, { ...who, expected: confirmation(preview), auditTable })
          .catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(OutboxRedriveRefusedError);
        expect(refused).toMatchObject({ reason: 'selection-changed', expected: 2, actual: 2 });
        expect((refused as Error).message).toContain('as many as confirmed but not the same ones');
        expect(await readOutbox(scope.ds, c.table)).toEqual(before);
        expect(await audit.recent(10)).toEqual([]);
        await c.runUntilIdle();
        expect(c.publisher.messages).toEqual([]);

        // Previewed again, the new set is confirmed and sent.
        const again = await c.admin.previewRedrive({ key: 'a' });
        expect(again.confirmation).not.toBe(preview.confirmation);
        const report = await c.admin.redrive(
          { key: 'a' },
          { ...who, expected: confirmation(again), auditTable },
        );
        expect(report.count).toBe(2);
      });

      it('finds archived rows too with cleaner.archive, in their original order', async () => {
        const table = await scope.table('outbox_rd');
        await ensureOutboxArchiveTable(scope.ds, { tableName: table });
        const publisher = new RecordingPublisher();
        const c = await scope.open({
          table,
          publisher,
          options: {
            dispatcher: { listen: false, pollIntervalMs: 50 },
            cleaner: { archive: true, deliveredRetentionMs: 60_000 },
          },
        });
        scope.defer(() =>
          scope.ds.query(`DROP TABLE IF EXISTS ${scope.ds.driver.escape(`${table}_archive`)}`),
        );
        const auditTable = { tableName: uniqueTable('outbox_rd_aud') };
        const audit = new OutboxAuditStore(c.moduleRef.get<SqlPort>(OUTBOX_SQL), auditTable);
        await audit.ensure();
        scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS ${audit.names.table}`));

        const old = await c.enqueue([msg('a', 1), msg('a', 2)]);
        await c.runUntilIdle();
        await ageRows(scope.ds, table, 'delivered', 120);
        expect(await c.cleaner.runOnce()).toMatchObject({ delivered: 2 });
        await sleep(5);
        const fresh = await c.enqueue(msg('a', 3));
        await c.runUntilIdle();

        const preview = await c.admin.previewRedrive({ key: 'a' });
        expect(preview).toMatchObject({ count: 3, includesArchive: true });
        expect(preview.sample.map((m) => [m.source, m.messageId])).toEqual([
          ['archive', old[0]],
          ['archive', old[1]],
          ['outbox', fresh[0]],
        ]);
        publisher.clear();
        await c.admin.redrive(
          { key: 'a' },
          { ...who, expected: confirmation(preview), auditTable },
        );
        await c.runUntilIdle();
        expect(publisher.messages.map((r) => r.headers[REDRIVE_OF_HEADER])).toEqual([
          old[0],
          old[1],
          fresh[0],
        ]);
      });
    },
  );
}
