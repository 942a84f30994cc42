import { ClientTCP } from '@nestjs/microservices';
import type { TestingModule } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import {
  type OutboxBatchReport,
  type OutboxDispatcherOptions,
  type OutboxMessage,
  type OutboxObserver,
  type OutboxPublisher,
} from '../../lib';
import {
  newOwnerKey,
  ownerHex,
  ownerToken,
  POSTGRES_OWNER_LOCK_CLASS,
} from '../../lib/store/shared-sql/owner-leases';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import type { ChildConfig } from '../support/children/child-protocol';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { readAttempts, readOutbox, serverConnection, type OutboxRow } from '../support/databases';
import { leasesHeldBy } from '../support/db-clock';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { CapturingLogger } from '../support/capturing-logger';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, resolvesWithin, sleep, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Crash, fencing, concurrency and outage (of the broker and of the database). Every delivery proof here goes through a real TCP
// socket (Nest's ClientTCP + the library's ClientProxyPublisher) to a consumer that records what
// arrives; the multi-dispatcher tests run each dispatcher in its own process.

const FULL = process.env.OUTBOX_FULL === '1';
/** Messages of the multi-process test: the full 20 000 under OUTBOX_FULL=1. */
const CONCURRENT_TOTAL = FULL ? 20_000 : 4_000;
const CONCURRENT_KEYS = 200;
const CONCURRENT_DISPATCHERS = 4;

