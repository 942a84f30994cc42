import { randomUUID } from 'node:crypto';
import {
  ensureInboxTable,
  Inbox,
  inboxTableDropDdl,
  SequenceGapError,
  type InboxHandlerContext,
  type SequencedMessage,
  type SequenceOptions,
} from 'nestjs-outbox/inbox';
import type { DataSource } from 'typeorm';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// The inbox's gap guard: with an entry's key and number, the last number of each (consumer,
// key) is kept beside the inbox table in the handler's transaction, and a message that comes
// before an earlier one of its key is reported (accept), refused (reject) or held for a bounded
// time (hold).

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `inbox gap guard on ${db.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_ibs');
    const tables: string[] = [];

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterAll(async () => {
      if (ds === undefined) return;
      for (const tableName of tables) {
        for (const sql of inboxTableDropDdl(outboxDialectOf(ds.options.type), { tableName })) {
          await ds.query(sql);
        }
      }
      await db.close(ds, baseTable);
    });

    async function inbox(sequence: SequenceOptions = {}) {
      const tableName = uniqueTable('inbox_seq');
      tables.push(tableName);
      await ensureInboxTable(ds, { tableName });
      return new Inbox(ds, { tableName, sequence });
    }

    /** Handles one message of key k; the handler notes what it was told, in order. */
    function handler(inboxOf: Inbox, seen: string[]) {
      return (sequence: number, key = 'k', messageId: string = randomUUID()) =>
        inboxOf.handleOnce(
          ds,
          {
            consumer: 'billing',
            messageId,
            sequence: { key, sequence } satisfies SequencedMessage,
          },
          (_tx, context: InboxHandlerContext) => {
            seen.push(`${sequence}:${context.sequence?.status ?? 'none'}`);
            return Promise.resolve(sequence);
          },
        );
    }

    it('reports next, gap, out-of-order and duplicate numbers, and skips a redelivered id', async () => {
      const seen: string[] = [];
      const handle = handler(await inbox(), seen);
      expect(await handle(1)).toEqual({
        handled: true,
        result: 1,
        sequence: { status: 'next', expected: 1 },
      });
      const three = randomUUID();
      expect((await handle(3, 'k', three)) as unknown).toMatchObject({
        handled: true,
        sequence: { status: 'gap', expected: 2 },
      });
      expect(await handle(2)).toMatchObject({ sequence: { status: 'out-of-order', expected: 4 } });
      expect(await handle(3)).toMatchObject({ sequence: { status: 'duplicate', expected: 4 } });
      expect(await handle(3, 'k', three)).toEqual({ handled: false });
      expect(await handle(1, 'other')).toMatchObject({ sequence: { status: 'next' } });
      expect(seen).toEqual(['1:next', '3:gap', '2:out-of-order', '3:duplicate', '1:next']);
      // Without a sequence the guard stays out of the way.
      const plain = await (
        await inbox()
      ).handleOnce(ds, { consumer: 'billing', messageId: randomUUID() }, (_tx, context) =>
        Promise.resolve(context.sequence),
      );
      expect(plain).toEqual({ handled: true, result: undefined });
    });

    it('rejects a gap under onGap reject, recording neither the id nor the number', async () => {
      const seen: string[] = [];
      const handle = handler(await inbox({ onGap: 'reject' }), seen);
      await handle(1);
      const third = randomUUID();
      const refused = handle(3, 'k', third);
      await expect(refused).rejects.toBeInstanceOf(SequenceGapError);
      await expect(handle(3, 'k', third)).rejects.toMatchObject({ expected: 2, received: 3 });
      await handle(2);
      // Redelivered after its predecessor, the refused message is handled as the next one.
      expect(await handle(3, 'k', third)).toMatchObject({
        handled: true,
        sequence: { status: 'next' },
      });
      expect(seen).toEqual(['1:next', '2:next', '3:next']);
    });

    it('holds a message until its predecessor committed, then handles it as next', async () => {
      const seen: string[] = [];
      const handle = handler(await inbox({ onGap: 'hold', holdMs: 10_000 }), seen);
      await handle(1);
      const started = Date.now();
      const third = handle(3);
      await sleep(150);
      expect(seen).toEqual(['1:next']);
      await handle(2);
      expect(await third).toMatchObject({ handled: true, sequence: { status: 'next' } });
      expect(seen).toEqual(['1:next', '2:next', '3:next']);
      expect(Date.now() - started).toBeLessThan(5_000);
    });

    it('holds a gap no longer than holdMs, then handles it as a gap', async () => {
      const seen: string[] = [];
      const handle = handler(await inbox({ onGap: 'hold', holdMs: 300 }), seen);
      await handle(1);
      const started = Date.now();
      expect(await handle(4)).toMatchObject({
        handled: true,
        sequence: { status: 'gap', expected: 2 },
      });
      const held = Date.now() - started;
      expect(held).toBeGreaterThanOrEqual(290);
      expect(held).toBeLessThan(3_000);
      expect(await handle(5)).toMatchObject({ sequence: { status: 'next' } });
    });
  });
}
