import { PermanentPublishError, type OutboxRecord, type PublishOutcome } from '../../lib';
import {
  readAttempts,
  readOutbox,
  readStatuses,
  storedId,
  type OutboxRow,
} from '../support/databases';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Retries and dead letters: a failing message backs off and ends dead after maxAttempts (also
// when every dispatcher that claims it dies or times out), at once on a PermanentPublishError
// or a false retryIf, or once retry.maxAgeMs is passed; dead letters are requeued on demand,
// kept or deleted by the cleaner as cleaner.deadRetentionMs says, and purged by purgeDead().

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): a failing message is retried after its backoff and dead after
// maxAttempts, a PermanentPublishError is dead at once, and other messages go out meanwhile.
// The log source hands retries to the table, which it sweeps every second here.
for (const source of SOURCE_CASES) {
  describeSource(source, 'retries and dead letters', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_r' });
    const src = useSource(scope, source);
    const swept = { sweepIntervalMs: 1_000 } as const;

    it('retries a failing message after its backoff, doubling, and dead-letters it after maxAttempts', async () => {
      // When each message was handed to the broker, on this process's clock.
      const handed = new Map<string, number[]>();
      const publisher = new (class extends RecordingPublisher {
        override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
          for (const m of messages)
            handed.set(m.messageId, [...(handed.get(m.messageId) ?? []), performance.now()]);
          return super.publish(messages, signal);
        }
      })();
      publisher.fail({ key: 'bad' }, 'retryable', { error: new Error('broker said no') });
      const h = await src.boot(
        publisher,
        { retry: { maxAttempts: 3, initialDelayMs: 300, factor: 2, jitter: 0 } },
        swept,
      );
      const [bad, good] = (await h.commit([msg('bad'), msg('good')])) as [string, string];

      await src.deliver(
        h,
        'the failing message dead',
        async () => (await h.row(bad)).status === 'dead',
      );
      expect(await h.row(bad)).toMatchObject({
        status: 'dead',
        attempts: 3,
        lockedBy: null,
        lastError: expect.stringContaining('broker said no'),
      });
      expect(await h.row(good)).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(publisher.sentIds).toEqual([good]);
      expect(publisher.attemptsOf(bad)).toBe(3);
      // Each retry waited for its backoff (300 ms, then 600 ms; a few ms of slack between the
      // database's clock, which dates the retry, and this one).
      const [first = 0, second = 0, third = 0] = handed.get(bad) ?? [];
      expect(second - first).toBeGreaterThanOrEqual(300 - 20);
      expect(third - second).toBeGreaterThanOrEqual(600 - 20);
      expect(
        (await readAttempts(scope.ds, h.table))
          .filter((a) => a.messageId === bad)
          .map((a) => [a.attempt, a.outcome]),
      ).toEqual([
        [1, 'retry'],
        [2, 'retry'],
        [3, 'dead'],
      ]);
      // A dead message stays dead: past another sweep, nothing more is handed over.
      await expectNever(
        'the dead message handed over again',
        () => publisher.attemptsOf(bad) > 3,
        1_500,
      );
      expect(await h.row(bad)).toMatchObject({ status: 'dead', attempts: 3 });
    });

    it('dead-letters a PermanentPublishError at once', async () => {
      const publisher = new RecordingPublisher();
      const deadLetters: string[] = [];
      publisher.fail({ key: 'p' }, 'permanent', {
        error: new PermanentPublishError('schema rejected'),
      });
      const h = await src.boot(
        publisher,
        { observer: { onDeadLetter: (record) => deadLetters.push(record.messageId) } },
        swept,
      );
      const [poison, fine] = (await h.commit([msg('p'), msg('f')])) as [string, string];
      await src.deliver(
        h,
        'the poison dead and the other delivered',
        async () =>
          (await h.row(poison)).status === 'dead' && (await h.row(fine)).status === 'delivered',
      );
      expect(await h.row(poison)).toMatchObject({
        status: 'dead',
        attempts: 1,
        lockedBy: null,
        lastError: expect.stringContaining('schema rejected'),
      });
      expect(deadLetters).toEqual([poison]);
      expect(publisher.attemptsOf(poison)).toBe(1);
      expect(publisher.sentIds).toEqual([fine]);
    });
  });
}

