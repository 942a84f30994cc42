import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/orm/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { ClaimedBatch, NewOutboxRow, OutboxStore } from '../../lib/store/outbox-store.port';
import { readOutbox, uniqueTable, type OutboxRow, type TestDatabase } from '../support/databases';
import { describeWith } from '../support/services';

// One suite, every database: what the dispatcher relies on from a store, asserted on the rows
// the table holds afterwards.

/** A store on a fresh outbox table of its own, with ordering by key on. */
export interface StoreFixture {
  readonly dataSource: DataSource;
  readonly table: string;
  readonly store: OutboxStore;
  close(): Promise<void>;
}

export type MakeStore = () => Promise<StoreFixture>;

/** A `MakeStore` for one of the test databases: a unique table per call, dropped on close. */
export function storeOn(db: TestDatabase): MakeStore {
  return async () => {
    const table = uniqueTable('outbox_sc');
    const dataSource = await db.open(table);
    const store = await createOutboxStore(
      typeormSqlPort(dataSource),
      {
        tableName: table,
        schema: null,
        ordering: { enabled: true, onDeadLetter: 'block' },
        dispatcher: { dbTimeoutMs: 10_000 },
      },
      { enabled: true, notify: false },
    );
    return {
      dataSource,
      table,
      store,
      async close() {
        await store.close();
        await db.close(dataSource, table);
      },
    };
  };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function row(key: string | null, delayMs: number | null = null): NewOutboxRow {
  return {
    messageId: randomUUID(),
    topic: 'conformance',
    key,
    type: 'Tested',
    payload: JSON.stringify({ key }),
    headers: '{}',
    availableAt: null,
    delayMs,
  };
}

const ids = (batch: ClaimedBatch): string[] => batch.records.map((r) => r.id);

/**
 * The store conformance suite: runs on the store `makeStore` builds (skipped when `services`
 * are not reachable).
 */
export function outboxStoreConformance(
  name: string,
  makeStore: MakeStore,
  services: Parameters<typeof describeWith>[0] = [],
): void {
  describeWith(services, `OutboxStore conformance [${name}]`, () => {
    let f: StoreFixture;
    const claim = (limit: number, leaseMs = 60_000): Promise<ClaimedBatch> =>
      f.store.claim({ limit, owner: `worker-${name}`, leaseMs });
    const enqueue = (rows: readonly NewOutboxRow[]): Promise<readonly string[]> =>
      f.dataSource.transaction((manager) =>
        f.store.insert(typeormSqlRunner(manager.queryRunner as QueryRunner), rows, true),
      );
    const rows = (): Promise<OutboxRow[]> => readOutbox(f.dataSource, f.table);
    const byId = async (id: string): Promise<OutboxRow> => {
      const found = (await rows()).find((r) => r.id === id);
      if (found === undefined) throw new Error(`row ${id} is gone`);
      return found;
    };

    beforeEach(async () => {
      f = await makeStore();
    });
    afterEach(async () => {
      await f.close();
    });

    it('claims due, unleased rows, at most the batch size, oldest first', async () => {
      // One statement for the batch: a delay on one row means a delay (0 here) on every row.
      await enqueue([row(null, 0), row(null, 0), row(null, 0), row(null, 0), row(null, 3_600_000)]);
      const all = await rows();
      const first = await claim(3);
      expect(ids(first)).toEqual(all.slice(0, 3).map((r) => r.id));
      expect(first.records.every((r) => r.attempts === 1)).toBe(true);
      // The leased three are not claimed again, and the delayed one is not due.
      const second = await claim(10);
      expect(ids(second)).toEqual([all[3]?.id]);
      expect((await claim(10)).records).toEqual([]);
      expect((await rows()).map((r) => r.attempts)).toEqual([1, 1, 1, 1, 0]);
    });

    it('with ordering on, only the head of a key is claimable; park and promote move it on', async () => {
      await enqueue([row('k'), row('k'), row('k'), row('other')]);
      const [k1, k2, k3, other] = (await rows()).map((r) => r.id);
      const batch = await claim(10);
      expect(ids(batch).sort()).toEqual([k1, other].sort());
      expect(batch.blockedKeys).toEqual(['k']);
      expect(await f.store.park(['k'])).toBe(2);
      expect((await rows()).map((r) => r.status)).toEqual([
        'pending',
        'waiting',
        'waiting',
        'pending',
      ]);
      // The head delivered: the next message of the key, and only it, becomes claimable.
      const settled = await f.store.settle(
        batch.token,
        { delivered: ids(batch), retry: [], dead: [], release: [], advancedKeys: ['k'] },
        false,
      );
      expect(settled).toBe(2);
      expect(ids(await claim(10))).toEqual([k2]);
      expect((await byId(k3 as string)).status).toBe('waiting');
    });

    it('settles delivered, retry and dead with the lease token', async () => {
      await enqueue([row(null), row(null), row(null)]);
      const batch = await claim(3);
      const [a, b, c] = ids(batch) as [string, string, string];
      const changed = await f.store.settle(
        batch.token,
        {
          delivered: [a],
          retry: [{ id: b, delayMs: 0, error: 'try again' }],
          dead: [{ id: c, error: 'gave up' }],
          release: [],
          advancedKeys: [],
        },
        false,
      );
      expect(changed).toBe(3);
      const [ra, rb, rc] = [await byId(a), await byId(b), await byId(c)];
      expect([ra.status, ra.lockedBy]).toEqual(['delivered', null]);
      expect([rb.status, rb.attempts, rb.lastError, rb.lockedBy]).toEqual([
        'pending',
        1,
        'try again',
        null,
      ]);
      expect([rc.status, rc.lastError]).toEqual(['dead', 'gave up']);
      // The retried one is due again (delay 0); the others are done.
      expect(ids(await claim(10))).toEqual([b]);
    });

    it('fences: a stale lease token settles nothing', async () => {
      await enqueue([row(null)]);
      const stale = await claim(1, 50);
      await sleep(200);
      expect(await f.store.releaseExpired()).toBe(1);
      const fresh = await claim(1);
      expect(ids(fresh)).toEqual(ids(stale));
      const [id] = ids(stale) as [string];
      const none = { delivered: [], retry: [], dead: [], release: [], advancedKeys: [] };
      for (const outcome of [
        { ...none, delivered: [id] },
        { ...none, retry: [{ id, delayMs: 0, error: 'x' }] },
        { ...none, dead: [{ id, error: 'x' }] },
        { ...none, release: [{ id, delayMs: 0, error: null }] },
      ]) {
        expect(await f.store.settle(stale.token, outcome, false)).toBe(0);
      }
      expect((await byId(id)).status).toBe('pending');
      expect((await byId(id)).lockedBy).toBe(`worker-${name}`);
      // A token nobody holds changes nothing either.
      expect(await f.store.settle(randomUUID(), { ...none, delivered: [id] }, false)).toBe(0);
      expect(await f.store.settle(fresh.token, { ...none, delivered: [id] }, false)).toBe(1);
      expect((await byId(id)).status).toBe('delivered');
    });

    it('requeues dead messages, all or by message id, with attempts reset', async () => {
      await enqueue([row(null), row(null)]);
      const batch = await claim(2);
      const [a, b] = ids(batch) as [string, string];
      await f.store.settle(
        batch.token,
        {
          delivered: [],
          retry: [],
          dead: [
            { id: a, error: 'bad' },
            { id: b, error: 'bad' },
          ],
          release: [],
          advancedKeys: [],
        },
        false,
      );
      const b0 = await byId(b);
      expect(await f.store.requeueDead([b0.messageId])).toEqual({ requeued: 1, resequenced: 0 });
      expect([(await byId(b)).status, (await byId(b)).attempts]).toEqual(['pending', 0]);
      expect((await byId(a)).status).toBe('dead');
      expect(await f.store.requeueDead()).toEqual({ requeued: 1, resequenced: 0 });
      expect(ids(await claim(10))).toEqual([a, b]);
    });

    it('purges delivered and dead rows older than asked, up to the limit', async () => {
      await enqueue([row(null), row(null), row(null), row(null)]);
      const batch = await claim(4);
      const [a, b, c, d] = ids(batch) as [string, string, string, string];
      await f.store.settle(
        batch.token,
        {
          delivered: [a, b],
          retry: [],
          dead: [{ id: c, error: 'bad' }],
          release: [],
          advancedKeys: [],
        },
        false,
      );
      expect(await f.store.purge('delivered', 3_600_000, 10)).toBe(0);
      await sleep(50);
      expect(await f.store.purge('delivered', 0, 1)).toBe(1);
      expect(await f.store.purge('delivered', 0, 10)).toBe(1);
      expect(await f.store.purge('dead', 0, 10)).toBe(1);
      expect((await rows()).map((r) => r.id)).toEqual([d]);
    });

    it('never gives one row to two concurrent claimers', async () => {
      const total = 60;
      await enqueue(Array.from({ length: total }, () => row(null)));
      const seen: string[] = [];
      for (;;) {
        const batches = await Promise.all([claim(7), claim(7), claim(7)]);
        const got = batches.flatMap(ids);
        if (got.length === 0) break;
        seen.push(...got);
      }
      expect(seen).toHaveLength(total);
      expect(new Set(seen).size).toBe(total);
    });
  });
}
