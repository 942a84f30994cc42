import { ClientTCP } from '@nestjs/microservices';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { OutboxDispatcher, OutboxModule, OutboxService, ensureOutboxTable, type OutboxBatchReport, type OutboxDispatcherOptions, type OutboxMessage, type OutboxObserver } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import { type OutboxStore } from '../../lib/store/outbox-store.port';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import type { ChildConfig } from '../support/children/child-protocol';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { readOutbox, TEST_DATABASES, uniqueTable, type OutboxRow } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';

// Crash, fencing, concurrency and outage. Every delivery proof here goes through a real TCP
// socket (Nest's ClientTCP + the library's ClientProxyPublisher) to a consumer that records what
// arrives; the multi-dispatcher tests run each dispatcher in its own process.

const FULL = process.env.OUTBOX_FULL === '1';
/** Messages of the multi-process test: the full 20 000 under OUTBOX_FULL=1. */
const CONCURRENT_TOTAL = FULL ? 20_000 : 4_000;
const CONCURRENT_KEYS = 200;
const CONCURRENT_DISPATCHERS = 4;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const msg = (key: string | null, payload: Record<string, unknown> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload,
});

/** Per key, the message ids in id (= commit) order, from the table. */
function idOrderByKey(rows: readonly OutboxRow[]): Map<string | null, string[]> {
  const byKey = new Map<string | null, string[]>();
  for (const r of rows) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.messageId]);
  return byKey;
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `dispatcher faults on ${db.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_fb');
    const cleanups: (() => Promise<unknown>)[] = [];
    const tables: string[] = [];
    const quote = (t: string) => (db.name === 'mariadb' ? `\`${t}\`` : `"${t}"`);
    const param = db.name === 'postgres' ? '$1' : '?';

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
      for (const t of tables.splice(0)) {
        if (db.name === 'mariadb') await ds.query(`DROP TABLE IF EXISTS \`${t}_key_lock\``);
        await ds.query(`DROP TABLE IF EXISTS ${quote(t)}`);
      }
    });

    afterAll(async () => {
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    /** A fresh table and an enqueue-only module on it. */
    async function freshTable(): Promise<{
      table: string;
      commit(messages: OutboxMessage[]): Promise<string[]>;
    }> {
      const table = uniqueTable('outbox_f');
      tables.push(table);
      await ensureOutboxTable(ds, { tableName: table });
      const moduleRef = await Test.createTestingModule({
        imports: [OutboxModule.forRoot({ dataSource: ds, tableName: table, workers: false })],
      }).compile();
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      const outbox = moduleRef.get(OutboxService);
      return { table, commit: (messages) => ds.transaction((m) => outbox.enqueue(messages, m)) };
    }

    async function consumerOn(options: { ack?: boolean } = {}): Promise<TcpConsumer> {
      const consumer = new TcpConsumer(options);
      await consumer.start();
      cleanups.push(() => consumer.stop());
      return consumer;
    }

    /** A dispatcher in this process, publishing over TCP to `port`. */
    async function tcpDispatcher(
      table: string,
      port: number,
      options: {
        ack?: boolean;
        instanceId: string;
        dispatcher?: OutboxDispatcherOptions;
        observer?: OutboxObserver;
      },
    ): Promise<TestingModule> {
      const client = new ClientTCP({ host: '127.0.0.1', port });
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: ds,
            tableName: table,
            publisher: new ClientProxyPublisher(client, {
              timeoutMs: 2_000,
              closeClient: true,
              mode: options.ack === true ? 'send' : 'emit',
            }),
            instanceId: options.instanceId,
            dispatcher: { pollIntervalMs: 100, ...options.dispatcher },
            observer: options.observer,
          }),
        ],
      }).compile();
      moduleRef.useLogger(['error', 'fatal']);
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      return moduleRef;
    }

    async function startChild(config: ChildConfig): Promise<DispatcherChild> {
      const child = await DispatcherChild.start(config);
      cleanups.push(() => child.kill('SIGKILL'));
      return child;
    }

    async function waitForRows(
      table: string,
      predicate: (rows: OutboxRow[]) => boolean,
      timeoutMs: number,
      what: string,
    ): Promise<OutboxRow[]> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const rows = await readOutbox(ds, table);
        if (predicate(rows)) return rows;
        if (Date.now() > deadline) {
          const statuses = rows.reduce<Record<string, number>>(
            (acc, r) => ({ ...acc, [r.status]: (acc[r.status] ?? 0) + 1 }),
            {},
          );
          throw new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify(statuses)}`,
          );
        }
        await sleep(100);
      }
    }

    /** Leases held by `owner`: message id and milliseconds left, on the database clock. */
    async function leasesOf(
      table: string,
      owner: string,
    ): Promise<{ messageId: string; remainingMs: number }[]> {
      const remaining =
        db.name === 'postgres'
          ? 'extract(epoch FROM (locked_until - now())) * 1000'
          : db.name === 'mariadb'
            ? 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) / 1000'
            : "(julianday(locked_until) - julianday('now')) * 86400000.0";
      const id = db.name === 'postgres' ? 'message_id::text' : 'message_id';
      const rows = await ds.query<{ message_id: string; remaining: string | number }[]>(
        `SELECT ${id} AS message_id, ${remaining} AS remaining FROM ${quote(table)} WHERE locked_by = ${param} AND status = 'pending'`,
        [owner],
      );
      return rows.map((r) => ({ messageId: r.message_id, remainingMs: Number(r.remaining) }));
    }

    const sqlitePath = (): string | undefined =>
      db.name === 'sqlite' ? String(ds.options.database) : undefined;

    it('loses nothing when a dispatcher process is SIGKILLed mid-batch: another publishes its messages after the lease', async () => {
      const consumer = await consumerOn();
      const { table, commit } = await freshTable();
      const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 12; tx++)
        ids.push(...(await commit(keys.map((key) => msg(key, { tx })))));

      const doomed = await startChild({
        db: db.name,
        sqlitePath: sqlitePath(),
        table,
        instanceId: 'doomed-child',
        tcpPort: consumer.port,
        dispatcher: {
          leaseMs: 3_000,
          publishTimeoutMs: 2_800,
          batchSize: 20,
          pollIntervalMs: 50,
          listen: false,
        },
        hangAfter: 25,
      });
      const hanging = await doomed.waitFor('hanging', 20_000);
      // The claim is in the table: leased by the child, not settled. The database read the
      // remaining lease after this instant, so leasesReadFrom + remaining is a lower bound of
      // the lease end on this machine's clock (the database runs on the same host).
      const leasesReadFrom = Date.now();
      const leases = await leasesOf(table, 'doomed-child');
      expect(leases.map((l) => l.messageId).sort()).toEqual([...hanging.claimed].sort());
      expect(hanging.published.length).toBeGreaterThan(0);
      expect(hanging.published.length).toBeLessThan(hanging.claimed.length);
      const exit = await doomed.kill('SIGKILL');
      expect(exit.signal).toBe('SIGKILL');
      const leaseEnds = Math.floor(leasesReadFrom + Math.max(...leases.map((l) => l.remainingMs)));
      // What it handed to the socket before dying arrived; its rows are still leased to it.
      await consumer.until(
        (c) => hanging.published.every((id) => c.counts().has(id)),
        5_000,
        'the half batch the child sent',
      );
      expect((await leasesOf(table, 'doomed-child')).length).toBe(hanging.claimed.length);
      const beforeTakeover = consumer.arrivals.length;

      await tcpDispatcher(table, consumer.port, {
        instanceId: 'survivor',
        dispatcher: { leaseMs: 1_500, pollIntervalMs: 100, batchSize: 50 },
      });
      await consumer.until((c) => ids.every((id) => c.counts().has(id)), 30_000, 'every message');
      const rows = await waitForRows(
        table,
        (rs) => rs.every((r) => r.status === 'delivered'),
        10_000,
        'every row delivered',
      );

      // Nothing lost; the only duplicates are messages the dead child sent but never settled.
      const counts = consumer.counts();
      expect(ids.filter((id) => !counts.has(id))).toEqual([]);
      expect(consumer.duplicates().sort()).toEqual([...hanging.published].sort());
      expect(Math.max(...counts.values())).toBe(2);
      // The survivor took the child's messages over only after the child's lease had expired.
      const claimed = new Set(hanging.claimed);
      const takenOver = consumer.arrivals
        .slice(beforeTakeover)
        .filter((a) => claimed.has(a.messageId));
      expect(takenOver).toHaveLength(hanging.claimed.length);
      for (const a of takenOver) expect(a.at).toBeGreaterThanOrEqual(leaseEnds);
      // Per-key order of first publications is commit order.
      const firsts = consumer.firstArrivalsByKey();
      for (const [key, order] of idOrderByKey(rows)) expect(firsts.get(key)).toEqual(order);
      // Each claim counts an attempt: the crashed child's claims stay counted.
      expect(rows.every((r) => r.lockedBy === null && r.attempts >= 1 && r.attempts <= 2)).toBe(
        true,
      );
      expect(rows.filter((r) => claimed.has(r.messageId)).every((r) => r.attempts === 2)).toBe(
        true,
      );
    });

    it('fences a settle whose lease was taken over: it changes nothing, whatever its outcome (store)', async () => {
      const { table, commit } = await freshTable();
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: ds,
            tableName: table,
            publisher: new RecordingPublisher(),
            autoStart: false,
          }),
        ],
      }).compile();
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      const store = moduleRef.get<OutboxStore>(OUTBOX_STORE);
      const ids = await commit([msg('a'), msg('b'), msg('c'), msg('d')]);
      const claim = { limit: 10 } as const;

      const a = await store.claim({ ...claim, owner: 'slow-a', leaseMs: 1_000 });
      expect(a.records.map((r) => r.messageId)).toEqual(ids);
      // While A's lease is live, nobody else gets the rows.
      expect((await store.claim({ ...claim, owner: 'b', leaseMs: 60_000 })).records).toHaveLength(
        0,
      );
      await waitFor("A's lease to expire on the database clock", async () => {
        const left = await leasesOf(table, 'slow-a');
        return left.length === ids.length && left.every((l) => l.remainingMs < 0);
      });
      const b = await store.claim({ ...claim, owner: 'b', leaseMs: 60_000 });
      expect(b.records.map((r) => r.messageId)).toEqual(ids);
      const [r0, r1, r2, r3] = b.records.map((r) => r.id) as [string, string, string, string];

      // A wakes up and settles every way it could: nothing changes.
      const late = {
        delivered: [r0],
        retry: [{ id: r1, delayMs: 1_000, error: 'late retry' }],
        dead: [{ id: r2, error: 'late dead' }],
        release: [{ id: r3, delayMs: 0, error: null }],
        advancedKeys: [],
      };
      expect(await store.settle(a.token, late, false)).toBe(0);
      expect(
        await store.settle(
          a.token,
          { delivered: [r0, r1, r2, r3], retry: [], dead: [], release: [], advancedKeys: [] },
          true,
        ),
      ).toBe(0);
      expect(
        (await readOutbox(ds, table)).map((r) => [r.status, r.lockedBy, r.attempts, r.lastError]),
        // Each claim counted an attempt.
      ).toEqual(ids.map(() => ['pending', 'b', 2, null]));

      // B's outcome stands, and A's later attempts still change nothing.
      expect(
        await store.settle(
          b.token,
          {
            delivered: [r0, r1],
            retry: [],
            dead: [{ id: r2, error: 'rejected by b' }],
            release: [{ id: r3, delayMs: 0, error: null }],
            advancedKeys: [],
          },
          false,
        ),
      ).toBe(4);
      expect(await store.settle(a.token, late, false)).toBe(0);
      const rows = await readOutbox(ds, table);
      expect(rows.map((r) => [r.status, r.lockedBy, r.attempts, r.lastError])).toEqual([
        ['delivered', null, 2, null],
        ['delivered', null, 2, null],
        ['dead', null, 2, 'rejected by b'],
        // A release gives the claim's attempt back.
        ['pending', null, 1, null],
      ]);
      // Settling twice with the same token is also a no-op.
      expect(
        await store.settle(
          b.token,
          { delivered: [r3], retry: [], dead: [], release: [], advancedKeys: [] },
          false,
        ),
      ).toBe(0);
    });

    it('a dispatcher that stalls past its lease is fenced off: the take-over outcome stands and it reports fenced', async () => {
      const { table, commit } = await freshTable();
      const boot = async (instanceId: string, publisher: RecordingPublisher) => {
        const ref = await Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              dataSource: ds,
              tableName: table,
              publisher,
              instanceId,
              autoStart: false,
              dispatcher: { leaseMs: 1_000, publishTimeoutMs: 500 },
            }),
          ],
        }).compile();
        ref.useLogger(['error', 'fatal']);
        await ref.init();
        cleanups.push(() => ref.close());
        return ref;
      };
      const slowPublisher = new RecordingPublisher();
      const takeoverPublisher = new RecordingPublisher();
      const a = await boot('stalled-a', slowPublisher);
      const b = await boot('takeover-b', takeoverPublisher);
      const ids = await commit([msg('x'), msg('y'), msg('z')]);
      takeoverPublisher.fail(ids[2] as string, 'permanent');

      // A publishes, then stalls (a GC pause, a blocked event loop) before it settles.
      const storeA = a.get<OutboxStore>(OUTBOX_STORE);
      const settle = storeA.settle.bind(storeA);
      let resume!: () => void;
      const stalled = new Promise<void>((resolve) => (resume = resolve));
      let reachedSettle = false;
      storeA.settle = async (...args: Parameters<OutboxStore['settle']>) => {
        reachedSettle = true;
        await stalled;
        return settle(...args);
      };
      const runA = a.get(OutboxDispatcher).runOnce();
      await slowPublisher.until(() => reachedSettle, 5_000, 'A to publish');
      expect(slowPublisher.sentIds).toEqual(ids);
      await waitFor("A's lease to expire on the database clock", async () => {
        const left = await leasesOf(table, 'stalled-a');
        return left.length === ids.length && left.every((l) => l.remainingMs < 0);
      });

      const reportB = await b.get(OutboxDispatcher).runOnce();
      expect(reportB).toMatchObject({ claimed: 3, published: 2, deadLettered: 1, fenced: 0 });
      resume();
      const reportA: OutboxBatchReport = await runA;
      expect(reportA).toMatchObject({ claimed: 3, published: 3, fenced: 3 });

      const rows = await readOutbox(ds, table);
      expect(rows.map((r) => [r.status, r.lockedBy])).toEqual([
        ['delivered', null],
        ['delivered', null],
        ['dead', null],
      ]);
      expect(rows[2]?.lastError).toContain('rejected by the broker');
    });

    if (db.name !== 'sqlite') {
      // SQLite is the embedded single-dispatcher default; scaling out needs a server database.
      it(`${CONCURRENT_DISPATCHERS} dispatcher processes deliver ${CONCURRENT_TOTAL} messages over ${CONCURRENT_KEYS} keys through TCP: none lost, none duplicated, per-key order kept${FULL ? '' : ' (OUTBOX_FULL=1 runs 20 000)'}`, async () => {
        // Acknowledged sends: with plain TCP emit, "published" only means written to one of four
        // sockets, and the consumer may read those sockets in any order.
        const consumer = await consumerOn({ ack: true });
        const { table, commit } = await freshTable();
        const started = Date.now();
        const children = await Promise.all(
          Array.from({ length: CONCURRENT_DISPATCHERS }, (_, n) =>
            startChild({
              db: db.name,
              table,
              instanceId: `worker-${n}`,
              tcpPort: consumer.port,
              ack: true,
              dispatcher: { batchSize: 100, pollIntervalMs: 100, leaseMs: 30_000 },
            }),
          ),
        );
        const booted = Date.now();

        // Four enqueuers, each committing transactions of 50 messages while the dispatchers run;
        // keys interleave within and across transactions.
        const perTx = 50;
        const txCount = CONCURRENT_TOTAL / perTx;
        const ids: string[] = [];
        let nextTx = 0;
        await Promise.all(
          Array.from({ length: 4 }, async () => {
            for (let tx = nextTx++; tx < txCount; tx = nextTx++) {
              const batch = Array.from({ length: perTx }, (_, j) =>
                msg(`key-${(tx * 7 + j * 4) % CONCURRENT_KEYS}`, { tx, j }),
              );
              ids.push(...(await commit(batch)));
            }
          }),
        );
        const enqueued = Date.now();
        expect(ids).toHaveLength(CONCURRENT_TOTAL);

        await consumer.until(
          (c) => c.arrivals.length >= CONCURRENT_TOTAL,
          240_000,
          'every message',
        );
        const rows = await waitForRows(
          table,
          (rs) => rs.every((r) => r.status === 'delivered'),
          30_000,
          'every row delivered',
        );
        const delivered = Date.now();
        const totals = await Promise.all(children.map((c) => c.stop()));
        // The dispatchers have stopped; anything still on the wire would show up as an extra arrival.
        await expectNever(
          'an arrival after the dispatchers stopped',
          () => consumer.arrivals.length > CONCURRENT_TOTAL,
          200,
        );

        expect(consumer.arrivals).toHaveLength(CONCURRENT_TOTAL);
        expect(consumer.duplicates()).toEqual([]);
        expect(new Set(consumer.ids())).toEqual(new Set(ids));
        const firsts = consumer.firstArrivalsByKey();
        expect(firsts.size).toBe(CONCURRENT_KEYS);
        let keysInOrder = 0;
        for (const [key, order] of idOrderByKey(rows))
          if (JSON.stringify(firsts.get(key)) === JSON.stringify(order)) keysInOrder += 1;
        expect(keysInOrder).toBe(CONCURRENT_KEYS);
        expect(rows.every((r) => r.attempts === 1 && r.lockedBy === null)).toBe(true);
        // Together they published each message once, and no settle was fenced. (How the work
        // splits between them is timing, not a promise: one may take it all.)
        expect(totals.reduce((n, t) => n + t.published, 0)).toBe(CONCURRENT_TOTAL);
        expect(totals.map((t) => t.fenced)).toEqual(totals.map(() => 0));
        process.stdout.write(
          `[${db.name}] ${CONCURRENT_DISPATCHERS} dispatchers, ${CONCURRENT_TOTAL} messages: boot ${booted - started} ms, enqueue ${enqueued - booted} ms, ` +
            `delivered ${delivered - booted} ms after boot; per dispatcher ${totals.map((t) => t.published).join('/')}\n`,
        );
      });
    }

    it('survives a broker outage mid-run over real TCP: no attempts burnt, nothing lost, the backlog drains when it returns', async () => {
      const consumer = await consumerOn({ ack: true });
      const { table, commit } = await freshTable();
      let outages = 0;
      const batchSize = 20;
      const d = await tcpDispatcher(table, consumer.port, {
        ack: true,
        instanceId: 'outage-survivor',
        dispatcher: {
          pollIntervalMs: 50,
          maxOutagePauseMs: 400,
          batchSize,
          leaseMs: 5_000,
          publishTimeoutMs: 3_000,
        },
        observer: { onOutage: () => (outages += 1) },
      });
      const keys = Array.from({ length: 20 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 20; tx++)
        ids.push(...(await commit(keys.map((key) => msg(key, { tx })))));

      await consumer.until((c) => c.arrivals.length >= 100, 20_000, 'the first deliveries');
      await consumer.stop();
      const cut = consumer.arrivals.length;
      expect(cut).toBeLessThan(ids.length);
      // Messages committed during the outage.
      for (let tx = 20; tx < 25; tx++)
        ids.push(...(await commit(keys.map((key) => msg(key, { tx })))));
      const outagesAtCut = outages;
      // The dispatcher keeps trying while the broker is away.
      await waitFor('more outage reports', () => outages >= outagesAtCut + 2);
      expect(outages).toBeGreaterThan(1);
      const during = await readOutbox(ds, table);
      // Queued (pending or parked behind their key's head), none dead, no attempt burnt: a
      // released claim gives its attempt back (a row may be mid-claim as it is read).
      expect(
        during.filter((r) => r.status === 'pending' || r.status === 'waiting').length,
      ).toBeGreaterThan(100);
      // Released claims give their attempt back; a publish cut off mid-flight by the outage
      // timed out, which counts one attempt (the broker may have had it).
      expect(during.every((r) => r.status !== 'dead' && r.attempts <= 1)).toBe(true);
      expect(consumer.arrivals).toHaveLength(cut);

      await consumer.start();
      const back = Date.now();
      await consumer.until(
        (c) => ids.every((id) => c.counts().has(id)),
        20_000,
        'the backlog after the outage',
      );
      const rows = await waitForRows(
        table,
        (rs) => rs.every((r) => r.status === 'delivered'),
        10_000,
        'every row delivered',
      );
      const drainedIn = Date.now() - back;
      expect(drainedIn).toBeLessThan(5_000 + 50 + 400 + 5_000);
      expect(rows.every((r) => r.attempts >= 1 && r.attempts <= 2 && r.lockedBy === null)).toBe(
        true,
      );
      // Only a batch in flight at the cut can be published twice (ambiguous: no acknowledgement).
      expect(consumer.duplicates().length).toBeLessThanOrEqual(batchSize);
      const firsts = consumer.firstArrivalsByKey();
      for (const [key, order] of idOrderByKey(rows)) expect(firsts.get(key)).toEqual(order);

      // Still alive afterwards.
      const [after] = await commit([msg('after-outage')]);
      await consumer.until(
        (c) => c.counts().has(after as string),
        5_000,
        'a message after the outage',
      );
      expect(d.get(OutboxDispatcher)).toBeDefined();
    });
  });
}
