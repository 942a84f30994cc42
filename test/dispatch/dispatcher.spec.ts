import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { OutboxCleaner, OutboxDispatcher, OutboxModule, OutboxService, OutboxUnlocker, PermanentPublishError, ensureOutboxTable, type OutboxBatchReport, type OutboxMessage, type OutboxModuleOptions } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import { type OutboxStore } from '../../lib/store/outbox-store.port';
import {
  readOutbox,
  TEST_DATABASES,
  TestOrder,
  uniqueTable,
  type OutboxRow,
} from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, resolvesWithin, waitFor } from '../support/wait-for';

// Functional behaviour of the dispatcher, unlocker and cleaner against each real database. The
// broker is the in-memory RecordingPublisher here; delivery proofs over a real transport live in
// dispatcher-faults.spec.ts.

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

type Overrides = Omit<Partial<OutboxModuleOptions>, 'dataSource' | 'publisher'>;

interface Harness {
  readonly table: string;
  readonly moduleRef: TestingModule;
  readonly outbox: OutboxService;
  readonly dispatcher: OutboxDispatcher;
  readonly cleaner: OutboxCleaner;
  readonly unlocker: OutboxUnlocker;
  readonly store: OutboxStore;
  readonly instanceId: string;
  rows(): Promise<OutboxRow[]>;
  row(messageId: string): Promise<OutboxRow>;
  /** Enqueues the messages in one committed transaction (with a business row); resolves to their ids. */
  commit(messages: OutboxMessage[]): Promise<string[]>;
  /** Runs batches until one claims nothing. */
  runUntilIdle(): Promise<OutboxBatchReport[]>;
  /** Milliseconds until the message is due, on the database clock. */
  dueInMs(messageId: string): Promise<number>;
  /** The database clock now, in ms since the epoch. */
  dbNowMs(): Promise<number>;
  /** When the message is next due (`available_at`), in ms since the epoch on the database clock. */
  dueAtMs(messageId: string): Promise<number>;
  /** Milliseconds until the last lease held by `owner` expires (negative once all have), database clock. */
  leaseLeftMs(owner: string): Promise<number>;
  /** Age of the most recently delivered row, on the database clock. */
  youngestDeliveredAgeMs(): Promise<number>;
  close(): Promise<void>;
}

