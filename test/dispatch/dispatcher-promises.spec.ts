import { randomBytes } from 'node:crypto';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxCleaner,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  ensureOutboxTable,
  type OutboxMessage,
  type OutboxModuleOptions,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import {
  readOutbox,
  TEST_DATABASES,
  TestOrder,
  uniqueTable,
  type OutboxRow,
} from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';

// Promises the README makes that no other suite proves: LISTEN/NOTIFY wake-ups, per-key order
// with several batches in flight, retry.maxAgeMs, dead-letter retention and purgeDead(), and
// the schema option. Each runs on every database the feature applies to.

type Overrides = Omit<Partial<OutboxModuleOptions>, 'dataSource' | 'publisher'>;

const msg = (key: string | null, payload: Record<string, unknown> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload,
});

/** A small seeded generator, so that a failing random schedule can be replayed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * Publishes every message of a batch concurrently, each after its own random delay, and records
 * acknowledgements in the order they happen. It notes any key that is handed over while a
 * message of the same key is still being published, and how many `publish()` calls overlap.
 * The first call is held until a second one overlaps it (or 10 s pass), so that pipelining is
 * observed whatever the machine's speed.
 */
class ConcurrentJitterPublisher implements OutboxPublisher {
  readonly acked: OutboxRecord[] = [];
  readonly sameKeyOverlaps: string[] = [];
  maxConcurrentCalls = 0;
  private concurrentCalls = 0;
  private calls = 0;
  private readonly keysInFlight = new Set<string>();
  private overlapped!: () => void;
  private readonly overlap = new Promise<void>((resolve) => (this.overlapped = resolve));

  constructor(
    private readonly random: () => number,
    private readonly maxDelayMs: number,
  ) {}

  async publish(messages: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.calls += 1;
    this.concurrentCalls += 1;
    this.maxConcurrentCalls = Math.max(this.maxConcurrentCalls, this.concurrentCalls);
    if (this.concurrentCalls >= 2) this.overlapped();
    try {
      if (this.calls === 1) await this.untilOverlap(10_000);
      return await Promise.all(messages.map((m) => this.publishOne(m, signal)));
    } finally {
      this.concurrentCalls -= 1;
    }
  }

  private async publishOne(record: OutboxRecord, signal: AbortSignal): Promise<PublishOutcome> {
    const key = record.key;
    if (key !== null) {
      if (this.keysInFlight.has(key)) this.sameKeyOverlaps.push(`${key}: ${record.messageId}`);
      this.keysInFlight.add(key);
    }
    try {
      await abortableDelay(Math.floor(this.random() * this.maxDelayMs), signal);
      this.acked.push(record);
      return { ok: true };
    } finally {
      if (key !== null) this.keysInFlight.delete(key);
    }
  }

  private async untilOverlap(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.overlap,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
    ]);
    clearTimeout(timer);
  }
}

function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
      },
      { once: true },
    );
  });
}

