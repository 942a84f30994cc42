import { Test, type TestingModule } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import { OutboxDispatcher, OutboxModule, OutboxService, OutboxUnlocker, ensureOutboxTable, type OutboxMessage, type OutboxModuleOptions } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import { type OutboxStore } from '../../lib/store/outbox-store.port';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
import { hashKey } from '../../lib/store/outbox-row.mapper';
import { readOutbox, TEST_DATABASES, TestOrder, uniqueTable } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith, SERVICES } from '../support/services';
import { resolvesWithin, waitFor } from '../support/wait-for';

/*
 * Liveness: delivery keeps moving. A message that cannot be delivered ends dead after its
 * attempts instead of looping; a failing or stuck key does not hold up the others; a lock, a
 * dropped LISTEN connection or two enqueueing transactions cannot freeze the outbox. Plus the
 * timing rules these rely on (leases that fit their timeouts, delays counted from enqueue).
 * Each test failed on the code before its fix (issue 8); on every database it applies to.
 */

type Overrides = Omit<Partial<OutboxModuleOptions>, 'dataSource' | 'publisher'>;

const msg = (key: string | null, payload: Record<string, unknown> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload,
});

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `dispatcher liveness on ${db.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_au');
    const modules: TestingModule[] = [];
    const tables: string[] = [];
    const quote = (t: string) => (db.name === 'mariadb' ? `\`${t}\`` : `"${t}"`);

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterEach(async () => {
      for (const m of modules.splice(0)) await m.close();
      for (const t of tables.splice(0)) {
        if (db.name === 'mariadb') await ds.query(`DROP TABLE IF EXISTS \`${t}_key_lock\``);
        await ds.query(`DROP TABLE IF EXISTS ${quote(t)}`);
      }
    });

    afterAll(async () => {
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    async function boot(publisher: RecordingPublisher, overrides: Overrides = {}) {
      const table = uniqueTable('outbox_a');
      tables.push(table);
      await ensureOutboxTable(ds, { tableName: table });
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: ds,
            tableName: table,
            publisher,
            autoStart: false,
            dispatcher: { listen: false, ...overrides.dispatcher },
            ...overrides,
          }),
        ],
      }).compile();
      await moduleRef.init();
      modules.push(moduleRef);
      const outbox = moduleRef.get(OutboxService);
      const commit = (messages: OutboxMessage[]): Promise<string[]> =>
        ds.transaction(async (manager) => {
          await manager.save(TestOrder, { customer: 'audit' });
          return outbox.enqueue(messages, manager);
        });
      const rows = () => readOutbox(ds, table);
      const row = async (id: string) => {
        const found = (await rows()).find((r) => r.messageId === id);
        if (found === undefined) throw new Error(`no row ${id}`);
        return found;
      };
      return {
        table,
        outbox,
        commit,
        rows,
        row,
        dispatcher: moduleRef.get(OutboxDispatcher),
        unlocker: moduleRef.get(OutboxUnlocker),
        store: moduleRef.get<OutboxStore>(OUTBOX_STORE),
      };
    }

    it('a message whose dispatchers keep dying mid-publish is dead-lettered once its claims reach maxAttempts', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { retry: { maxAttempts: 2 } });
      const [id] = (await h.commit([msg('k')])) as [string];
      // Two dispatchers claim it and vanish without settling (a crash, or a lease lost).
      for (let i = 0; i < 2; i++) {
        const claimed = await waitFor('the message to be claimable again', async () => {
          const batch = await h.store.claim({ limit: 1, owner: `crashed-${i}`, leaseMs: 1_000 });
          return batch.records.length > 0 ? batch : undefined;
        });
        expect(claimed.records[0]?.attempts).toBe(i + 1);
      }
      const report = await waitFor('a third claim', async () => {
        const r = await h.dispatcher.runOnce();
        return r.claimed > 0 ? r : undefined;
      });
      expect(report).toMatchObject({ claimed: 1, deadLettered: 1, published: 0 });
      expect(publisher.attemptsOf(id)).toBe(0);
      expect(await h.row(id)).toMatchObject({
        status: 'dead',
        attempts: 3,
        lastError: expect.stringContaining('without an outcome'),
      });
    });

    it('a message whose publish always times out is dead-lettered after maxAttempts, not looped', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        retry: { maxAttempts: 3, initialDelayMs: 10, jitter: 0 },
        dispatcher: { publishTimeoutMs: 150, leaseMs: 2_000, pollIntervalMs: 20 },
      });
      const [id] = (await h.commit([msg('k')])) as [string];
      publisher.fail(id, 'hang');
      await waitFor('the message to be dead-lettered', async () => {
        await h.dispatcher.runOnce();
        return (await h.row(id)).status === 'dead';
      });
      expect(publisher.attemptsOf(id)).toBe(3);
      expect(await h.row(id)).toMatchObject({
        attempts: 3,
        lastError: expect.stringContaining('PublishTimeoutError'),
      });
    });

    it('a lone message failing "unavailable" is released with last_error and backs off instead of being reclaimed at once', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { dispatcher: { pollIntervalMs: 500 } });
      const [id] = (await h.commit([msg('k')])) as [string];
      publisher.fail(id, 'unavailable');
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, released: 1 });
      expect(await h.row(id)).toMatchObject({
        status: 'pending',
        attempts: 0,
        lockedBy: null,
        lastError: expect.stringContaining('PublisherUnavailableError'),
      });
      // Before the fix 20 runs sent it 20 times; it is not due again for the pause.
      for (let i = 0; i < 20; i++) await h.dispatcher.runOnce();
      expect(publisher.attemptsOf(id)).toBe(1);
      // It is not lost: it is due again after the pause.
      publisher.heal();
      await waitFor('the message to be delivered', async () => {
        await h.dispatcher.runOnce();
        return (await h.row(id)).status === 'delivered';
      });
    });

    it("a stuck key's backlog is parked: other keys flow, and the backlog follows its head in order once released", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { dispatcher: { batchSize: 20 } });
      const [head] = (await h.commit([msg('stuck', { n: 0 })])) as [string];
      publisher.fail(head, 'permanent');
      expect(await h.dispatcher.runOnce()).toMatchObject({ deadLettered: 1 });
      const backlog: string[] = [];
      for (let i = 0; i < 5; i++)
        backlog.push(
          ...(await h.commit(Array.from({ length: 100 }, (_, n) => msg('stuck', { n })))),
        );
      // Other keys behind the whole backlog: the first claims' windows see only 'stuck' rows.
      const others = await h.commit(Array.from({ length: 30 }, (_, n) => msg(`other-${n}`)));
      expect(await h.dispatcher.drain()).toBe(30);
      expect([...publisher.sentIds].sort()).toEqual([...others].sort());
      const rows = await h.rows();
      expect(
        rows.filter((r) => backlog.includes(r.messageId)).every((r) => r.status === 'waiting'),
      ).toBe(true);
      expect(publisher.attemptsOf(backlog[0] as string)).toBe(0);

      publisher.heal();
      expect(await h.outbox.retryDead([head])).toBe(1);
      await h.dispatcher.drain();
      expect(publisher.sentForKey('stuck')).toEqual([head, ...backlog]);
    });

    it("with onDeadLetter 'skip', retryDead() puts a dead message behind the key's message in flight, never beside it", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { ordering: { onDeadLetter: 'skip' } });
      const [a1, a2] = (await h.commit([msg('A', { n: 1 }), msg('A', { n: 2 })])) as [
        string,
        string,
      ];
      publisher.fail(a1, 'permanent', { times: 1 });
      expect(await h.dispatcher.runOnce()).toMatchObject({ deadLettered: 1 });
      // A2 is in flight on another dispatcher.
      const inFlight = await h.store.claim({ limit: 10, owner: 'other', leaseMs: 60_000 });
      expect(inFlight.records.map((r) => r.messageId)).toEqual([a2]);

      expect(await h.outbox.retryDead([a1])).toBe(1);
      // A1 is queued again, but not claimable while A2 is in flight.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      expect(publisher.attemptsOf(a1)).toBe(1);
      const rows = await h.rows();
      const idOf = (m: string) => BigInt(rows.find((r) => r.messageId === m)?.id ?? '0');
      expect(idOf(a1)).toBeGreaterThan(idOf(a2));

      const record = inFlight.records[0];
      if (record === undefined) throw new Error('nothing in flight');
      await h.store.settle(
        inFlight.token,
        { delivered: [record.id], retry: [], dead: [], release: [], advancedKeys: ['A'] },
        false,
      );
      expect(await h.dispatcher.runOnce()).toMatchObject({ published: 1 });
      expect(publisher.sentForKey('A')).toEqual([a1]);
      expect(await h.row(a1)).toMatchObject({ status: 'delivered' });
    });

    it('refuses to boot when publishTimeoutMs + dbTimeoutMs do not fit in leaseMs', async () => {
      await expect(
        boot(new RecordingPublisher(), {
          dispatcher: { leaseMs: 5_000, publishTimeoutMs: 4_000, dbTimeoutMs: 2_000 },
        }),
      ).rejects.toThrow(/dbTimeoutMs.*exceed dispatcher.leaseMs/);
    });

    if (db.name === 'postgres') {
      it('delayMs counts from the enqueue call, not from the start of the business transaction', async () => {
        const h = await boot(new RecordingPublisher());
        await ds.transaction(async (manager) => {
          await manager.query('SELECT 1');
          await new Promise((resolve) => setTimeout(resolve, 600));
          await h.outbox.enqueue(msg('k'), manager, { delayMs: 1_000 });
        });
        const [row] = await ds.query<{ gap: number }[]>(
          `SELECT extract(epoch FROM (available_at - created_at)) * 1000 AS gap FROM "${h.table}"`,
        );
        // created_at is the transaction start; available_at is the enqueue call + 1 s.
        expect(Number(row?.gap)).toBeGreaterThanOrEqual(1_550);
      });

      it('the LISTEN connection comes back after the server terminates it', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, {
          autoStart: true,
          dispatcher: { listen: true, pollIntervalMs: 600_000 },
        });
        await waitFor('the LISTEN connection', async () => {
          const [r] = await ds.query<{ n: number }[]>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN %${h.table}%'`,
          );
          return (r?.n ?? 0) > 0;
        });
        await ds.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %${h.table}%'`,
        );
        // Committed from another connection pool, so only a NOTIFY can wake the dispatcher.
        const other = new DataSource({
          type: 'postgres',
          host: SERVICES.postgres.host,
          port: SERVICES.postgres.port,
          username: process.env.PGUSER ?? 'postgres',
          password: process.env.PGPASSWORD,
          database: process.env.PGDATABASE ?? 'test',
        });
        await other.initialize();
        try {
          const sender = await Test.createTestingModule({
            imports: [
              OutboxModule.forRoot({ dataSource: other, tableName: h.table, workers: false }),
            ],
          }).compile();
          await sender.init();
          modules.push(sender);
          const outbox = sender.get(OutboxService);
          const ids = await waitFor('a wake-up through the re-established LISTEN', async () => {
            await other.transaction((m) => outbox.enqueue(msg('k'), m));
            await new Promise((resolve) => setTimeout(resolve, 300));
            return publisher.sent.length > 0 ? publisher.sentIds : undefined;
          });
          expect(ids.length).toBeGreaterThan(0);
        } finally {
          await other.destroy();
        }
      });
    }

    if (db.name !== 'sqlite') {
      it('a claim stuck on a database lock is given up, logged, and delivery resumes once the lock goes', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, {
          dispatcher: { leaseMs: 3_000, publishTimeoutMs: 1_000, dbTimeoutMs: 500 },
        });
        const [id] = (await h.commit([msg('k')])) as [string];
        const locker = ds.createQueryRunner();
        await locker.connect();
        try {
          if (db.name === 'postgres') {
            await locker.startTransaction();
            await locker.query(`LOCK TABLE "${h.table}" IN ACCESS EXCLUSIVE MODE`);
          } else {
            await locker.query(`LOCK TABLES \`${h.table}\` WRITE`);
          }
          // Before the fix the claim waited as long as the lock was held.
          const report = await resolvesWithin(
            'a run with the table locked',
            h.dispatcher.runOnce(),
            10_000,
          );
          expect(report.claimed).toBe(0);
        } finally {
          if (db.name === 'postgres') await locker.rollbackTransaction();
          else await locker.query('UNLOCK TABLES');
          await locker.release();
        }
        await waitFor('delivery after the lock is gone', async () => {
          await h.dispatcher.runOnce();
          return (await h.row(id)).status === 'delivered';
        });
      });
    }

    if (db.name === 'mariadb') {
      it('transactions enqueueing distinct keys in opposite orders do not deadlock (keys that shared a 1 024-bucket lock)', async () => {
        const h = await boot(new RecordingPublisher());
        // Two pairs of distinct keys that collided under the old 1 024 buckets.
        const collide = (): [string, string] => {
          const seen = new Map<number, string>();
          for (let i = 0; ; i++) {
            const key = `k-${Math.random().toString(36).slice(2)}-${i}`;
            const old = hashKey(key) % 1024;
            const other = seen.get(old);
            if (
              other !== undefined &&
              hashKey(other) % MYSQL_KEY_LOCK_BUCKETS !== hashKey(key) % MYSQL_KEY_LOCK_BUCKETS
            )
              return [other, key];
            seen.set(old, key);
          }
        };
        const [k1, k2] = collide();
        const [k3, k4] = collide();
        let release!: () => void;
        const bothLocked = new Promise<void>((resolve) => (release = resolve));
        let locked = 0;
        const step = async () => {
          if (++locked === 2) release();
          await bothLocked;
        };
        const t1 = ds.transaction(async (m) => {
          await h.outbox.enqueue(msg(k1), m);
          await step();
          await h.outbox.enqueue(msg(k3), m);
        });
        const t2 = ds.transaction(async (m) => {
          await h.outbox.enqueue(msg(k4), m);
          await step();
          await h.outbox.enqueue(msg(k2), m);
        });
        await expect(
          resolvesWithin('two transactions with distinct keys', Promise.all([t1, t2]), 20_000),
        ).resolves.toBeDefined();
        expect(await h.rows()).toHaveLength(4);
      });
    }
  });
}