const msg = (
  key: string | null,
  payload: Record<string, unknown> = {},
  extra: Partial<OutboxMessage> = {},
): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload,
  ...extra,
});

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `dispatcher on ${db.name}`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_db');
    const open: Harness[] = [];
    const tables: string[] = [];
    const quote = (t: string) => (db.name === 'mariadb' ? `\`${t}\`` : `"${t}"`);

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });

    afterEach(async () => {
      for (const h of open.splice(0)) await h.close();
      for (const t of tables.splice(0)) {
        if (db.name === 'mariadb') await ds.query(`DROP TABLE IF EXISTS \`${t}_key_lock\``);
        await ds.query(`DROP TABLE IF EXISTS ${quote(t)}`);
      }
    });

    afterAll(async () => {
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    const dueSql = (): string => {
      switch (db.name) {
        case 'postgres':
          return 'extract(epoch FROM (available_at - now())) * 1000';
        case 'mariadb':
          return 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at) / 1000';
        default:
          return "(julianday(available_at) - julianday('now')) * 86400000.0";
      }
    };

    /** A timestamp expression as ms since the epoch, on the database's own clock. */
    const epochMs = (expression: string): string => {
      switch (db.name) {
        case 'postgres':
          return `(extract(epoch FROM ${expression}) * 1000)`;
        case 'mariadb':
          return `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${expression}) / 1000)`;
        default:
          return `((julianday(${expression}) - 2440587.5) * 86400000.0)`;
      }
    };
    const nowExpression =
      db.name === 'postgres' ? 'now()' : db.name === 'mariadb' ? 'UTC_TIMESTAMP(6)' : "'now'";

    async function boot(
      publisher: RecordingPublisher,
      overrides: Overrides = {},
    ): Promise<Harness> {
      const table = uniqueTable('outbox_d');
      tables.push(table);
      await ensureOutboxTable(ds, { tableName: table });
      const instanceId = `dispatcher-${table}`;
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: ds,
            tableName: table,
            publisher,
            instanceId,
            autoStart: false,
            ...overrides,
            dispatcher: {
              pollIntervalMs: 50,
              batchSize: 50,
              leaseMs: 10_000,
              shutdownTimeoutMs: 2_000,
              ...overrides.dispatcher,
            },
            retry: {
              maxAttempts: 5,
              initialDelayMs: 300,
              factor: 2,
              jitter: 0,
              ...overrides.retry,
            },
          }),
        ],
      }).compile();
      moduleRef.useLogger(['error', 'fatal']);
      await moduleRef.init();
      let closed = false;
      const dispatcher = moduleRef.get(OutboxDispatcher);
      const outbox = moduleRef.get(OutboxService);
      const harness: Harness = {
        table,
        moduleRef,
        outbox,
        dispatcher,
        cleaner: moduleRef.get(OutboxCleaner),
        unlocker: moduleRef.get(OutboxUnlocker),
        store: moduleRef.get<OutboxStore>(OUTBOX_STORE),
        instanceId,
        rows: () => readOutbox(ds, table),
        async row(messageId) {
          const found = (await readOutbox(ds, table)).find((r) => r.messageId === messageId);
          if (found === undefined) throw new Error(`no row for ${messageId}`);
          return found;
        },
        commit: (messages) =>
          ds.transaction(async (manager) => {
            await manager.save(TestOrder, { customer: 'dispatcher-test' });
            return outbox.enqueue(messages, manager);
          }),
        async runUntilIdle() {
          const reports: OutboxBatchReport[] = [];
          for (let i = 0; i < 200; i++) {
            const report = await dispatcher.runOnce();
            reports.push(report);
            if (report.claimed === 0) return reports;
          }
          throw new Error('the dispatcher never ran out of work');
        },
        async dueInMs(messageId) {
          const idColumn = db.name === 'postgres' ? 'message_id::text' : 'message_id';
          const [row] = await ds.query<{ due: string | number }[]>(
            `SELECT ${dueSql()} AS due FROM ${quote(table)} WHERE ${idColumn} = ${db.name === 'postgres' ? '$1' : '?'}`,
            [messageId],
          );
          return Number(row?.due);
        },
        async dbNowMs() {
          const [row] = await ds.query<{ now_ms: string | number }[]>(
            `SELECT ${epochMs(nowExpression)} AS now_ms`,
          );
          return Number(row?.now_ms);
        },
        async dueAtMs(messageId) {
          const idColumn = db.name === 'postgres' ? 'message_id::text' : 'message_id';
          const [row] = await ds.query<{ due_at: string | number }[]>(
            `SELECT ${epochMs('available_at')} AS due_at FROM ${quote(table)} WHERE ${idColumn} = ${db.name === 'postgres' ? '$1' : '?'}`,
            [messageId],
          );
          return Number(row?.due_at);
        },
        async leaseLeftMs(owner) {
          const [row] = await ds.query<{ left_ms: string | number | null }[]>(
            `SELECT MAX(${epochMs('locked_until')}) - ${epochMs(nowExpression)} AS left_ms FROM ${quote(table)} WHERE locked_by = ${db.name === 'postgres' ? '$1' : '?'}`,
            [owner],
          );
          return Number(row?.left_ms ?? Number.NEGATIVE_INFINITY);
        },
        async youngestDeliveredAgeMs() {
          const [row] = await ds.query<{ age_ms: string | number | null }[]>(
            `SELECT ${epochMs(nowExpression)} - MAX(${epochMs('delivered_at')}) AS age_ms FROM ${quote(table)} WHERE status = 'delivered'`,
          );
          return Number(row?.age_ms ?? Number.NaN);
        },
        async close() {
          if (closed) return;
          closed = true;
          await moduleRef.close();
        },
      };
      open.push(harness);
      return harness;
    }

    const published = (reports: readonly OutboxBatchReport[]) =>
      reports.reduce((n, r) => n + r.published, 0);

    it('publishes every committed message exactly once, in per-key commit order, and never a rolled-back one', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { dispatcher: { batchSize: 7 } });
      const committed: string[] = [];
      const byKey = new Map<string | null, string[]>();
      for (let tx = 0; tx < 5; tx++) {
        const messages = Array.from({ length: 8 }, (_, i) =>
          msg(i % 4 === 3 ? null : `k${(tx + i) % 3}`, { tx, i }),
        );
        const ids = await h.commit(messages);
        committed.push(...ids);
        ids.forEach((id, i) => {
          const key = messages[i]?.key as string | null;
          byKey.set(key, [...(byKey.get(key) ?? []), id]);
        });
      }
      const rolledBack: string[] = [];
      for (let tx = 0; tx < 2; tx++) {
        await expect(
          ds.transaction(async (manager) => {
            await manager.save(TestOrder, { customer: 'rolled-back' });
            rolledBack.push(
              ...(await h.outbox.enqueue(
                [msg('k0', { ghost: tx }), msg(null, { ghost: tx })],
                manager,
              )),
            );
            throw new Error('business failure after enqueue');
          }),
        ).rejects.toThrow('business failure after enqueue');
      }
      expect(rolledBack).toHaveLength(4);

      const reports = await h.runUntilIdle();
      expect(published(reports)).toBe(committed.length);
      expect(publisher.sentIds).toHaveLength(committed.length);
      expect(new Set(publisher.sentIds).size).toBe(committed.length);
      expect([...publisher.sentIds].sort()).toEqual([...committed].sort());
      for (const ghost of rolledBack) expect(publisher.attemptsOf(ghost)).toBe(0);
      for (const [key, ids] of byKey)
        if (key !== null) expect(publisher.sentForKey(key)).toEqual(ids);

      const rows = await h.rows();
      expect(rows).toHaveLength(committed.length);
      expect(
        rows.every(
          (r) =>
            r.status === 'delivered' &&
            // The claim counts the attempt that delivered it.
            r.attempts === 1 &&
            r.lockedBy === null &&
            r.lastError === null,
        ),
      ).toBe(true);

      // Nothing is due any more: another run publishes nothing.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0, published: 0 });
      expect(publisher.sent).toHaveLength(committed.length);
    });

    it('delivers on its own when autoStart is on', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 100, batchSize: 5 },
      });
      const ids: string[] = [];
      for (let tx = 0; tx < 4; tx++)
        ids.push(
          ...(await h.commit(Array.from({ length: 6 }, (_, i) => msg(`k${i % 2}`, { tx, i })))),
        );
      await publisher.until((p) => p.sent.length >= ids.length, 15_000, `${ids.length} deliveries`);
      await waitFor('every row settled as delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
      expect((await h.rows()).map((r) => r.status)).toEqual(ids.map(() => 'delivered'));
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      expect(publisher.sentForKey('k0')).toEqual(ids.filter((_, i) => (i % 6) % 2 === 0));
      expect(publisher.sentForKey('k1')).toEqual(ids.filter((_, i) => (i % 6) % 2 === 1));
    });

    it('never stalls an enqueuing transaction that is open while the dispatcher runs', async () => {
      // The dispatcher polls every 20 ms while each transaction stays open across awaits; on
      // SQLite that means its claims and settles meet a held write lock again and again. A
      // dispatcher that blocked the event loop while waiting for that lock would hold up the
      // transaction that owns it until its own wait failed: a failed claim (an outage report), a
      // failed settle (the message published twice), or a failed business transaction.
      const publisher = new RecordingPublisher();
      const outages: unknown[] = [];
      const h = await boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 20 },
        observer: { onOutage: (error) => outages.push(error) },
      });
      const ids: string[] = [];
      for (let tx = 0; tx < 10; tx++) {
        ids.push(
          ...(await ds.transaction(async (manager) => {
            await manager.save(TestOrder, { customer: 'open-while-dispatching' });
            await sleep(40); // held open across awaits, not an ordering
            return h.outbox.enqueue([msg(`k${tx % 3}`, { tx })], manager);
          })),
        );
      }
      await publisher.until((p) => p.sent.length >= ids.length, 10_000, 'every message');
      await waitFor('every row settled as delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      expect(outages).toEqual([]);
    });

    it('publishes nothing with autoStart false until runOnce()', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { autoStart: false });
      const ids = await h.commit([msg('a'), msg('b'), msg(null)]);
      // Nothing runs the dispatcher, so nothing can publish in this window (eight poll intervals).
      await expectNever('a publish before runOnce()', () => publisher.calls.length > 0, 400);
      expect(publisher.calls).toHaveLength(0);
      expect((await h.rows()).every((r) => r.status === 'pending' && r.lockedBy === null)).toBe(
        true,
      );
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 3, published: 3 });
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
    });

    it('drains a one-key backlog in order without waiting a poll interval per message', async () => {
      // Only a key's head is claimable, so each batch holds one message of the key; the next one
      // is due as soon as the head settles, not one poll interval later.
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 60_000, batchSize: 10 },
      });
      // runOnce() waits for the first (empty) run of start(); from here on only the commit
      // nudge and the drain can publish before the next poll, 60 s away.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      const ids = await h.commit(Array.from({ length: 25 }, (_, i) => msg('hot', { i })));
      await publisher.until((p) => p.sent.length >= ids.length, 10_000, 'the one-key backlog');
      expect(publisher.sentForKey('hot')).toEqual(ids);
      // drain() likewise runs until nothing is due.
      const more = await h.commit(Array.from({ length: 5 }, (_, i) => msg('hot', { i })));
      await publisher.until(
        (p) => p.sent.length >= ids.length + more.length,
        10_000,
        'the second backlog',
      );
      const manual = await boot(new RecordingPublisher(), { autoStart: false });
      await manual.commit(Array.from({ length: 8 }, (_, i) => msg('hot', { i })));
      expect(await manual.dispatcher.drain()).toBe(8);
    });

    it('retries a failing message with backoff and dead-letters it after maxAttempts', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        retry: { maxAttempts: 3, initialDelayMs: 300, factor: 2, jitter: 0 },
      });
      const [bad, good] = (await h.commit([msg('bad'), msg('good')])) as [string, string];
      publisher.fail(bad, 'retryable', { error: new Error('broker said no') });

      const beforeSettle = await h.dbNowMs();
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 2,
        published: 1,
        retried: 1,
        deadLettered: 0,
      });
      const afterSettle = await h.dbNowMs();
      // Backing off: not claimable yet (claimed straight after the settle, 300 ms before due).
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      expect(await h.row(bad)).toMatchObject({
        status: 'pending',
        attempts: 1,
        lockedBy: null,
        lastError: expect.stringContaining('broker said no'),
      });
      expect(await h.row(good)).toMatchObject({ status: 'delivered', attempts: 1 });
      // available_at = settle time + 300 ms (jitter 0), on the database clock; the settle ran
      // between the two clock readings (1 ms of slack for SQLite's millisecond timestamps).
      let dueAt = await h.dueAtMs(bad);
      expect(dueAt - beforeSettle).toBeGreaterThanOrEqual(300 - 1);
      expect(dueAt - afterSettle).toBeLessThanOrEqual(300 + 1);

      await waitFor('the first retry to be due', async () => (await h.dueInMs(bad)) <= 0);
      const beforeSecond = await h.dbNowMs();
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, retried: 1 });
      const afterSecond = await h.dbNowMs();
      expect(await h.row(bad)).toMatchObject({ status: 'pending', attempts: 2 });
      // The second delay doubles: 600 ms.
      dueAt = await h.dueAtMs(bad);
      expect(dueAt - beforeSecond).toBeGreaterThanOrEqual(600 - 1);
      expect(dueAt - afterSecond).toBeLessThanOrEqual(600 + 1);

      await waitFor('the second retry to be due', async () => (await h.dueInMs(bad)) <= 0);
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, deadLettered: 1 });
      expect(await h.row(bad)).toMatchObject({
        status: 'dead',
        attempts: 3,
        lockedBy: null,
        lastError: expect.stringContaining('broker said no'),
      });
      expect(publisher.attemptsOf(bad)).toBe(3);
      expect(publisher.sentIds).toEqual([good]);
      // A dead message stays dead.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
    });

    it('dead-letters a PermanentPublishError at once', async () => {
      const publisher = new RecordingPublisher();
      const deadLetters: string[] = [];
      const h = await boot(publisher, {
        observer: { onDeadLetter: (record) => deadLetters.push(record.messageId) },
      });
      const [poison, fine] = (await h.commit([msg('p'), msg('f')])) as [string, string];
      publisher.fail(poison, 'permanent', { error: new PermanentPublishError('schema rejected') });
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 2,
        published: 1,
        deadLettered: 1,
        retried: 0,
      });
      expect(await h.row(poison)).toMatchObject({
        status: 'dead',
        attempts: 1,
        lockedBy: null,
        lastError: expect.stringContaining('schema rejected'),
      });
      expect(await h.row(fine)).toMatchObject({ status: 'delivered' });
      expect(deadLetters).toEqual([poison]);
      expect(publisher.attemptsOf(poison)).toBe(1);
    });

    it('dead-letters at once when retryIf returns false, and retries when it returns true', async () => {
      const publisher = new RecordingPublisher();
      const seen: string[] = [];
      const h = await boot(publisher, {
        retry: {
          retryIf: (error, record) => {
            seen.push(record.messageId);
            return !(error instanceof Error && error.message.includes('invalid'));
          },
        },
      });
      const [invalid, flaky] = (await h.commit([msg('i'), msg('f')])) as [string, string];
      publisher.fail(invalid, 'retryable', {
        error: new Error('invalid payload for this exchange'),
      });
      publisher.fail(flaky, 'retryable', { error: new Error('temporarily overloaded') });
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 2,
        deadLettered: 1,
        retried: 1,
      });
      expect(await h.row(invalid)).toMatchObject({ status: 'dead', attempts: 1 });
      expect(await h.row(flaky)).toMatchObject({ status: 'pending', attempts: 1 });
      expect(seen.sort()).toEqual([invalid, flaky].sort());
    });

    it('holds the later messages of a key while its head backs off, while other keys flow', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { retry: { initialDelayMs: 500, jitter: 0 } });
      // One transaction per message, keys interleaved: commit order A1 B1 A2 B2 A3 B3.
      const ids: Record<string, string> = {};
      for (const name of ['A1', 'B1', 'A2', 'B2', 'A3', 'B3'])
        ids[name] = (await h.commit([msg(name[0] as string, { name })]))[0] as string;
      publisher.fail(ids.A1 as string, 'retryable', { times: 1 });

      const first = await h.runUntilIdle();
      expect(published(first)).toBe(3);
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(publisher.sentForKey('A')).toEqual([]);
      // A2 and A3 were never even handed to the publisher while A1 backs off.
      expect(publisher.attemptsOf(ids.A2 as string)).toBe(0);
      expect(publisher.attemptsOf(ids.A3 as string)).toBe(0);
      expect(await h.row(ids.A1 as string)).toMatchObject({ status: 'pending', attempts: 1 });
      // Parked behind A1: out of the claim's way until A1 is done.
      expect(await h.row(ids.A2 as string)).toMatchObject({
        status: 'waiting',
        attempts: 0,
        lockedBy: null,
      });

      await waitFor('A1 to be due again', async () => (await h.dueInMs(ids.A1 as string)) <= 0);
      const second = await h.runUntilIdle();
      expect(published(second)).toBe(3);
      expect(publisher.sentForKey('A')).toEqual([ids.A1, ids.A2, ids.A3]);
      expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
    });

    it("with onDeadLetter 'block', a dead head keeps holding its key until an operator requeues it", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { ordering: { onDeadLetter: 'block' } });
      const ids: Record<string, string> = {};
      for (const name of ['A1', 'B1', 'A2', 'B2', 'A3', 'B3'])
        ids[name] = (await h.commit([msg(name[0] as string, { name })]))[0] as string;
      publisher.fail(ids.A1 as string, 'permanent');

      await h.runUntilIdle();
      await h.runUntilIdle();
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(publisher.sentForKey('A')).toEqual([]);
      expect(await h.row(ids.A1 as string)).toMatchObject({ status: 'dead', attempts: 1 });
      for (const later of [ids.A2, ids.A3] as string[]) {
        expect(await h.row(later)).toMatchObject({
          status: 'waiting',
          attempts: 0,
          lockedBy: null,
        });
        expect(publisher.attemptsOf(later)).toBe(0);
      }

      publisher.heal();
      expect(await h.outbox.retryDead()).toBe(1);
      await h.runUntilIdle();
      expect(publisher.sentForKey('A')).toEqual([ids.A1, ids.A2, ids.A3]);
      expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
    });

    it("with onDeadLetter 'skip', the later messages of a dead head flow in order", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { ordering: { onDeadLetter: 'skip' } });
      const ids: Record<string, string> = {};
      for (const name of ['A1', 'B1', 'A2', 'B2', 'A3', 'B3'])
        ids[name] = (await h.commit([msg(name[0] as string, { name })]))[0] as string;
      publisher.fail(ids.A1 as string, 'permanent');

      await h.runUntilIdle();
      expect(publisher.sentForKey('A')).toEqual([ids.A2, ids.A3]);
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(await h.row(ids.A1 as string)).toMatchObject({ status: 'dead' });
    });

    if (db.name !== 'sqlite') {
      // SQLite serialises writers, so two enqueuing transactions cannot interleave there.
      it('publishes a key in commit order when enqueuing transactions overlap', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher);
        const signal = () => {
          let fire!: () => void;
          const fired = new Promise<void>((resolve) => (fire = resolve));
          return { fire, fired };
        };
        const t1Enqueued = signal();
        const t1MayCommit = signal();
        const t2Enqueuing = signal();
        let firstId = '';
        let secondId = '';
        let secondDone = false;
        // T1 enqueues K first and holds its transaction open; T2 enqueues K meanwhile.
        const t1 = ds.transaction(async (m) => {
          firstId = (await h.outbox.enqueue([msg('K', { n: 1 })], m))[0] as string;
          t1Enqueued.fire();
          await t1MayCommit.fired;
        });
        await t1Enqueued.fired;
        const t2 = ds
          .transaction(async (m) => {
            await m.save(TestOrder, { customer: 'second' });
            t2Enqueuing.fire();
            secondId = (await h.outbox.enqueue([msg('K', { n: 2 })], m))[0] as string;
          })
          .then(() => (secondDone = true));
        await t2Enqueuing.fired;
        // T2 waits on K's enqueue lock until T1 commits: it cannot finish in this window.
        await expectNever('T2 committing while T1 holds K', () => secondDone, 300);
        expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
        t1MayCommit.fire();
        await Promise.all([t1, t2]);

        // A transaction that began earlier but commits later is published later: the slow one
        // begins, the fast one begins, enqueues and commits, then the slow one enqueues and commits.
        const slowBegan = signal();
        const fastCommitted = signal();
        let late = '';
        let early = '';
        const slow = ds.transaction(async (m) => {
          await m.save(TestOrder, { customer: 'slow' });
          slowBegan.fire();
          await fastCommitted.fired;
          late = (await h.outbox.enqueue([msg('L', { n: 'late' })], m))[0] as string;
        });
        await slowBegan.fired;
        await ds.transaction(async (m) => {
          early = (await h.outbox.enqueue([msg('L', { n: 'early' })], m))[0] as string;
        });
        fastCommitted.fire();
        await slow;

        await h.runUntilIdle();
        expect(publisher.sentForKey('K')).toEqual([firstId, secondId]);
        expect(publisher.sentForKey('L')).toEqual([early, late]);
      });
    }

    it('holds delayed messages until due and publishes a past availableAt at once', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const [now] = await h.commit([msg(null, { when: 'now' })]);
      const [delayed] = await h.commit([msg(null, { when: 'delayed' }, { delayMs: 1_000 })]);
      const [past] = await h.commit([
        msg(null, { when: 'past' }, { availableAt: new Date(Date.now() - 60_000) }),
      ]);
      const [future] = await h.commit([
        msg(null, { when: 'future' }, { availableAt: new Date(Date.now() + 1_000) }),
      ]);

      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 2, published: 2 });
      expect([...publisher.sentIds].sort()).toEqual([now, past].sort());
      expect(await h.row(delayed as string)).toMatchObject({ status: 'pending', attempts: 0 });
      expect(await h.row(future as string)).toMatchObject({ status: 'pending', attempts: 0 });

      await waitFor(
        'the delayed and the future message to be due',
        async () =>
          (await h.dueInMs(delayed as string)) <= 0 && (await h.dueInMs(future as string)) <= 0,
      );
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 2, published: 2 });
      expect([...publisher.sentIds].sort()).toEqual([now, past, delayed, future].sort());
    });

    it('deletes delivered rows at settle when the delivered retention is 0', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { cleaner: { deliveredRetentionMs: 0 } });
      const ids = await h.commit([msg('a'), msg('b'), msg(null), msg('retry'), msg('dead')]);
      publisher.fail(ids[3] as string, 'retryable');
      publisher.fail(ids[4] as string, 'permanent');
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 5,
        published: 3,
        retried: 1,
        deadLettered: 1,
      });
      const rows = await h.rows();
      expect(rows.map((r) => [r.messageId, r.status])).toEqual([
        [ids[3], 'pending'],
        [ids[4], 'dead'],
      ]);
    });

    it('the cleaner purges delivered rows past retention and keeps dead ones', async () => {
      const publisher = new RecordingPublisher();
      const purged: [string, number][] = [];
      const h = await boot(publisher, {
        cleaner: { deliveredRetentionMs: 1_000 },
        observer: { onPurged: (status, count) => purged.push([status, count]) },
      });
      const ids = await h.commit([msg('a'), msg('b'), msg('c'), msg('d'), msg('poison')]);
      publisher.fail(ids[4] as string, 'permanent');
      await h.runUntilIdle();
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
      expect(await h.rows()).toHaveLength(5);
      await waitFor(
        'every delivered row to be older than the retention',
        async () => (await h.youngestDeliveredAgeMs()) > 1_000,
        { intervalMs: 50 },
      );
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 4, dead: 0 });
      expect((await h.rows()).map((r) => [r.messageId, r.status])).toEqual([[ids[4], 'dead']]);
      expect(purged).toEqual([['delivered', 4]]);
    });

    it('the unlocker releases expired leases and leaves live ones alone', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const ids = await h.commit([msg('a'), msg('b'), msg('c')]);
      // A dispatcher that crashed after claiming two messages, and a live one holding the third.
      const crashed = await h.store.claim({
        limit: 2,
        owner: 'crashed-dispatcher',
        leaseMs: 1_000,
      });
      expect(crashed.records.map((r) => r.messageId)).toEqual(ids.slice(0, 2));
      const alive = await h.store.claim({
        limit: 5,
        owner: 'live-dispatcher',
        leaseMs: 60_000,
      });
      expect(alive.records.map((r) => r.messageId)).toEqual(ids.slice(2));
      expect(await h.unlocker.runOnce()).toBe(0);
      expect((await h.rows()).map((r) => r.lockedBy)).toEqual([
        'crashed-dispatcher',
        'crashed-dispatcher',
        'live-dispatcher',
      ]);

      await waitFor(
        "the crashed dispatcher's leases to expire",
        async () => (await h.leaseLeftMs('crashed-dispatcher')) < 0,
        { intervalMs: 50 },
      );
      expect(await h.unlocker.runOnce()).toBe(2);
      const rows = await h.rows();
      // The crashed claims still count: a message that keeps crashing its dispatchers ends dead.
      expect(rows.map((r) => [r.lockedBy, r.status, r.attempts])).toEqual([
        [null, 'pending', 1],
        [null, 'pending', 1],
        ['live-dispatcher', 'pending', 1],
      ]);
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 2, published: 2 });
      expect([...publisher.sentIds].sort()).toEqual(ids.slice(0, 2).sort());
    });

    it('retryDead() requeues dead messages, which are then delivered', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const [poison, other] = (await h.commit([msg('p'), msg('o')])) as [string, string];
      publisher.fail(poison, 'permanent');
      await h.runUntilIdle();
      expect(await h.outbox.stats()).toMatchObject({
        pending: 0,
        leased: 0,
        delivered: 1,
        dead: 1,
      });

      publisher.heal();
      expect(await h.outbox.retryDead()).toBe(1);
      expect(await h.row(poison)).toMatchObject({
        status: 'pending',
        attempts: 0,
        lastError: null,
        lockedBy: null,
      });
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 1 });
      expect(await h.row(poison)).toMatchObject({ status: 'delivered' });
      expect(publisher.sentIds).toEqual([other, poison]);
      expect(await h.outbox.retryDead()).toBe(0);
    });

    it('retryDead(messageIds) requeues only the named dead messages', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const [first, second] = (await h.commit([msg('a'), msg('b')])) as [string, string];
      publisher.fail(first, 'permanent');
      publisher.fail(second, 'permanent');
      await h.runUntilIdle();
      expect(await h.outbox.stats()).toMatchObject({ dead: 2 });

      publisher.heal();
      expect(await h.outbox.retryDead([second, '00000000-0000-7000-8000-000000000000'])).toBe(1);
      expect(await h.outbox.retryDead([])).toBe(0);
      await h.runUntilIdle();
      expect(await h.row(first)).toMatchObject({ status: 'dead' });
      expect(await h.row(second)).toMatchObject({ status: 'delivered' });
    });

    it('releases the leases of a hung publish on shutdown within shutdownTimeoutMs', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        // Publish timeout and lease far beyond the test: only the shutdown timeout can end the hung publish.
        dispatcher: { shutdownTimeoutMs: 300, leaseMs: 600_000, publishTimeoutMs: 300_000 },
      });
      const ids = await h.commit([msg('a'), msg('b'), msg(null), msg(null)]);
      publisher.fail(() => true, 'hang');
      const run = h.dispatcher.runOnce();
      await publisher.until((p) => p.hanging === 1, 5_000, 'the publish to hang');
      expect((await h.rows()).map((r) => r.lockedBy)).toEqual(ids.map(() => h.instanceId));

      const started = Date.now();
      await resolvesWithin('close() with a hung publish', h.close(), 15_000);
      // In-flight publishes got their grace period before being aborted.
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(await run).toMatchObject({
        claimed: 4,
        published: 0,
        released: 4,
        retried: 0,
        fenced: 0,
      });
      expect((await h.rows()).map((r) => [r.status, r.lockedBy, r.attempts])).toEqual(
        ids.map(() => ['pending', null, 0]),
      );
      expect(publisher.sent).toHaveLength(0);
      expect(publisher.closed).toBe(true);
    });

    it('stores last_error with the credentials of URLs redacted', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const [id] = (await h.commit([msg('x')])) as [string];
      publisher.fail(id, 'retryable', {
        error: new Error(
          'cannot open amqp://user:secret@rabbit.internal:5672/vhost (password=hunter2)',
        ),
      });
      await h.dispatcher.runOnce();
      const row = await h.row(id);
      expect(row.lastError).toContain('amqp://user:***@rabbit.internal:5672/vhost');
      expect(row.lastError).not.toContain('secret');
      expect(row.lastError).not.toContain('hunter2');
    });

    it('an outage burns no attempts, the dispatcher keeps trying, and the backlog drains after', async () => {
      const publisher = new RecordingPublisher().goDown();
      const pauses: number[] = [];
      const h = await boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 50, maxOutagePauseMs: 200, batchSize: 4 },
        observer: { onOutage: (_error, pauseMs) => pauses.push(pauseMs) },
      });
      const ids = await h.commit(Array.from({ length: 10 }, (_, i) => msg(`k${i % 3}`, { i })));
      await publisher.until(
        (p) => p.calls.length >= 5,
        10_000,
        'repeated publish attempts during the outage',
      );
      // The pause after each failed batch doubles from pollIntervalMs and is capped.
      expect(pauses.slice(0, 4)).toEqual([50, 100, 200, 200]);
      const during = await h.rows();
      // Released with the attempt given back, and the outage on record.
      // (A row may be mid-claim as it is read: that claim's attempt is given back in turn.)
      expect(during.every((r) => r.attempts === (r.lockedBy === null ? 0 : 1))).toBe(true);
      expect(during.some((r) => r.lastError?.includes('ECONNREFUSED') === true)).toBe(true);
      expect(publisher.sent).toHaveLength(0);

      publisher.comeBack();
      await publisher.until((p) => p.sent.length >= ids.length, 10_000, 'the backlog to drain');
      await waitFor('every row settled as delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
      const after = await h.rows();
      expect(after.map((r) => [r.status, r.attempts])).toEqual(ids.map(() => ['delivered', 1]));
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      for (const key of ['k0', 'k1', 'k2'])
        expect(publisher.sentForKey(key)).toEqual(ids.filter((_, i) => `k${i % 3}` === key));
    });

    it('a message "unavailable" while the rest of its batch went through counts a failed attempt and backs off', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        retry: { initialDelayMs: 200, jitter: 0 },
      });
      const [lost, ok] = (await h.commit([msg('l'), msg('o')])) as [string, string];
      publisher.fail(lost, 'unavailable', { times: 1 });
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 2,
        published: 1,
        released: 0,
        retried: 1,
      });
      expect(await h.row(lost)).toMatchObject({
        status: 'pending',
        attempts: 1,
        lockedBy: null,
        lastError: expect.stringContaining('PublisherUnavailableError'),
      });
      expect(await h.row(ok)).toMatchObject({ status: 'delivered' });
      // Backing off: not claimed again at once (the poison loop of the audit).
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      await waitFor('the retry to be due', async () => (await h.dueInMs(lost)) <= 0);
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 1 });
      expect(publisher.sentIds).toEqual([ok, lost]);
    });

    it('a whole batch failing with PublisherUnavailableError outcomes pauses claims without attempts', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        dispatcher: { pollIntervalMs: 200, maxOutagePauseMs: 200 },
      });
      const ids = await h.commit([msg('a'), msg('b')]);
      publisher.fail(() => true, 'unavailable', { times: 2 });
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 2, released: 2, published: 0 });
      // Paused: the next run does not even claim.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      expect(publisher.calls).toHaveLength(1);
      // Released with the attempt given back and the outage as last_error, due after the pause.
      expect((await h.rows()).map((r) => [r.status, r.attempts, r.lastError !== null])).toEqual(
        ids.map(() => ['pending', 0, true]),
      );
      // The pause is on the app's clock: run until claims resume.
      const resumed = await waitFor('claims to resume after the pause', async () => {
        const report = await h.dispatcher.runOnce();
        return report.claimed > 0 ? report : undefined;
      });
      expect(resumed).toMatchObject({ claimed: 2, published: 2 });
      expect((await h.rows()).map((r) => [r.status, r.attempts])).toEqual(
        ids.map(() => ['delivered', 1]),
      );
    });
  });
}