// The judgement in detail, on the poll: exact backoff on the database clock, retryIf, the
// unavailable message, dispatchers dying mid-publish, maxAgeMs, retryDead, the cleaner and
// purgeDead. The sources project runs only the block above.
for (const db of POLL_RUN_DATABASES) {
  describeWith(
    db.service === null ? [] : [db.service],
    `retries and dead letters on ${db.name}`,
    () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_r', options: CLAIM_LOOP });
      const quote = (name: string): string => (db.name === 'mariadb' ? `\`${name}\`` : `"${name}"`);
      const param = (n: number): string => (db.name === 'postgres' ? `$${n}` : '?');
      const messageIdColumn = db.name === 'postgres' ? 'message_id::text' : 'message_id';
      const statuses = (qualifiedTable: string) => readStatuses(scope.ds, qualifiedTable);

      const { boot, dispatcherApp, enqueuer } = dispatchApps(scope);

      const rowOf = (rows: readonly OutboxRow[], messageId: string): OutboxRow => {
        const row = rows.find((r) => r.messageId === messageId);
        if (row === undefined) throw new Error(`no row for ${messageId}`);
        return row;
      };

      /** The timestamp columns the table has (the set grows between versions). */
      async function timeColumns(table: string): Promise<string[]> {
        const sql =
          db.name === 'postgres'
            ? `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
            : db.name === 'mariadb'
              ? `SELECT column_name AS column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`
              : `SELECT name AS column_name FROM pragma_table_info(?)`;
        const rows = await scope.ds.query<{ column_name: string }[]>(sql, [table]);
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
          await scope.ds.query(
            `UPDATE ${quote(table)} SET ${set} WHERE ${messageIdColumn} = ${param(1)}`,
            [storedId(db.name, id)],
          );
      }

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

      it('with retry.maxAttempts Infinity keeps retrying past a thousand attempts and delivers once the broker accepts', async () => {
        const publisher = new RecordingPublisher();
        const h = await boot(publisher, {
          retry: { maxAttempts: Infinity, initialDelayMs: 0, maxDelayMs: 0, jitter: 0 },
        });
        const [bad] = (await h.commit([msg('stubborn')])) as [string];
        publisher.fail(bad, 'retryable', { error: new Error('broker said no') });
        expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, retried: 1 });
        // A thousand failed attempts, set in the table: more than any finite maxAttempts allows.
        await scope.ds.query(
          `UPDATE ${quote(h.table)} SET attempts = 1000 WHERE ${messageIdColumn} = ${param(1)}`,
          [storedId(db.name, bad)],
        );
        expect(await h.dispatcher.runOnce()).toMatchObject({
          claimed: 1,
          retried: 1,
          deadLettered: 0,
        });
        expect(await h.row(bad)).toMatchObject({ status: 'pending', attempts: 1001 });

        publisher.heal();
        expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 1 });
        expect(await h.row(bad)).toMatchObject({ status: 'delivered', attempts: 1002 });
        expect(publisher.sentIds).toEqual([bad]);
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

      it("a publish past the dispatcher's deadline that answers the abort: what the broker confirmed is delivered and not sent again; what it never wrote counts no attempt", async () => {
        let first: readonly string[] | undefined;
        // The first call: the broker confirms the first message, the second waits for its
        // confirm, the third is never written; the call answers only the dispatcher's abort,
        // with what it knows. Later calls answer at once.
        const publisher = new (class extends RecordingPublisher {
          override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
            if (first !== undefined) return super.publish(messages, signal);
            first = messages.map((m) => m.messageId);
            return new Promise<PublishOutcome[]>((resolve) => {
              signal.addEventListener(
                'abort',
                () => {
                  const error: unknown = signal.reason;
                  resolve([{ ok: true }, { ok: false, error }, { ok: false, error, sent: false }]);
                },
                { once: true },
              );
            });
          }
        })();
        const h = await boot(publisher, {
          retry: { initialDelayMs: 10, jitter: 0 },
          dispatcher: { publishTimeoutMs: 200, maxOutagePauseMs: 100 },
        });
        const [a, b, c] = (await h.commit([msg('a'), msg('b'), msg('c')])) as [
          string,
          string,
          string,
        ];

        expect(await h.dispatcher.runOnce()).toMatchObject({
          claimed: 3,
          published: 1,
          retried: 1,
          released: 1,
        });
        expect(first).toEqual([a, b, c]);
        expect(await h.row(a)).toMatchObject({ status: 'delivered', attempts: 1 });
        expect(await h.row(b)).toMatchObject({
          status: 'pending',
          attempts: 1,
          lastError: expect.stringContaining('PublishTimeoutError'),
        });
        expect(await h.row(c)).toMatchObject({ status: 'pending', attempts: 0 });

        await waitFor('the pause to end', () => h.dispatcher.status().pausedUntil === null);
        await h.runUntilIdle();
        expect(publisher.sentIds.sort()).toEqual([b, c].sort());
        expect(await h.row(b)).toMatchObject({ status: 'delivered', attempts: 2 });
        expect(await h.row(c)).toMatchObject({ status: 'delivered', attempts: 1 });
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

      it('retry.maxAgeMs dead-letters an always-failing message once its age plus the next delay would pass it, long before maxAttempts', async () => {
        const publisher = new RecordingPublisher();
        const table = await scope.table();
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
            const row = rowOf(await readOutbox(scope.ds, table), id);
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

      /**
       * One table with dead, pending (backing off) and delivered rows, some of them made two
       * hours old in every timestamp they have (enqueued, dead-lettered, delivered …), so the
       * tests hold whichever of them a row's age is measured from. Keys are distinct, so no row
       * holds another back.
       */
      async function deadLetterFixture(names: Record<string, 'dead' | 'pending' | 'delivered'>) {
        const table = await scope.table('outbox_r');
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
        expect(
          [...(await statuses(quote(table))).values()].filter((s) => s === 'dead'),
        ).toHaveLength(1);

        expect(await operator.outbox.purgeDead()).toBe(1);
        expect(await operator.outbox.purgeDead()).toBe(0);
        expected.delete(id('dead-young-1'));
        expected.delete(id('dead-young-2'));
        expect(await statuses(quote(table))).toEqual(expected);
        expect(await operator.outbox.stats()).toMatchObject({ dead: 0, delivered: 1 });
      });
    },
  );
}
