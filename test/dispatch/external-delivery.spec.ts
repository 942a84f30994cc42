import { OutboxExternalDeliveryError, OutboxInvalidMessageError } from '../../lib';
import { TEST_DATABASES } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// delivery: 'external' on each database: the module writes and removes by age, and never
// delivers or touches a row in between (Debezium reads the table from the log; an update would
// reach its outbox router). What reaches Kafka is proven in test/slow/debezium.spec.ts.

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `delivery 'external' on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_ext' });
    const quote = (name: string): string => (db.name === 'mariadb' ? `\`${name}\`` : `"${name}"`);

    /** Makes the row of `messageKey` look written `minutes` ago, with `status`. */
    async function age(table: string, messageKey: string, minutes: number, status: string) {
      const t = quote(table);
      const created =
        db.name === 'postgres'
          ? `created_at - interval '${minutes} minutes'`
          : db.name === 'mariadb'
            ? `created_at - INTERVAL ${minutes} MINUTE`
            : `strftime('%Y-%m-%d %H:%M:%f', created_at, '-${minutes} minutes')`;
      const key = db.name === 'postgres' ? '$1' : '?';
      await scope.ds.query(
        `UPDATE ${t} SET created_at = ${created}, status = '${status}' WHERE message_key = ${key}`,
        [messageKey],
      );
    }

    it('runs no dispatcher or unlocker, and the cleaner deletes rows by age whatever their status', async () => {
      const app = await scope.open({
        options: { delivery: 'external', workers: true, cleaner: { deliveredRetentionMs: 60_000 } },
      });
      const [old1, old2, young] = await app.enqueue([
        { topic: 't', key: 'old-pending', type: 'x', payload: { n: 1 } },
        { topic: 't', key: 'old-dead', type: 'x', payload: { n: 2 } },
        { topic: 't', key: 'young', type: 'x', payload: { n: 3 } },
      ]);
      await age(app.table, 'old-pending', 5, 'pending');
      await age(app.table, 'old-dead', 5, 'dead');

      await expect(app.dispatcher.runOnce()).rejects.toBeInstanceOf(OutboxExternalDeliveryError);
      await expect(app.dispatcher.drain()).rejects.toThrow(/delivery is 'external'/);
      expect(await app.unlocker.runOnce()).toBe(0);
      expect((await app.admin.why(young as string)).state).toBe('external');
      expect(await app.admin.stats()).toMatchObject({ delivery: 'external' });

      expect(await app.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0, expired: 2 });
      const left = await app.rows();
      expect(left.map((r) => r.messageId)).toEqual([young]);
      // Written and left alone: no lease, no attempt, still pending.
      expect(left[0]).toMatchObject({ status: 'pending', attempts: 0 });
      expect([old1, old2]).not.toContain(young);
    });

    it('refuses at enqueue what Debezium would drop: a binary payload, broker attributes, a delay', async () => {
      const app = await scope.open({ options: { delivery: 'external', workers: true } });
      const base = { topic: 't', key: 'k', type: 'x' };
      for (const [message, reason] of [
        [
          { ...base, payload: Buffer.from([1, 2, 3]), contentType: 'application/octet-stream' },
          'invalid-content-type',
        ],
        [
          { ...base, payload: { n: 1 }, attributes: { kafka: { partition: 0 } } },
          'invalid-attributes',
        ],
        [{ ...base, payload: { n: 1 }, delayMs: 1_000 }, 'invalid-schedule'],
      ] as const) {
        const error: unknown = await app.enqueue(message).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxInvalidMessageError);
        expect(error).toMatchObject({
          reason,
          message: expect.stringMatching(/delivery 'external'/),
        });
      }
      expect(await app.rows()).toEqual([]);
    });
  });
}
