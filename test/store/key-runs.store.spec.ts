import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { NewOutboxRow, OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { TEST_DATABASES, readOutbox, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// Runs (`ordering.maxRun`) on every store: a claim takes a key's head with the messages right
// behind it, and never a message whose earlier one it could not take.

const row = (key: string): NewOutboxRow => ({
  messageId: randomUUID(),
  topic: 't',
  key,
  type: 'T',
  payload: '{}',
  headers: '{}',
  availableAt: null,
  delayMs: null,
});

describe.each(TEST_DATABASES)('runs on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `store on ${db.name}`, () => {
    let ds: DataSource;
    let table: string;
    let store: OutboxStore;

    beforeEach(async () => {
      table = uniqueTable('outbox_runs');
      ds = await db.open(table);
      store = await createOutboxStore(
        typeormSqlPort(ds),
        {
          tableName: table,
          schema: null,
          ordering: { enabled: true, onDeadLetter: 'block', maxRun: 3 },
        },
        { enabled: false, notify: false },
      );
    });
    afterEach(async () => {
      await store.close();
      await db.close(ds, table);
    });

    const enqueue = (count: number): Promise<readonly string[]> =>
      ds.transaction((m) =>
        store.insert(
          typeormSqlRunner(m.queryRunner as QueryRunner),
          Array.from({ length: count }, () => row('k')),
          true,
        ),
      );
    const claim = () => store.claim({ limit: 10, owner: 'runs', leaseMs: 60_000 });

    it('claims a key head and the messages right behind it, up to maxRun, then the rest after delivery', async () => {
      await enqueue(5);
      const queue = (await readOutbox(ds, table)).map((r) => r.id);
      const first = await claim();
      expect(first.records.map((r) => r.id).sort()).toEqual(queue.slice(0, 3).sort());
      // The rest wait for the run in flight, unparked.
      expect(first.blockedKeys).toEqual([]);
      expect(first.inFlightKeys).toBe(1);
      await store.park(['k']);
      expect((await readOutbox(ds, table)).map((r) => r.status)).toEqual([
        'pending',
        'pending',
        'pending',
        'waiting',
        'waiting',
      ]);
      await store.settle(
        first.token,
        {
          delivered: first.records.map((r) => r.id),
          retry: [],
          dead: [],
          release: [],
          advancedKeys: ['k'],
        },
        false,
      );
      const second = await claim();
      expect(second.records.map((r) => r.id).sort()).toEqual(queue.slice(3).sort());
      expect(second.blockedKeys).toEqual([]);
    });

    // SQLite has one writer and no row locks: a claim there cannot meet another's held row.
    const rowLocks = db.name === 'sqlite' ? it.skip : it;
    rowLocks(
      `never leases part of a run whose earlier row another transaction holds${db.name === 'sqlite' ? ' [skipped: SQLite has no row locks]' : ''}`,
      async () => {
        await enqueue(3);
        const queue = (await readOutbox(ds, table)).map((r) => r.id);
        // Another dispatcher's claim holds a row, as between its lock and its commit.
        const holding = async (id: string, work: () => Promise<void>): Promise<void> => {
          const other = ds.createQueryRunner();
          await other.startTransaction();
          try {
            const placeholder = db.name === 'postgres' ? '$1' : '?';
            await other.query(
              `SELECT id FROM ${ds.driver.escape(table)} WHERE id = ${placeholder} FOR UPDATE`,
              [id],
            );
            await work();
          } finally {
            await other.rollbackTransaction();
            await other.release();
          }
        };
        // The head held: nothing behind it may go.
        await holding(queue[0] as string, async () => {
          expect((await claim()).records).toEqual([]);
        });
        // The second held: the head goes alone, the third stays.
        await holding(queue[1] as string, async () => {
          expect((await claim()).records.map((r) => r.id)).toEqual([queue[0]]);
        });
        expect((await readOutbox(ds, table)).map((r) => r.lockedBy)).toEqual(['runs', null, null]);
      },
    );
  });
});
