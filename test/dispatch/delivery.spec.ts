import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import type { OutboxRecord } from '../../lib';
import { ensureOutboxTable } from '../../lib/schema';
import { Client } from 'pg';
import { readOutbox, readStatuses, serverConnection, TestOrder } from '../support/databases';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { holdFirstCallOf, RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Delivery: every committed message is published once and nothing else is; when the dispatcher
// runs (autoStart, runOnce, wake-ups by LISTEN/NOTIFY or the poll), when a message is due
// (delayMs, availableAt), what happens to a delivered row (retention, the cleaner), and where
// the table is (the schema option). The broker is the in-memory RecordingPublisher; delivery
// over a real transport is proven in dispatcher-faults.spec.ts.

const suffix = (): string => randomBytes(4).toString('hex');

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): every committed message once, per key in commit order, never a
// rolled-back one, delayed ones when due, beside a batch in flight and an open transaction.
for (const source of SOURCE_CASES) {
  describeSource(source, 'delivery', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_d' });
    const src = useSource(scope, source);

    it('publishes every committed message exactly once, in per-key commit order, and never a rolled-back one', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, { dispatcher: { batchSize: 7 } });
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
          scope.ds.transaction(async (manager) => {
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

      await src.deliver(h, 'every committed message delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
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
            // The claim (or the lease by id) counts the attempt that delivered it.
            r.attempts === 1 &&
            r.lockedBy === null &&
            r.lastError === null,
        ),
      ).toBe(true);

      // Nothing is due any more: a claim of the table publishes nothing more.
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 0, published: 0 });
      expect(publisher.sent).toHaveLength(committed.length);
    });

    it('delivers on its own when autoStart is on', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, {
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

    it('publishes a commit that arrives while a batch is publishing beside it, never ahead of its own key', async () => {
      const publisher = new RecordingPublisher();
      // The first batch (key a) is held at the broker until the test lets it go.
      const { holding, release } = holdFirstCallOf(publisher, 'a');
      // Only wake-ups (or the log) drive it: the poll is a minute away.
      const h = await src.boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 60_000, batchesInFlight: 2, leaseMs: 60_000 },
      });
      const [first] = (await h.commit([msg('a', { n: 1 })])) as [string];
      await waitFor('the first batch to reach the broker', holding);

      const [other] = (await h.commit([msg('b', { n: 2 })])) as [string];
      const [sameKey] = (await h.commit([msg('a', { n: 3 })])) as [string];
      // Claimed and published while the first batch still waits for its broker...
      await publisher.until((p) => p.sentIds.includes(other), 10_000, 'the commit made meanwhile');
      // ...but a later message of the held key waits for it.
      expect(publisher.sentIds).toEqual([other]);

      release();
      await publisher.until((p) => p.sentIds.length === 3, 10_000, 'the held batch and its key');
      expect(publisher.sentForKey('a')).toEqual([first, sameKey]);
      await waitFor('every row settled as delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
    });

    it('never stalls an enqueuing transaction that is open while the dispatcher runs', async () => {
      // The dispatcher polls every 20 ms while each transaction stays open across awaits; on
      // SQLite that means its claims and settles meet a held write lock again and again. A
      // dispatcher that blocked the event loop while waiting for that lock would hold up the
      // transaction that owns it until its own wait failed: a failed claim (an outage report), a
      // failed settle (the message published twice), or a failed business transaction.
      const publisher = new RecordingPublisher();
      const outages: unknown[] = [];
      const h = await src.boot(publisher, {
        autoStart: true,
        dispatcher: { pollIntervalMs: 20 },
        observer: { onOutage: (error) => outages.push(error) },
      });
      const ids: string[] = [];
      for (let tx = 0; tx < 10; tx++) {
        ids.push(
          ...(await scope.ds.transaction(async (manager) => {
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

    it('holds delayed messages until due and publishes a past availableAt at once', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher);
      const [now] = await h.commit([msg(null, { when: 'now' })]);
      const [delayed] = await h.commit([msg(null, { when: 'delayed' }, { delayMs: 1_000 })]);
      const [past] = await h.commit([
        msg(null, { when: 'past' }, { availableAt: new Date(Date.now() - 60_000) }),
      ]);
      const [future] = await h.commit([
        msg(null, { when: 'future' }, { availableAt: new Date(Date.now() + 1_000) }),
      ]);

      await src.deliver(h, 'the messages due at once', () =>
        [now, past].every((id) => publisher.sentIds.includes(id as string)),
      );
      expect([...publisher.sentIds].sort()).toEqual([now, past].sort());
      expect(await h.row(delayed as string)).toMatchObject({ status: 'pending', attempts: 0 });
      expect(await h.row(future as string)).toMatchObject({ status: 'pending', attempts: 0 });

      await src.deliver(h, 'the delayed and the future message', () =>
        [delayed, future].every((id) => publisher.sentIds.includes(id as string)),
      );
      expect([...publisher.sentIds].sort()).toEqual([now, past, delayed, future].sort());
      await waitFor('every row settled as delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
    });
  });
}

// The poll's own behaviour: runOnce and autoStart, the claim's windows and retries, LISTEN/NOTIFY,
// the cleaner and the schema option. The log source has its own for these
// (test/log-tailing/log-tailing.spec.ts); the sources project runs only the block above.
for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `delivery on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_d', options: CLAIM_LOOP });
    const quote = (name: string): string => (db.name === 'mariadb' ? `\`${name}\`` : `"${name}"`);
    const statuses = (qualifiedTable: string) => readStatuses(scope.ds, qualifiedTable);

    const { boot, dispatcherApp, enqueuer } = dispatchApps(scope);

    it('delivers outside the async context of the caller of start() (nestjs-cls, MikroORM)', async () => {
      // A request's store around start(): the poll, the wake-ups and the LISTEN it starts must
      // not carry it into the messages other requests enqueue later (log-tailing.spec.ts has
      // the same test for the log's reader).
      const request = new AsyncLocalStorage<{ user: string }>();
      const seen: string[] = [];
      const publisher = new (class extends RecordingPublisher {
        override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
          for (const m of messages) seen.push(request.getStore()?.user ?? m.messageId);
          return super.publish(messages, signal);
        }
      })();
      const h = await boot(publisher, { autoStart: false, dispatcher: { pollIntervalMs: 100 } });
      await request.run({ user: 'alice' }, () => h.dispatcher.start());

      const ids = await request.run({ user: 'bob' }, () => h.commit([msg('k'), msg(null)]));

      await publisher.until((p) => p.sent.length >= ids.length, 15_000, `${ids.length} deliveries`);
      expect([...seen].sort()).toEqual([...ids].sort());
    });

    it('sends the next claim before publishing the batch claimed, and still delivers every message once in key order', async () => {
      const publisher = new RecordingPublisher();
      // Each event with the time it happened.
      const events: { what: string; at: number }[] = [];
      const note = (what: string): void => {
        events.push({ what, at: performance.now() });
      };
      const publish = publisher.publish.bind(publisher);
      publisher.publish = (messages, signal) => {
        note(`publish ${messages.map((m) => m.messageId).join(',')}`);
        return publish(messages, signal);
      };
      // Room for every batch: the loop never waits on an older one, which lets the batch just
      // claimed publish at once.
      const h = await boot(publisher, { dispatcher: { batchSize: 4, batchesInFlight: 4 } });
      const claim = h.store.claim.bind(h.store);
      h.store.claim = async (options) => {
        const n = events.filter((e) => e.what.startsWith('claimed')).length + 1;
        const batch = await claim({
          ...options,
          onSent: () => {
            note(`sent ${n}`);
            options.onSent?.();
          },
        });
        note(`claimed ${n} ${batch.records.map((r) => r.messageId).join(',')}`);
        return batch;
      };
      const ids = await h.commit(Array.from({ length: 16 }, (_, i) => msg(`k${i % 8}`, { i })));

      await h.dispatcher.drain();

      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      for (const key of ['k0', 'k5']) {
        expect(publisher.sentForKey(key)).toEqual(ids.filter((_, i) => `k${i % 8}` === key));
      }
      // Every batch but the last went to the broker after the claim behind it was sent, or after
      // the hold's bound (5 ms) when sending that claim took longer (a loaded machine).
      const claims = events.filter((e) => e.what.startsWith('claimed') && !e.what.endsWith(' '));
      expect(claims.length).toBeGreaterThanOrEqual(2);
      const order = claims.slice(0, -1).map((claimed) => {
        const [, n, list = ''] = claimed.what.split(' ');
        const taken = list.split(',');
        const publishing = events.find(
          (e) => e.what.startsWith('publish ') && taken.some((id) => e.what.includes(id)),
        );
        const sent = events.find((e) => e.what === `sent ${Number(n) + 1}`);
        expect(publishing).toBeDefined();
        expect(sent).toBeDefined();
        const afterSent = events.indexOf(publishing!) > events.indexOf(sent!);
        if (!afterSent) expect(publishing!.at - claimed.at).toBeGreaterThanOrEqual(4.5);
        return afterSent;
      });
      expect(order).toContain(true);
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

    if (db.name === 'postgres') {
      it('delayMs counts from the enqueue call, not from the start of the business transaction', async () => {
        const h = await boot(new RecordingPublisher());
        await scope.ds.transaction(async (manager) => {
          await manager.query('SELECT 1');
          await sleep(600);
          await h.outbox.enqueue(msg('k'), manager, { delayMs: 1_000 });
        });
        const [row] = await scope.ds.query<{ gap: number }[]>(
          `SELECT extract(epoch FROM (available_at - created_at)) * 1000 AS gap FROM "${h.table}"`,
        );
        // created_at is the transaction start; available_at is the enqueue call + 1 s.
        expect(Number(row?.gap)).toBeGreaterThanOrEqual(1_550);
      });
    }

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

    if (db.name !== 'sqlite') {
      // SQLite has one writer: two claims never run at once there.
      it('looks again soon, not at its next poll, when another claim holds the rows it would take', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, { dispatcher: { pollIntervalMs: 120_000 } });
        const ids = await h.commit([msg('c1', { n: 1 }), msg('c2', { n: 2 }), msg(null, { n: 3 })]);
        // Another dispatcher's claim in progress: its transaction holds the rows' locks.
        const other = scope.ds.createQueryRunner();
        await other.connect();
        try {
          await other.startTransaction();
          await other.query(`SELECT id FROM ${quote(h.table)} FOR UPDATE`);
          await h.dispatcher.start();
          await sleep(300);
          expect(publisher.calls).toHaveLength(0);
          await other.commitTransaction();
        } finally {
          await other.release();
        }
        // The poll is 120 s away, and no commit wakes it: only the claim's own retry can.
        await publisher.until((p) => p.sentIds.length === 3, 10_000, 'the rows once released');
        expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      });
    }

    if (db.name === 'postgres') {
      it('tells the store when a claim looks again after being held back, or after a short batch', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, { dispatcher: { pollIntervalMs: 120_000 } });
        const [head, next] = (await h.commit([msg('t', { n: 1 }), msg('t', { n: 2 })])) as [
          string,
          string,
        ];
        const table = quote(h.table);
        // The store decides from `likelyFew` whether a claim takes a turn among other
        // dispatchers' claims (PostgreSQL): record what each claim asked and leased.
        const claims: { likelyFew: boolean; leased: number }[] = [];
        const store = h.store;
        const claim = store.claim.bind(store);
        store.claim = async (options) => {
          const batch = await claim(options);
          claims.push({ likelyFew: options.likelyFew === true, leased: batch.records.length });
          return batch;
        };
        // The head in flight at another dispatcher: its follower waits for it.
        await scope.ds.query(
          `UPDATE ${table} SET locked_by = 'other', lock_token = gen_random_uuid(), locked_until = now() + interval '30 seconds', available_at = now() + interval '30 seconds', last_attempt_at = now(), attempts = 1 WHERE message_id::text = $1`,
          [head],
        );
        await h.dispatcher.start();
        await waitFor('a claim held back, then one looking again', () => claims.length >= 2);
        expect(claims[0]).toEqual({ likelyFew: false, leased: 0 });
        expect(claims[1]).toEqual({ likelyFew: true, leased: 0 });
        // The other dispatcher's batch is delivered: the follower comes out of a second look
        // (the poll is 120 s away).
        await scope.ds.query(
          `UPDATE ${table} SET status = 'delivered', delivered_at = now(), locked_by = NULL, lock_token = NULL, locked_until = NULL WHERE message_id::text = $1`,
          [head],
        );
        await publisher.until((p) => p.sentIds.includes(next), 10_000, 'the follower');
        expect(claims.find((c) => c.leased === 1)).toEqual({ likelyFew: true, leased: 1 });
        // A batch of 1 of 50 was short: the next claim (at the next commit) is told so too.
        const before = claims.length;
        await h.commit([msg('u', { n: 3 })]);
        await waitFor('the claim after the commit', () =>
          claims.slice(before).some((c) => c.leased === 1),
        );
        expect(claims.slice(before).find((c) => c.leased === 1)?.likelyFew).toBe(true);
      });
    }

    it('reads the wide window first and after a claim that held rows back, the batch and 50 after one that held none', async () => {
      const publisher = new RecordingPublisher();
      const batchSize = 5;
      // One message of a key per batch: the claim that leases a key's head holds its follower
      // back (in flight), and so does a claim while that batch publishes.
      const h = await boot(publisher, {
        dispatcher: { batchSize, pollIntervalMs: 120_000 },
        ordering: { maxRun: 1 },
      });
      const claims: { window: number | undefined; heldBack: boolean; leased: number }[] = [];
      const store = h.store;
      const claim = store.claim.bind(store);
      store.claim = async (options) => {
        const batch = await claim(options);
        claims.push({
          window: options.window,
          heldBack:
            batch.blockedKeys.length > 0 || batch.inFlightKeys > 0 || (batch.contended ?? 0) > 0,
          leased: batch.records.length,
        });
        return batch;
      };
      const ids = await h.commit([msg('w', { n: 1 }), msg('w', { n: 2 }), msg('w', { n: 3 })]);
      await h.dispatcher.start();
      await publisher.until((p) => p.sentIds.length === 3, 10_000, 'the three messages of w');
      expect(publisher.sentIds).toEqual(ids);
      // Claims until one finds nothing: at least one after a claim that held nothing back.
      await h.runUntilIdle();
      const wide = 2 * batchSize + 50;
      const narrow = batchSize + 50;
      expect(claims[0]?.window).toBe(wide);
      claims.slice(1).forEach((c, i) => {
        expect({ claim: i + 2, window: c.window }).toEqual({
          claim: i + 2,
          window: claims[i]?.heldBack === true ? wide : narrow,
        });
      });
      // Both cases came up: a claim after one that held w's followers back, and one after a
      // claim that held nothing back.
      expect(claims.some((c, i) => i > 0 && claims[i - 1]?.heldBack === true)).toBe(true);
      expect(claims.some((c) => c.window === narrow)).toBe(true);
    });

    // Wake-ups: LISTEN/NOTIFY ---------------------------------------------------------------

    if (db.name === 'postgres') {
      /**
       * A dispatcher that polls every 120 s, made idle: start() runs one drain at once, and
       * runOnce() waits for that drain before claiming (nothing). The message then comes from
       * another DataSource (its own pool and connections, and no dispatcher of its own), so
       * the in-process commit nudge cannot fire for it either.
       */
      const idleDispatcherAndOtherWriter = async (listen: boolean) => {
        const table = await scope.table('outbox_l');
        const publisher = new RecordingPublisher();
        const app = await dispatcherApp(table, publisher, {
          dispatcher: { listen, pollIntervalMs: 120_000 },
        });
        await app.dispatcher.start();
        expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
        expect(publisher.calls).toHaveLength(0);

        const otherDataSource = await db.open(table);
        scope.defer(() => otherDataSource.destroy());
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
          (await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered'),
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
        expect((await readOutbox(scope.ds, table)).map((r) => [r.messageId, r.status])).toEqual([
          [id, 'pending'],
        ]);
        // It was committed and due all along: the next run publishes it.
        expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 1 });
        expect(publisher.sentIds).toEqual([id]);
      });

      it('an enqueue-only app on TypeORM wakes the listeners after each commit that enqueued, and never after a rollback', async () => {
        // TypeORM reports its commits, so the NOTIFY is sent after the commit rather than in
        // the app's transaction: it must still come for every commit, and for no rollback.
        const table = await scope.table('outbox_n');
        const writer = await enqueuer(table);
        const { host, port, username, password, database } = serverConnection('postgres');
        const listener = new Client({ host, port, user: username, password, database });
        await listener.connect();
        scope.defer(() => listener.end());
        const payloads: string[] = [];
        listener.on('notification', (n) => payloads.push(n.payload ?? ''));
        await listener.query(`LISTEN "public_${table}"`);
        const marker = (text: string) =>
          scope.ds.query('SELECT pg_notify($1, $2)', [`public_${table}`, text]);

        await expect(
          scope.ds.transaction(async (m) => {
            await writer.outbox.enqueue(msg('k', { n: 1 }), m);
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');
        // Notifications arrive in commit order: after the marker, nothing was sent for the
        // rolled-back transaction (a late one would arrive before 'after-rollback').
        await marker('after-rollback');
        await marker('end');
        await waitFor('the markers', () => payloads.includes('end'));
        expect(payloads).toEqual(['after-rollback', 'end']);

        payloads.length = 0;
        await Promise.all(Array.from({ length: 8 }, (_, n) => writer.commit([msg('k', { n })])));
        await waitFor('the wake-up after the commits', () => payloads.includes(''));
        // Coalesced: at least one, never more than one per commit.
        expect(payloads.filter((p) => p === '').length).toBeLessThanOrEqual(8);
      });
    }

    // The schema option -------------------------------------------------------------------

    if (db.name === 'sqlite') {
      it('on SQLite the schema option is ignored: enqueue, dispatch and stats use the table of the main database', async () => {
        const table = await scope.table('outbox_sc');
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
          await scope.ds.query(`CREATE SCHEMA ${quote(schema)}`);
          scope.defer(() => scope.ds.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`));
        } else {
          await scope.ds.query(`CREATE DATABASE ${quote(schema)}`);
          scope.defer(() => scope.ds.query(`DROP DATABASE IF EXISTS ${quote(schema)}`));
        }
        // The same table name in both places; the default one gets two messages of its own.
        const table = await scope.table('outbox_sc');
        await ensureOutboxTable(scope.ds, { tableName: table, schema });
        const qualified = `${quote(schema)}.${quote(table)}`;
        const decoy = await enqueuer(table);
        const decoyIds = await decoy.commit([msg('decoy'), msg(null, { decoy: true })]);
        const decoyBefore = await readOutbox(scope.ds, table);

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
        expect(await readOutbox(scope.ds, table)).toEqual(decoyBefore);
        expect(decoyBefore.map((r) => [r.messageId, r.status, r.lockedBy])).toEqual(
          decoyIds.map((i) => [i, 'pending', null]),
        );
        for (const decoyId of decoyIds) expect(publisher.attemptsOf(decoyId)).toBe(0);
      });
    }

    it('refuses a schema that is not a plain identifier at bootstrap', async () => {
      const table = await scope.table();
      await expect(enqueuer(table, { schema: 'events; DROP TABLE x' })).rejects.toThrow(/schema/);
    });
  });
}