const suffix = (): string => randomBytes(4).toString('hex');

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `dispatcher promises on ${db.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_pb');
    const cleanups: (() => Promise<unknown>)[] = [];
    const tables: string[] = [];
    const quote = (name: string): string => (db.name === 'mariadb' ? `\`${name}\`` : `"${name}"`);
    const param = (n: number): string => (db.name === 'postgres' ? `$${n}` : '?');
    const messageIdColumn = db.name === 'postgres' ? 'message_id::text' : 'message_id';

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
      for (const t of tables.splice(0)) {
        if (db.name === 'mariadb') await ds.query(`DROP TABLE IF EXISTS \`${t}_key_lock\``);
        await ds.query(`DROP TABLE IF EXISTS ${quote(t)}`);
      }
    });

    afterAll(async () => {
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    async function freshTable(prefix = 'outbox_p'): Promise<string> {
      const table = uniqueTable(prefix);
      tables.push(table);
      await ensureOutboxTable(ds, { tableName: table });
      return table;
    }

    interface App {
      readonly moduleRef: TestingModule;
      readonly outbox: OutboxService;
      /** Enqueues in one committed transaction with a business row; resolves to the ids. */
      commit(messages: OutboxMessage[]): Promise<string[]>;
    }

    async function compile(
      options: OutboxModuleOptions,
      workers: boolean,
      dataSource: DataSource,
    ): Promise<App> {
      const moduleRef = await Test.createTestingModule({
        imports: [OutboxModule.forRoot({ ...options, workers })],
      }).compile();
      moduleRef.useLogger(['error', 'fatal']);
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      const outbox = moduleRef.get(OutboxService);
      return {
        moduleRef,
        outbox,
        commit: (messages) =>
          dataSource.transaction(async (manager) => {
            await manager.save(TestOrder, { customer: 'promises-test' });
            return outbox.enqueue(messages, manager);
          }),
      };
    }

    /** An app that runs workers on `table`; they start only when the test says so. */
    async function dispatcherApp(
      table: string,
      publisher: OutboxPublisher,
      overrides: Overrides = {},
    ): Promise<App & { dispatcher: OutboxDispatcher; cleaner: OutboxCleaner }> {
      const app = await compile(
        {
          dataSource: ds,
          tableName: table,
          publisher,
          instanceId: `promises-${table}`,
          autoStart: false,
          ...overrides,
          dispatcher: { pollIntervalMs: 50, batchSize: 50, ...overrides.dispatcher },
        },
        true,
        ds,
      );
      return {
        ...app,
        dispatcher: app.moduleRef.get(OutboxDispatcher),
        cleaner: app.moduleRef.get(OutboxCleaner),
      };
    }

    /** An enqueue-only app (no workers). */
    function enqueuer(
      table: string,
      overrides: Overrides = {},
      dataSource: DataSource = ds,
    ): Promise<App> {
      return compile({ dataSource, tableName: table, ...overrides }, false, dataSource);
    }

    const rowOf = (rows: readonly OutboxRow[], messageId: string): OutboxRow => {
      const row = rows.find((r) => r.messageId === messageId);
      if (row === undefined) throw new Error(`no row for ${messageId}`);
      return row;
    };

    /** Message id → status, for the rows of a (possibly schema-qualified) table. */
    async function statuses(qualifiedTable: string): Promise<Map<string, string>> {
      const rows = await ds.query<{ message_id: string; status: string }[]>(
        `SELECT ${messageIdColumn} AS message_id, status FROM ${qualifiedTable} ORDER BY id`,
      );
      return new Map(rows.map((r) => [String(r.message_id), String(r.status)]));
    }

    /** The timestamp columns the table has (the set grows between versions). */
    async function timeColumns(table: string): Promise<string[]> {
      const sql =
        db.name === 'postgres'
          ? `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
          : db.name === 'mariadb'
            ? `SELECT column_name AS column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`
            : `SELECT name AS column_name FROM pragma_table_info(?)`;
      const rows = await ds.query<{ column_name: string }[]>(sql, [table]);
      const known = ['created_at', 'available_at', 'last_attempt_at', 'delivered_at', 'dead_at'];
      return rows.map((r) => String(r.column_name)).filter((c) => known.includes(c));
    }

    /**
     * Makes rows two hours older in every timestamp they have, on the database's own clock
     * arithmetic: a state no test can wait for, set directly in the table.
     */
    async function backdateTwoHours(table: string, messageIds: readonly string[]): Promise<void> {
      const minus = (c: string): string =>
        db.name === 'postgres'
          ? `${c} = ${c} - interval '2 hours'`
          : db.name === 'mariadb'
            ? `${c} = ${c} - INTERVAL 2 HOUR`
            : `${c} = strftime('%Y-%m-%d %H:%M:%f', ${c}, '-2 hours')`;
      const set = (await timeColumns(table)).map(minus).join(', ');
      for (const id of messageIds)
        await ds.query(`UPDATE ${quote(table)} SET ${set} WHERE ${messageIdColumn} = ${param(1)}`, [
          id,
        ]);
    }

    // 1. LISTEN/NOTIFY ---------------------------------------------------------------------

    if (db.name === 'postgres') {
      /**
       * A dispatcher that polls every 120 s, made idle: start() runs one drain at once, and
       * runOnce() waits for that drain before claiming (nothing). The message then comes from
       * another DataSource (its own pool and connections, and no dispatcher of its own), so
       * the in-process commit nudge cannot fire for it either.
       */
      const idleDispatcherAndOtherWriter = async (listen: boolean) => {
        const table = await freshTable('outbox_l');
        const publisher = new RecordingPublisher();
        const app = await dispatcherApp(table, publisher, {
          dispatcher: { listen, pollIntervalMs: 120_000 },
        });
        await app.dispatcher.start();
        expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
        expect(publisher.calls).toHaveLength(0);

        const otherDataSource = await db.open(table);
        cleanups.push(() => otherDataSource.destroy());
        const other = await enqueuer(table, {}, otherDataSource);
        return { table, publisher, app, other };
      };

      it('LISTEN/NOTIFY: a commit on another DataSource wakes an idle dispatcher long before its next poll', async () => {
        const { table, publisher, other } = await idleDispatcherAndOtherWriter(true);
        const [id] = (await other.commit([msg('listen-key', { n: 1 })])) as [string];
        // The poll is 120 s away: only the NOTIFY sent at commit can make this arrive.
        await publisher.until((p) => p.sentIds.includes(id), 10_000, 'the NOTIFY wake-up');
        expect(publisher.sentIds).toEqual([id]);
        await waitFor('the row to be settled as delivered', async () =>
          (await readOutbox(ds, table)).every((r) => r.status === 'delivered'),
        );

        // It keeps listening: a second commit elsewhere is woken up for too.
        const [second] = (await other.commit([msg('listen-key', { n: 2 })])) as [string];
        await publisher.until((p) => p.sentIds.includes(second), 10_000, 'a second wake-up');
        expect(publisher.sentIds).toEqual([id, second]);
      });

      it('without LISTEN (listen: false) the same commit on another DataSource waits for the poll', async () => {
        const { table, publisher, app, other } = await idleDispatcherAndOtherWriter(false);
        const [id] = (await other.commit([msg('listen-key', { n: 1 })])) as [string];
        // Cannot be flaky: the dispatcher is idle, its next poll is 120 s after start(), the
        // commit was on another DataSource (no nudge), and nothing else wakes it; a publish in
        // these 3 s could only come from a wake-up that should not exist.
        await expectNever(
          'a publish without LISTEN before the poll',
          () => publisher.calls.length > 0,
          3_000,
        );
        expect((await readOutbox(ds, table)).map((r) => [r.messageId, r.status])).toEqual([
          [id, 'pending'],
        ]);
        // It was committed and due all along: the next run publishes it.
        expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 1 });
        expect(publisher.sentIds).toEqual([id]);
      });
    }

    // 2. Several batches in flight -------------------------------------------------------

    it('with batchesInFlight 3, 30 keys × 20 messages under random per-message publish delays: all delivered once, each key in commit order, one message per key in flight', async () => {
      const seed = 0x5eed ^ Number(process.pid);
      const random = seeded(seed);
      const publisher = new ConcurrentJitterPublisher(random, 15);
      const table = await freshTable();
      const app = await dispatcherApp(table, publisher, {
        dispatcher: {
          batchesInFlight: 3,
          batchSize: 10,
          pollIntervalMs: 100,
          leaseMs: 60_000,
          publishTimeoutMs: 30_000,
        },
      });
      const keys = Array.from({ length: 30 }, (_, k) => `key-${k}`);
      const expected = new Map<string, string[]>(keys.map((k) => [k, []]));
      const all: string[] = [];
      // 20 transactions, each with one message per key in a shuffled key order.
      for (let tx = 0; tx < 20; tx++) {
        const order = [...keys].sort(() => random() - 0.5);
        const ids = await app.commit(order.map((key) => msg(key, { tx })));
        ids.forEach((id, i) => expected.get(order[i] as string)?.push(id));
        all.push(...ids);
      }

      await app.dispatcher.start();
      await waitFor('every message acknowledged', () => publisher.acked.length >= all.length, {
        timeoutMs: 60_000,
      });
      await waitFor(
        'every row settled as delivered',
        async () => (await readOutbox(ds, table)).every((r) => r.status === 'delivered'),
        { timeoutMs: 10_000 },
      );

      const context = `seed ${seed}`;
      expect({ context, overlaps: publisher.sameKeyOverlaps }).toEqual({ context, overlaps: [] });
      const ackedIds = publisher.acked.map((r) => r.messageId);
      expect(ackedIds).toHaveLength(all.length);
      expect(new Set(ackedIds).size).toBe(all.length);
      expect([...ackedIds].sort()).toEqual([...all].sort());
      for (const [key, ids] of expected)
        expect({
          context,
          key,
          order: publisher.acked.filter((r) => r.key === key).map((r) => r.messageId),
        }).toEqual({ context, key, order: ids });
      // Batches really overlapped, and never more than batchesInFlight of them.
      expect(publisher.maxConcurrentCalls).toBeGreaterThanOrEqual(2);
      expect(publisher.maxConcurrentCalls).toBeLessThanOrEqual(3);
    });

    // 3. retry.maxAgeMs -------------------------------------------------------------------

    it('retry.maxAgeMs dead-letters an always-failing message once its age plus the next delay would pass it, long before maxAttempts', async () => {
      const publisher = new RecordingPublisher();
      const table = await freshTable();
      const app = await dispatcherApp(table, publisher, {
        retry: { maxAttempts: 10, initialDelayMs: 200, factor: 2, jitter: 0, maxAgeMs: 1_000 },
      });
      const [id, other] = (await app.commit([msg('aging'), msg('healthy')])) as [string, string];
      publisher.fail(id, 'retryable', { error: new Error('broker keeps refusing') });

      // Drive the dispatcher until the message is dead: each run claims it only once it is due.
      const dead = await waitFor(
        'the failing message to be dead-lettered',
        async () => {
          await app.dispatcher.runOnce();
          const row = rowOf(await readOutbox(ds, table), id);
          return row.status === 'dead' ? row : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 20 },
      );
      // Retry n waits 200 × 2^(n-1) ms (jitter 0), so attempt 3 starts at an age of at least
      // 200 + 400 = 600 ms and a fourth would be due 800 ms later, past 1 000 ms: whatever the
      // timing, the message dies by attempt 3, far below maxAttempts (10).
      expect(dead.attempts).toBeGreaterThanOrEqual(1);
      expect(dead.attempts).toBeLessThanOrEqual(3);
      expect(dead.lastError).toContain('broker keeps refusing');
      expect(dead.lockedBy).toBeNull();
      expect(publisher.attemptsOf(id)).toBe(dead.attempts);
      expect(publisher.sentIds).toEqual([other]);
      expect(await app.outbox.stats()).toMatchObject({ dead: 1, delivered: 1, pending: 0 });
    });

    // 4. Dead-letter retention and purgeDead() -------------------------------------------

    /**
     * One table with dead, pending (backing off) and delivered rows, some of them made two
     * hours old in every timestamp they have (enqueued, dead-lettered, delivered …), so the
     * tests hold whichever of them a row's age is measured from. Keys are distinct, so no row
     * holds another back.
     */
    async function deadLetterFixture(names: Record<string, 'dead' | 'pending' | 'delivered'>) {
      const table = await freshTable('outbox_r');
      const publisher = new RecordingPublisher();
      const app = await dispatcherApp(table, publisher, {
        retry: { initialDelayMs: 600_000, jitter: 0 },
      });
      const labels = Object.keys(names);
      const ids = await app.commit(labels.map((label) => msg(label, { label })));
      const id = new Map(labels.map((label, i) => [label, ids[i] as string]));
      labels.forEach((label) => {
        if (names[label] === 'dead') publisher.fail(id.get(label) as string, 'permanent');
        if (names[label] === 'pending') publisher.fail(id.get(label) as string, 'retryable');
      });
      expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: labels.length });
      const before = await statuses(quote(table));
      for (const label of labels)
        expect([label, before.get(id.get(label) as string)]).toEqual([label, names[label]]);
      await backdateTwoHours(
        table,
        labels.filter((l) => l.includes('old')).map((l) => id.get(l) as string),
      );
      return { table, id: (label: string) => id.get(label) as string, before };
    }

    it('the cleaner deletes dead rows older than cleaner.deadRetentionMs, keeps younger ones, and never touches pending or delivered rows', async () => {
      const { table, id, before } = await deadLetterFixture({
        'dead-old-1': 'dead',
        'dead-old-2': 'dead',
        'dead-young': 'dead',
        'pending-old': 'pending',
        'pending-young': 'pending',
        'delivered-old': 'delivered',
        'delivered-young': 'delivered',
      });
      const purged: [string, number][] = [];

      // Without deadRetentionMs (the default), dead rows are kept however old.
      const keeper = await dispatcherApp(table, new RecordingPublisher());
      expect(await keeper.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
      expect(await statuses(quote(table))).toEqual(before);

      const cleaning = await dispatcherApp(table, new RecordingPublisher(), {
        cleaner: { deadRetentionMs: 3_600_000 },
        observer: { onPurged: (status, count) => purged.push([status, count]) },
      });
      expect(await cleaning.cleaner.runOnce()).toEqual({ delivered: 0, dead: 2 });
      const after = await statuses(quote(table));
      const expected = new Map(before);
      expected.delete(id('dead-old-1'));
      expected.delete(id('dead-old-2'));
      expect(after).toEqual(expected);
      expect(purged).toEqual([['dead', 2]]);
      // Nothing left past retention: a second run deletes nothing.
      expect(await cleaning.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
    });

    it('purgeDead(olderThanMs, limit) deletes dead rows older than the cut-off, purgeDead() all dead rows, and neither touches pending or delivered rows', async () => {
      const { table, id, before } = await deadLetterFixture({
        'dead-old': 'dead',
        'dead-young-1': 'dead',
        'dead-young-2': 'dead',
        'pending-old': 'pending',
        'delivered-old': 'delivered',
      });
      const operator = await enqueuer(table);
      const expected = new Map(before);

      expect(await operator.outbox.purgeDead(3_600_000)).toBe(1);
      expected.delete(id('dead-old'));
      expect(await statuses(quote(table))).toEqual(expected);

      // The limit bounds one call.
      expect(await operator.outbox.purgeDead(0, 1)).toBe(1);
      expect([...(await statuses(quote(table))).values()].filter((s) => s === 'dead')).toHaveLength(
        1,
      );

      expect(await operator.outbox.purgeDead()).toBe(1);
      expect(await operator.outbox.purgeDead()).toBe(0);
      expected.delete(id('dead-young-1'));
      expected.delete(id('dead-young-2'));
      expect(await statuses(quote(table))).toEqual(expected);
      expect(await operator.outbox.stats()).toMatchObject({ dead: 0, delivered: 1 });
    });

    // 5. The schema option ---------------------------------------------------------------

    if (db.name === 'sqlite') {
      it('on SQLite the schema option is ignored: enqueue, dispatch and stats use the table of the main database', async () => {
        const table = await freshTable('outbox_sc');
        const schema = `outbox_s_${suffix()}`;
        const publisher = new RecordingPublisher();
        const app = await dispatcherApp(table, publisher, { schema });
        const ids = await app.commit([msg('a'), msg('b'), msg(null)]);
        expect(await app.outbox.stats()).toMatchObject({ pending: 3, delivered: 0 });
        expect(await app.dispatcher.drain()).toBe(3);
        expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
        expect(await statuses(quote(table))).toEqual(new Map(ids.map((i) => [i, 'delivered'])));
        expect(await app.outbox.stats()).toMatchObject({ pending: 0, delivered: 3 });
      });
    } else {
      const what = db.name === 'postgres' ? 'a PostgreSQL schema' : 'a MariaDB database';
      it(`the schema option puts the table in ${what}: enqueue, dispatch and stats use it, and a table of the same name in the default schema is left alone`, async () => {
        const schema = db.name === 'postgres' ? `outbox_s_${suffix()}` : `outbox_db_${suffix()}`;
        if (db.name === 'postgres') {
          await ds.query(`CREATE SCHEMA ${quote(schema)}`);
          cleanups.push(() => ds.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`));
        } else {
          await ds.query(`CREATE DATABASE ${quote(schema)}`);
          cleanups.push(() => ds.query(`DROP DATABASE IF EXISTS ${quote(schema)}`));
        }
        // The same table name in both places; the default one gets two messages of its own.
        const table = await freshTable('outbox_sc');
        await ensureOutboxTable(ds, { tableName: table, schema });
        const qualified = `${quote(schema)}.${quote(table)}`;
        const decoy = await enqueuer(table);
        const decoyIds = await decoy.commit([msg('decoy'), msg(null, { decoy: true })]);
        const decoyBefore = await readOutbox(ds, table);

        const publisher = new RecordingPublisher();
        const app = await dispatcherApp(table, publisher, { schema });
        const ids = await app.commit([msg('a'), msg('b'), msg('a'), msg(null)]);
        expect(await statuses(qualified)).toEqual(new Map(ids.map((i) => [i, 'pending'])));
        expect(await app.outbox.stats()).toMatchObject({ pending: 4, delivered: 0, dead: 0 });

        expect(await app.dispatcher.drain()).toBe(4);
        expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
        expect(publisher.sentForKey('a')).toEqual([ids[0], ids[2]]);
        expect(await statuses(qualified)).toEqual(new Map(ids.map((i) => [i, 'delivered'])));
        expect(await app.outbox.stats()).toMatchObject({ pending: 0, delivered: 4, dead: 0 });

        // The default schema's table: exactly what the decoy wrote, untouched by the app.
        expect(await readOutbox(ds, table)).toEqual(decoyBefore);
        expect(decoyBefore.map((r) => [r.messageId, r.status, r.lockedBy])).toEqual(
          decoyIds.map((i) => [i, 'pending', null]),
        );
        for (const decoyId of decoyIds) expect(publisher.attemptsOf(decoyId)).toBe(0);
      });
    }

    it('refuses a schema that is not a plain identifier at bootstrap', async () => {
      const table = await freshTable();
      await expect(enqueuer(table, { schema: 'events; DROP TABLE x' })).rejects.toThrow(/schema/);
    });
  });
}