/** Per key, the message ids in id (= commit) order, from the table. */
function idOrderByKey(rows: readonly OutboxRow[]): Map<string | null, string[]> {
  const byKey = new Map<string | null, string[]>();
  for (const r of rows) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.messageId]);
  return byKey;
}

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): a broker outage, over real TCP or in memory, loses nothing, burns no
// attempt, and the dispatcher survives it and drains the backlog when the broker is back. The
// log source leaves what it cannot publish during the outage to the table, swept every second.
for (const source of SOURCE_CASES) {
  describeSource(source, 'broker outages', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_f', options: CLAIM_LOOP });
    const src = useSource(scope, source);
    const swept = { sweepIntervalMs: 1_000 } as const;

    async function consumerOn(options: { ack?: boolean } = {}): Promise<TcpConsumer> {
      const consumer = new TcpConsumer(options);
      await consumer.start();
      // Tests stop and restart their consumer; a stop at the end may find it stopped already.
      scope.defer(() => consumer.stop().catch(() => undefined));
      return consumer;
    }

    it('survives a broker outage mid-run over real TCP: no attempts burnt, nothing lost, the backlog drains when it returns', async () => {
      const consumer = await consumerOn({ ack: true });
      const table = await scope.table();
      await src.prepare(table, swept);
      const writer = await scope.open({ table });
      const commit = (messages: OutboxMessage[]) => writer.enqueue(messages);
      let outages = 0;
      const batchSize = 20;
      const client = new ClientTCP({ host: '127.0.0.1', port: consumer.port });
      const app = await src.dispatcherApp(
        table,
        new ClientProxyPublisher(client, { timeoutMs: 2_000, closeClient: true, mode: 'send' }),
        {
          autoStart: true,
          instanceId: 'outage-survivor',
          dispatcher: {
            pollIntervalMs: 50,
            maxOutagePauseMs: 400,
            batchSize,
            leaseMs: 5_000,
            publishTimeoutMs: 3_000,
          },
          observer: { onOutage: () => (outages += 1) },
        },
      );
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
      const during = await readOutbox(scope.ds, table);
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
      await consumer.until(
        (c) => ids.every((id) => c.counts().has(id)),
        20_000,
        'the backlog after the outage',
      );
      const rows = await waitFor(
        'every row delivered',
        async () => {
          const all = await readOutbox(scope.ds, table);
          return all.every((r) => r.status === 'delivered') ? all : undefined;
        },
        { timeoutMs: 10_000, intervalMs: 100 },
      );
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
      expect(app.dispatcher.status()).toMatchObject({ started: true });
    });

    it('an outage burns no attempts, the dispatcher keeps trying, and the backlog drains after', async () => {
      const publisher = new RecordingPublisher().goDown();
      const pauses: number[] = [];
      const h = await src.boot(
        publisher,
        {
          autoStart: true,
          dispatcher: { pollIntervalMs: 50, maxOutagePauseMs: 200, batchSize: 4 },
          observer: { onOutage: (_error, pauseMs) => pauses.push(pauseMs) },
        },
        swept,
      );
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
  });
}

// Crashes, fencing, processes side by side and the database's own faults, on the poll: the log
// source's are in test/log-tailing/ (a killed reader, a cut or frozen one, a takeover). The
// sources project runs only the block above.
for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `dispatcher faults on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_f', options: CLAIM_LOOP });

    /** A fresh table and an enqueue-only module on it. */
    async function freshTable(): Promise<{
      table: string;
      commit(messages: OutboxMessage[]): Promise<string[]>;
    }> {
      const table = await scope.table();
      const app = await scope.open({ table });
      return { table, commit: (messages) => app.enqueue(messages) };
    }

    const { boot } = dispatchApps(scope);

    async function consumerOn(options: { ack?: boolean } = {}): Promise<TcpConsumer> {
      const consumer = new TcpConsumer(options);
      await consumer.start();
      // Tests stop and restart their consumer; a stop at the end may find it stopped already.
      scope.defer(() => consumer.stop().catch(() => undefined));
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
      const app = await scope.open({
        table,
        publisher: new ClientProxyPublisher(client, {
          timeoutMs: 2_000,
          closeClient: true,
          mode: options.ack === true ? 'send' : 'emit',
        }),
        logger: ['error', 'fatal'],
        options: {
          autoStart: true,
          instanceId: options.instanceId,
          dispatcher: { pollIntervalMs: 100, ...options.dispatcher },
          observer: options.observer,
        },
      });
      return app.moduleRef;
    }

    async function startChild(config: ChildConfig, timeoutMs?: number): Promise<DispatcherChild> {
      // The claim loop's children too: leases outlived, given back by a dead owner's lock.
      const child = await DispatcherChild.start(
        { ...config, dispatcher: { claims: 'leases', ...config.dispatcher } },
        timeoutMs,
      );
      // A child a test killed or stopped already has nothing left to kill.
      scope.defer(() => child.kill('SIGKILL').catch(() => undefined));
      return child;
    }

    /** The table's rows once every one is delivered; a timeout says how many are in each status. */
    async function untilAllDelivered(table: string, timeoutMs: number): Promise<OutboxRow[]> {
      let rows: OutboxRow[] = [];
      return waitFor(
        'every row delivered',
        async () => {
          rows = await readOutbox(scope.ds, table);
          return rows.every((r) => r.status === 'delivered') && rows;
        },
        {
          timeoutMs,
          intervalMs: 100,
          describeState: () => JSON.stringify(countByStatus(rows)),
        },
      );
    }

    const leasesOf = (table: string, owner: string) => leasesHeldBy(scope.ds, table, owner);

    /** Kills the one session that holds the owner lock of key `hex` (8 hex digits). */
    async function killOwnerLockSession(hex: string): Promise<void> {
      // Kill the session holding this owner's lock: only that one connection of the process.
      if (db.name === 'postgres') {
        const [holder] = await scope.ds.query<{ pid: number }[]>(
          `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = ${POSTGRES_OWNER_LOCK_CLASS} AND objsubid = 2 AND objid = $1`,
          [Number.parseInt(hex, 16)],
        );
        expect(holder).toBeDefined();
        await scope.ds.query('SELECT pg_terminate_backend($1)', [holder?.pid]);
      } else {
        const [holder] = await scope.ds.query<{ id: number | string | null }[]>(
          'SELECT IS_USED_LOCK(?) AS id',
          [`nestjs-outbox-owner-${hex}`],
        );
        const id = Number(holder?.id);
        expect(Number.isInteger(id) && id > 0).toBe(true);
        await scope.ds.query(`KILL CONNECTION ${id}`);
      }
    }

    const sqlitePath = (): string | undefined =>
      db.name === 'sqlite' ? String(scope.ds.options.database) : undefined;

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
      // The publish call that hung is one round of a leased batch (runs go out in rounds).
      const leased = leases.map((l) => l.messageId);
      expect(hanging.claimed.filter((id) => !leased.includes(id))).toEqual([]);
      expect(hanging.published.length).toBeGreaterThan(0);
      expect(hanging.published.length).toBeLessThan(hanging.claimed.length);
      const exit = await doomed.kill('SIGKILL');
      const killedAt = Date.now();
      expect(exit.signal).toBe('SIGKILL');
      const leaseEnds = Math.floor(leasesReadFrom + Math.max(...leases.map((l) => l.remainingMs)));
      // PostgreSQL and MariaDB free the dead child's owner lock with its session, and the
      // survivor takes the rows over before the lease ends (ARCHITECTURE.md "Takeover after a
      // crash"); SQLite runs one process, whose leases end with leaseMs.
      const takeoverFrom = db.name === 'sqlite' ? leaseEnds : killedAt;
      // What it handed to the socket before dying arrived; its rows are still leased to it.
      await consumer.until(
        (c) => hanging.published.every((id) => c.counts().has(id)),
        5_000,
        'the half batch the child sent',
      );
      expect((await leasesOf(table, 'doomed-child')).length).toBe(leased.length);
      const beforeTakeover = consumer.arrivals.length;

      await tcpDispatcher(table, consumer.port, {
        instanceId: 'survivor',
        dispatcher: { leaseMs: 1_500, pollIntervalMs: 100, batchSize: 50 },
      });
      await consumer.until((c) => ids.every((id) => c.counts().has(id)), 30_000, 'every message');
      const rows = await untilAllDelivered(table, 10_000);

      // Nothing lost; the only duplicates are messages the dead child sent but never settled.
      const counts = consumer.counts();
      expect(ids.filter((id) => !counts.has(id))).toEqual([]);
      expect(consumer.duplicates().sort()).toEqual([...hanging.published].sort());
      expect(Math.max(...counts.values())).toBe(2);
      // The survivor took the child's messages over only after the child's lease had expired
      // (SQLite) or its process had ended (its owner lock free).
      const claimed = new Set(leased);
      const takenOver = consumer.arrivals
        .slice(beforeTakeover)
        .filter((a) => claimed.has(a.messageId));
      expect(takenOver).toHaveLength(leased.length);
      for (const a of takenOver) expect(a.at).toBeGreaterThanOrEqual(takeoverFrom);
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

    // Fast takeover (ARCHITECTURE.md "Takeover after a crash"): a lease of 60 s that only the
    // dead process's freed owner lock can end early; the wait below is a third of it.
    (db.name === 'sqlite' ? it.skip : it)(
      'gives the leases of a SIGKILLed dispatcher back long before leaseMs: all delivered, per-key order, duplicates only of what it sent (not SQLite: one process)',
      async () => {
        const consumer = await consumerOn();
        const { table, commit } = await freshTable();
        const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
        const ids: string[] = [];
        for (let tx = 0; tx < 12; tx++)
          ids.push(...(await commit(keys.map((key) => msg(key, { tx })))));
        const slow = { leaseMs: 60_000, publishTimeoutMs: 20_000 } as const;
        const doomed = await startChild(
          {
            db: db.name,
            table,
            instanceId: 'doomed-owner',
            tcpPort: consumer.port,
            dispatcher: { ...slow, batchSize: 20, pollIntervalMs: 50, listen: false },
            hangAfter: 25,
          },
          // A child compiles the library as it starts: slow on a loaded machine.
          120_000,
        );
        const hanging = await doomed.waitFor('hanging', 20_000);
        const leased = (await leasesOf(table, 'doomed-owner')).map((l) => l.messageId);
        expect(leased.length).toBeGreaterThan(0);
        await doomed.kill('SIGKILL');

        await tcpDispatcher(table, consumer.port, {
          instanceId: 'survivor',
          dispatcher: { ...slow, pollIntervalMs: 100, batchSize: 50 },
        });
        await consumer.until((c) => ids.every((id) => c.counts().has(id)), 20_000, 'every message');
        const rows = await untilAllDelivered(table, 10_000);
        const counts = consumer.counts();
        expect(ids.filter((id) => !counts.has(id))).toEqual([]);
        // Published twice: only what the dead child had sent and not settled.
        expect(consumer.duplicates().sort()).toEqual([...hanging.published].sort());
        expect(Math.max(...counts.values())).toBe(2);
        const firsts = consumer.firstArrivalsByKey();
        for (const [key, order] of idOrderByKey(rows)) expect(firsts.get(key)).toEqual(order);
        expect(rows.every((r) => r.lockedBy === null)).toBe(true);
      },
      240_000,
    );

    // A live dispatcher whose owner-lock connection alone is killed (ARCHITECTURE.md "Takeover
    // after a crash", 6): it must stop publishing what it leased under that lock before anyone
    // else can claim it, give it back, and go on under a new lock.
    (db.name === 'sqlite' ? it.skip : it)(
      'a dispatcher whose owner-lock connection is killed stops publishing its batch and gives it back before another takes it (not SQLite: no owner lock)',
      async () => {
        const { table, commit } = await freshTable();
        const ids = await commit(Array.from({ length: 6 }, (_, i) => msg(`key-${i}`, { i })));
        const events: string[] = [];
        let hung = false;
        const stuck: OutboxPublisher = {
          // The first batch hangs until its signal aborts; later ones go through.
          publish: async (records, signal) => {
            if (hung) {
              for (const r of records) events.push(`a:${r.messageId}`);
              return records.map(() => ({ ok: true as const }));
            }
            hung = true;
            events.push('a:hanging');
            await new Promise<void>((done) =>
              signal.addEventListener('abort', () => done(), { once: true }),
            );
            events.push('a:aborted');
            throw new Error('aborted');
          },
        };
        const slow = { leaseMs: 60_000, publishTimeoutMs: 30_000, pollIntervalMs: 100 } as const;
        await scope.open({
          table,
          publisher: stuck,
          logger: ['error', 'fatal'],
          options: { autoStart: true, instanceId: 'cut-owner', dispatcher: slow },
        });
        await waitFor('the batch hanging', () => events.includes('a:hanging'));
        const [leased] = await leasesOf(table, 'cut-owner');
        expect(leased).toBeDefined();
        const tokens: { t: string }[] = await scope.ds.query(
          db.name === 'postgres'
            ? `SELECT lock_token::text AS t FROM "${table}" WHERE locked_by = 'cut-owner' LIMIT 1`
            : `SELECT lock_token AS t FROM \`${table}\` WHERE locked_by = 'cut-owner' LIMIT 1`,
        );
        // An owner lease: the lock's key, then a version-8 UUID.
        expect(tokens[0]?.t).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8/);
        await killOwnerLockSession(tokens[0]?.t.slice(0, 8) ?? '');
        const b = new RecordingPublisher();
        const bPublish = b.publish.bind(b);
        b.publish = (records, signal) => {
          for (const r of records) events.push(`b:${r.messageId}`);
          return bPublish(records, signal);
        };
        await scope.open({
          table,
          publisher: b,
          logger: ['error', 'fatal'],
          options: { autoStart: true, instanceId: 'other', dispatcher: slow },
        });
        await waitFor(
          'every message delivered',
          async () => (await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered'),
          { timeoutMs: 20_000 },
        );
        // The cut owner stopped before anyone else published one of its messages.
        const aborted = events.indexOf('a:aborted');
        expect(aborted).toBeGreaterThan(0);
        const firstOther = events.findIndex((e) => e.startsWith('b:'));
        if (firstOther !== -1) expect(firstOther).toBeGreaterThan(aborted);
        // Nothing published twice: its fenced batch went back unpublished.
        const published = events.filter((e) => e !== 'a:hanging' && e !== 'a:aborted');
        const byId = published.map((e) => e.slice(2));
        expect(new Set(byId).size).toBe(byId.length);
        expect([...byId].sort()).toEqual([...ids].sort());
        const rows = await readOutbox(scope.ds, table);
        expect(rows.every((r) => r.attempts >= 1 && r.attempts <= 2)).toBe(true);
      },
      120_000,
    );

    // Issue 75, item 12: the owner lock's fence ran on a timer only. A process whose event loop
    // is held up past the lock's validity, while its lock session ends, wakes with the rest of
    // its batch's rounds queued as promise jobs, which ran before the expiry timer could fence
    // them: they went out under a lock another dispatcher could already have taken over. The
    // validity is read on the clock before every send: the rest goes back unpublished and goes
    // out under a new lock.
    (db.name === 'sqlite' ? it.skip : it)(
      'a dispatcher held up past its owner lock validity, its lock session ended meanwhile, sends nothing more under that lock on waking (not SQLite: no owner lock)',
      async () => {
        const { table, commit } = await freshTable();
        // One key: m1 and m2 go out in two rounds of one batch, m2 only after m1 is answered.
        const ids = await commit([msg('k', { i: 1 }), msg('k', { i: 2 })]);
        const [m1, m2] = ids as [string, string];
        const tokenOf = async (id: string): Promise<string> => {
          const [row] = await scope.ds.query<{ t: string | null }[]>(
            db.name === 'postgres'
              ? `SELECT lock_token::text AS t FROM "${table}" WHERE id = $1`
              : `SELECT lock_token AS t FROM \`${table}\` WHERE id = ?`,
            [id],
          );
          return row?.t ?? '';
        };
        const sent: { id: string; token: string }[] = [];
        let stalled = false;
        const publisher: OutboxPublisher = {
          publish: async (records) => {
            for (const r of records) sent.push({ id: r.messageId, token: await tokenOf(r.id) });
            if (!stalled) {
              stalled = true;
              await killOwnerLockSession(sent[0]?.token.slice(0, 8) ?? '');
              // The event loop held up for twice the lock's validity (a long GC, SIGSTOP).
              Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_000);
            }
            return records.map(() => ({ ok: true as const }));
          },
        };
        await scope.open({
          table,
          publisher,
          logger: ['error', 'fatal'],
          options: {
            autoStart: true,
            instanceId: 'held-up',
            dispatcher: { leaseMs: 60_000, publishTimeoutMs: 30_000, pollIntervalMs: 100 },
          },
        });
        const rows = await untilAllDelivered(table, 20_000);
        expect(rows.map((r) => r.messageId).sort()).toEqual([...ids].sort());
        const first = sent.find((s) => s.id === m1);
        const later = sent.filter((s) => s.id === m2);
        expect(first?.token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8/);
        // m2 went out once, under a new owner lock, not under the one whose session ended.
        expect(later).toHaveLength(1);
        expect(later[0]?.token.slice(0, 8)).not.toBe(first?.token.slice(0, 8));
        expect(sent.filter((s) => s.id === m1)).toHaveLength(1);
      },
      60_000,
    );

    // What the others say of leases whose owner lock is free: a lock is freed by the end of its
    // process or of its connection alone, and the looker cannot tell which (the process may live
    // on under a new lock), so the line claims neither. Here the owner is this live process: its
    // lock's connection alone is killed, with its leases still on the rows.
    (db.name === 'sqlite' ? it.skip : it)(
      'the takeover line for a live owner whose lock connection was killed says its lock was released, not that its process ended (not SQLite: no owner lock)',
      async () => {
        const { table, commit } = await freshTable();
        const ids = await commit(Array.from({ length: 3 }, (_, i) => msg(`key-${i}`, { i })));
        const { store } = await scope.open({ table, publisher: new RecordingPublisher() });
        const port = typeormSqlPort(scope.ds);
        const session = await port.session?.();
        if (session === undefined || store.lockOwner === undefined) throw new Error('no session');
        scope.defer(() => session.release(true).catch(() => undefined));
        const key = newOwnerKey();
        expect(await store.lockOwner(session, key)).toBe(true);
        const leased = await store.claim({
          limit: 10,
          owner: 'live-owner',
          leaseMs: 60_000,
          token: ownerToken(key),
        });
        expect(leased.records.map((r) => r.messageId).sort()).toEqual([...ids].sort());
        const lookLog = new CapturingLogger();
        await scope.open({
          table,
          publisher: new RecordingPublisher(),
          logger: lookLog,
          options: {
            autoStart: true,
            instanceId: 'looker',
            dispatcher: { leaseMs: 60_000, pollIntervalMs: 100 },
          },
        });
        await killOwnerLockSession(ownerHex(key));
        const takeover = /leased by a dispatcher whose owner lock was released/;
        await waitFor('the takeover line', () => lookLog.linesOf(takeover).length > 0, {
          timeoutMs: 10_000,
        });
        const lines = lookLog.linesOf(takeover, 'warn').map((l) => l.message);
        expect(lines).toHaveLength(1);
        expect(lines[0]).toMatch(
          /^3 message\(s\) leased by a dispatcher whose owner lock was released \(its process ended or its lock connection was lost\): their leases end in 1250 ms and they are claimed again then/,
        );
        expect(lookLog.linesOf(/process ended:/)).toEqual([]);
        await untilAllDelivered(table, 20_000);
      },
      120_000,
    );

    // The look of a takeover (ARCHITECTURE.md "Takeover after a crash", 4) with several owners
    // gone at once: every one's leases shortened, a live owner's left alone,
    // and no owner lock left held by the looker's pooled connection.
    (db.name === 'sqlite' ? it.skip : it)(
      'a look shortens the leases of every owner whose lock is free, and no other, and gives back the locks it took (not SQLite: no owner lock)',
      async () => {
        const { table, commit } = await freshTable();
        const ids = await commit(Array.from({ length: 6 }, (_, i) => msg(`key-${i}`, { i })));
        const { store } = await scope.open({ table, publisher: new RecordingPublisher() });
        const port = typeormSqlPort(scope.ds);
        if (port.session === undefined || store.lockOwner === undefined)
          throw new Error('no session');
        const owners = [];
        for (let o = 0; o < 3; o++) {
          const session = await port.session();
          scope.defer(() => session.release(true).catch(() => undefined));
          const key = newOwnerKey();
          expect(await store.lockOwner(session, key)).toBe(true);
          const batch = await store.claim({
            limit: 2,
            owner: `owner-${o}`,
            leaseMs: 60_000,
            token: ownerToken(key),
          });
          expect(batch.records).toHaveLength(2);
          owners.push({ session, key, ids: batch.records.map((r) => r.messageId) });
        }
        expect(owners.flatMap((o) => o.ids).sort()).toEqual([...ids].sort());
        const [gone1, gone2, live] = owners as [
          (typeof owners)[0],
          (typeof owners)[0],
          (typeof owners)[0],
        ];
        await killOwnerLockSession(ownerHex(gone1.key));
        await killOwnerLockSession(ownerHex(gone2.key));
        const shorten = store.shortenOrphanedLeases?.bind(store);
        if (shorten === undefined) throw new Error('no takeover on this store');
        const left = async (owner: string) =>
          (await leasesOf(table, owner)).map((l) => l.remainingMs);
        // The server ends a killed session a moment after KILL returns: look until both are seen.
        let shortened: number[] = [];
        await waitFor('both owners seen gone', async () => {
          await shorten(1_250, 'full');
          shortened = [...(await left('owner-0')), ...(await left('owner-1'))];
          return shortened.every((ms) => ms <= 1_250);
        });
        expect(shortened).toHaveLength(4);
        for (const ms of await left('owner-2')) expect(ms).toBeGreaterThan(50_000);
        // Nothing more to shorten, and the looker gave back the locks it took.
        expect(await shorten(1_250, 'full')).toBe(0);
        if (db.name !== 'postgres') {
          for (const o of [gone1, gone2]) {
            const [free] = await scope.ds.query<{ f: number | string }[]>(
              'SELECT IS_FREE_LOCK(?) AS f',
              [`nestjs-outbox-owner-${ownerHex(o.key)}`],
            );
            expect(Number(free?.f)).toBe(1);
          }
        }
        expect(live.ids).toHaveLength(2);
      },
      60_000,
    );

    // Issue 75, item 13: between the lists of live owners (a read of the server's lock table,
    // once a second), a look tries only the owners listed alive, each by its lock.
    (db.name === 'sqlite' ? it.skip : it)(
      'a probe between lists finds an owner listed alive whose lock went, and shortens its leases only (not SQLite: no owner lock)',
      async () => {
        const { table, commit } = await freshTable();
        await commit(Array.from({ length: 4 }, (_, i) => msg(`key-${i}`, { i })));
        const { store } = await scope.open({ table, publisher: new RecordingPublisher() });
        const port = typeormSqlPort(scope.ds);
        const shorten = store.shortenOrphanedLeases?.bind(store);
        if (port.session === undefined || store.lockOwner === undefined || shorten === undefined)
          throw new Error('no takeover on this store');
        const owners = [];
        for (let o = 0; o < 2; o++) {
          const session = await port.session();
          scope.defer(() => session.release(true).catch(() => undefined));
          const key = newOwnerKey();
          expect(await store.lockOwner(session, key)).toBe(true);
          const batch = await store.claim({
            limit: 2,
            owner: `owner-${o}`,
            leaseMs: 60_000,
            token: ownerToken(key),
          });
          expect(batch.records).toHaveLength(2);
          owners.push(key);
        }
        // The list sees both alive, and shortens nothing.
        expect(await shorten(1_250, 'list')).toBe(0);
        await killOwnerLockSession(ownerHex(owners[0] ?? 0));
        await waitFor('the probe finding the gone owner', async () => {
          await shorten(1_250, 'probe');
          return (await leasesOf(table, 'owner-0')).every((l) => l.remainingMs <= 1_250);
        });
        for (const l of await leasesOf(table, 'owner-1'))
          expect(l.remainingMs).toBeGreaterThan(50_000);
        expect(await shorten(1_250, 'probe')).toBe(0);
      },
      60_000,
    );

    it('fences a settle whose lease was taken over: it changes nothing, whatever its outcome (store)', async () => {
      const { table, commit } = await freshTable();
      const { store } = await scope.open({ table, publisher: new RecordingPublisher() });
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
        retry: [{ id: r1, delayMs: 1_000, error: 'late retry', errorClass: 'Error' }],
        dead: [{ id: r2, error: 'late dead', errorClass: 'Error' }],
        release: [{ id: r3, delayMs: 0, error: 'late outage', errorClass: 'Error' }],
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
        (await readOutbox(scope.ds, table)).map((r) => [
          r.status,
          r.lockedBy,
          r.attempts,
          r.lastError,
        ]),
        // Each claim counted an attempt.
      ).toEqual(ids.map(() => ['pending', 'b', 2, null]));
      // Nor does it record any failed attempt.
      expect(await readAttempts(scope.ds, table)).toEqual([]);

      // B's outcome stands, and A's later attempts still change nothing.
      expect(
        await store.settle(
          b.token,
          {
            delivered: [r0, r1],
            retry: [],
            dead: [{ id: r2, error: 'rejected by b', errorClass: 'PermanentPublishError' }],
            release: [{ id: r3, delayMs: 0, error: null, errorClass: null }],
            advancedKeys: [],
          },
          false,
        ),
      ).toBe(4);
      expect(await store.settle(a.token, late, false)).toBe(0);
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => [r.status, r.lockedBy, r.attempts, r.lastError])).toEqual([
        ['delivered', null, 2, null],
        ['delivered', null, 2, null],
        ['dead', null, 2, 'rejected by b'],
        // A release gives the claim's attempt back.
        ['pending', null, 1, null],
      ]);
      // Only B's dead letter is a failed attempt, recorded under B; A's late outcomes are not.
      expect(
        (await readAttempts(scope.ds, table)).map((h) => [
          h.messageId,
          h.attempt,
          h.outcome,
          h.lockedBy,
        ]),
      ).toEqual([[ids[2], 2, 'dead', 'b']]);
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
      const bootAs = (instanceId: string, publisher: RecordingPublisher) =>
        scope.open({
          table,
          publisher,
          logger: ['error', 'fatal'],
          options: { instanceId, dispatcher: { leaseMs: 1_000, publishTimeoutMs: 500 } },
        });
      const slowPublisher = new RecordingPublisher();
      const takeoverPublisher = new RecordingPublisher();
      const a = await bootAs('stalled-a', slowPublisher);
      const b = await bootAs('takeover-b', takeoverPublisher);
      const ids = await commit([msg('x'), msg('y'), msg('z')]);
      takeoverPublisher.fail(ids[2] as string, 'permanent');

      // A publishes, then stalls (a GC pause, a blocked event loop) before it settles.
      const storeA = a.store;
      const settle = storeA.settle.bind(storeA);
      let resume!: () => void;
      const stalled = new Promise<void>((resolve) => (resume = resolve));
      let reachedSettle = false;
      storeA.settle = async (...args: Parameters<OutboxStore['settle']>) => {
        reachedSettle = true;
        await stalled;
        return settle(...args);
      };
      const runA = a.dispatcher.runOnce();
      await slowPublisher.until(() => reachedSettle, 5_000, 'A to publish');
      expect(slowPublisher.sentIds).toEqual(ids);
      await waitFor("A's lease to expire on the database clock", async () => {
        const left = await leasesOf(table, 'stalled-a');
        return left.length === ids.length && left.every((l) => l.remainingMs < 0);
      });

      const reportB = await b.dispatcher.runOnce();
      expect(reportB).toMatchObject({ claimed: 3, published: 2, deadLettered: 1, fenced: 0 });
      resume();
      const reportA: OutboxBatchReport = await runA;
      expect(reportA).toMatchObject({ claimed: 3, published: 3, fenced: 3 });

      const rows = await readOutbox(scope.ds, table);
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
        const rows = await untilAllDelivered(table, 30_000);
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
      }, 300_000);
    }

    // Outages of the broker and of the database, with the in-memory publisher ------------------

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

    if (db.name === 'postgres') {
      it('the LISTEN connection comes back after the server terminates it', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, {
          autoStart: true,
          dispatcher: { listen: true, pollIntervalMs: 600_000 },
        });
        await waitFor('the LISTEN connection', async () => {
          const [r] = await scope.ds.query<{ n: number }[]>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN %${h.table}%'`,
          );
          return (r?.n ?? 0) > 0;
        });
        await scope.ds.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %${h.table}%'`,
        );
        // Committed from another connection pool, so only a NOTIFY can wake the dispatcher.
        const other = new DataSource(serverConnection('postgres'));
        await other.initialize();
        try {
          const { outbox } = await scope.open({ table: h.table }, other);
          const ids = await waitFor('a wake-up through the re-established LISTEN', async () => {
            await other.transaction((m) => outbox.enqueue(msg('k'), m));
            await sleep(300);
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
        const locker = scope.ds.createQueryRunner();
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
  });
}

function countByStatus(rows: readonly OutboxRow[]): Record<string, number> {
  return rows.reduce<Record<string, number>>(
    (acc, r) => ({ ...acc, [r.status]: (acc[r.status] ?? 0) + 1 }),
    {},
  );
}
