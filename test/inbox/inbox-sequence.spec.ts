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
import type { BeforeQueryEvent, DataSource, EntitySubscriberInterface } from 'typeorm';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// The inbox's gap guard: with an entry's key and number, the last number of each (consumer,
// key) is kept beside the inbox table in the handler's transaction, and a message that comes
// before an earlier one of its key is reported (accept), refused (reject) or held for a bounded
// time (hold). Two first deliveries of a key wait for each other as later ones do, though the
// key has no row yet to lock.

/**
 * Holds each statement that matches `pattern` until `release()`: a transaction is stopped between
 * two of its statements, so that another can be made to run in between.
 */
class StatementGate implements EntitySubscriberInterface {
  /** The parameters of the statements held so far, in the order they arrived. */
  readonly held: unknown[][] = [];
  private open = false;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly pattern: RegExp) {}

  beforeQuery(event: BeforeQueryEvent<unknown>): Promise<void> | void {
    if (this.open || !this.pattern.test(event.query)) return;
    this.held.push([...(event.parameters ?? [])]);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  release(): void {
    this.open = true;
    for (const resolve of this.waiting.splice(0)) resolve();
  }
}

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

    /**
     * Whether a statement on the inbox's sequence table waits for another transaction's lock.
     * SQLite has no such wait: the inbox runs its transactions there one after another.
     */
    async function lockWaiting(tableName: string): Promise<boolean> {
      if (db.name === 'sqlite') return true;
      if (db.name === 'postgres') {
        const [row] = await ds.query<{ n: number }[]>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
          [`%${tableName}_seq%`],
        );
        return Number(row?.n) > 0;
      }
      // InnoDB's own report, not information_schema.INNODB_TRX: that is a cache, which on a busy
      // server showed a waiting transaction many seconds late.
      const [status] = await ds.query<{ Status: string }[]>('SHOW ENGINE INNODB STATUS');
      return new RegExp(
        `TO BE GRANTED:\\s+\\w+ LOCKS [^\\n]* of table \\S*\`${tableName}_seq\``,
      ).test(status?.Status ?? '');
    }

    // A generous bound: on a busy server a waiting statement can take a while to show.
    const LOCK_WAIT = { timeoutMs: 30_000 };

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

    it("serialises a key's first deliveries: 1 arriving while 2 is applied is out-of-order, never next", async () => {
      const tableName = uniqueTable('inbox_seq');
      tables.push(tableName);
      await ensureInboxTable(ds, { tableName });
      const inboxOf = new Inbox(ds, { tableName, sequence: { onGap: 'accept' } });
      const seen: string[] = [];
      let applying!: () => void;
      const twoApplying = new Promise<void>((resolve) => (applying = resolve));
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const handle = (sequence: number, hold: boolean) =>
        inboxOf.handleOnce(
          ds,
          { consumer: 'billing', messageId: randomUUID(), sequence: { key: 'first', sequence } },
          async (_tx, context) => {
            seen.push(`${sequence}:${context.sequence?.status ?? 'none'}`);
            if (!hold) return;
            applying();
            // 2's transaction stays open, its number written, while 1 arrives.
            await released;
          },
        );
      const two = handle(2, true);
      let one: Promise<unknown> | undefined;
      try {
        await twoApplying;
        one = handle(1, false);
        await waitFor('1 waiting for 2', () => lockWaiting(tableName), LOCK_WAIT);
      } finally {
        release();
        await Promise.allSettled([two, one]);
      }
      await Promise.all([two, one]);
      expect(seen).toEqual(['2:gap', '1:out-of-order']);
    });

    it("serialises a key's first deliveries that both read before either wrote", async () => {
      const tableName = uniqueTable('inbox_seq');
      tables.push(tableName);
      await ensureInboxTable(ds, { tableName });
      const inboxOf = new Inbox(ds, { tableName, sequence: { onGap: 'accept' } });
      // Holds each delivery right before it records its number, after it read the key's last.
      const gate = new StatementGate(
        new RegExp(
          `INSERT INTO \\S*${tableName}_seq\\S*[^;]*last_seq\\)\\s*VALUES \\((\\$1|\\?), (\\$2|\\?), (\\$3|\\?)\\)`,
        ),
      );
      ds.subscribers.push(gate);
      try {
        const seen: string[] = [];
        const handle = (sequence: number) =>
          inboxOf.handleOnce(
            ds,
            { consumer: 'billing', messageId: randomUUID(), sequence: { key: 'both', sequence } },
            (_tx, context) => {
              seen.push(`${sequence}:${context.sequence?.status ?? 'none'}`);
              return Promise.resolve();
            },
          );
        const one = handle(1);
        let two: Promise<unknown> | undefined;
        try {
          // SQLite runs these statements on its driver, past TypeORM's hooks, and the inbox runs
          // its transactions there one after another: nothing to hold, and no race to make.
          if (db.name !== 'sqlite') await waitFor('1 at the gate', () => gate.held.length === 1);
          two = handle(2);
          // 2 waits for 1's transaction, or reads past it and reaches the gate too (the race).
          await waitFor(
            '2 waiting for 1, or at the gate',
            async () => gate.held.length === 2 || (await lockWaiting(tableName)),
            LOCK_WAIT,
          );
        } finally {
          gate.release();
          await Promise.allSettled([one, two]);
        }
        await Promise.all([one, two]);
        expect(seen).toEqual(['1:next', '2:next']);
      } finally {
        ds.subscribers.splice(ds.subscribers.indexOf(gate), 1);
      }
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
