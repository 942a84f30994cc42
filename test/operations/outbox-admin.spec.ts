import { randomUUID } from 'node:crypto';
import {
  OutboxAdmin,
  OutboxError,
  OutboxAdminInputError,
  PermanentPublishError,
  type OutboxMessage,
} from '../../lib';
import { type OutboxMessageSummary } from '../../lib/admin';
import { RecordingPublisher } from '../../lib/testing';
import { readAttempts, readOutbox, TEST_DATABASES } from '../support/databases';
import {
  dispatchTestApp,
  mergeOutboxOptions,
  type HarnessOverrides,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// OutboxAdmin on every database, through OutboxModule's own provider: dead letters and parked
// keys are produced by the real dispatcher (a scripted publisher), leases by real claims, and
// every assertion reads the table or the admin API's answers.

const msg = (
  key: string | null,
  extra: Partial<OutboxMessage> = {},
  payload: Record<string, unknown> = {},
): OutboxMessage => ({ topic: 'orders', type: 'order.created', key, payload, ...extra });

const rejected = (text: string) => ({ error: new PermanentPublishError(text) });

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `OutboxAdmin on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_adm' });

    const open = (overrides: HarnessOverrides = {}) =>
      scope.open({
        publisher: new RecordingPublisher(),
        options: mergeOutboxOptions(
          {
            // A retried message stays backing off for the whole test.
            retry: { initialDelayMs: 60_000, maxDelayMs: 60_000, jitter: 0 },
            dispatcher: { listen: false, pollIntervalMs: 50 },
          },
          overrides,
        ),
      });

    it('lists and inspects messages by status, topic, type, key, error text and age', async () => {
      const c = await open();
      const [old1, old2] = await c.enqueue([msg(null), msg(null, { topic: 'billing' })]);
      // The age filters are measured on the database clock: let the first rows age a little.
      await sleep(1_200);
      const ids = await c.enqueue([
        msg('k1', {}, { n: 1 }),
        msg('k2', { type: 'order.paid', headers: { tenant: 't-1' } }, { n: 2 }),
        msg(null, { topic: 'billing', type: 'invoice.sent' }),
        msg('k3'),
        msg('k4'),
      ]);
      const [k1, k2, billing, k3, k4] = ids as [string, string, string, string, string];
      c.publisher
        .fail(k1, 'permanent', rejected('Broker REJECTED the message: schema v2 unknown'))
        .fail(k2, 'permanent', rejected('payload too large (100% of quota)'))
        .fail(k3, 'permanent', rejected('Connection RESET by peer'))
        .fail(k4, 'retryable', { error: new Error('broker said: rejected for now') });
      await c.dispatcher.drain();

      const list = async (filter: Parameters<OutboxAdmin['list']>[0]) =>
        (await c.admin.list(filter)).items.map((m) => m.messageId);

      expect(await list({ status: 'dead' })).toEqual([k1, k2, k3]);
      expect(await list({ status: ['pending', 'dead'] })).toEqual([k1, k2, k3, k4]);
      expect(await list({ status: 'delivered' })).toEqual([old1, old2, billing]);
      expect(await list({ topic: 'billing' })).toEqual([old2, billing]);
      expect(await list({ type: 'invoice.sent' })).toEqual([billing]);
      expect(await list({ key: 'k2' })).toEqual([k2]);
      expect(await list({ key: null })).toEqual([old1, old2, billing]);
      // Case-insensitive substring, on dead and retrying messages alike.
      expect(await list({ errorContains: 'rejected' })).toEqual([k1, k4]);
      expect(await list({ errorContains: 'REJECTED', status: 'dead' })).toEqual([k1]);
      // The text is matched as it is: no LIKE wildcards.
      expect(await list({ errorContains: '100%' })).toEqual([k2]);
      expect(await list({ errorContains: '%' })).toEqual([k2]);
      expect(await list({ errorContains: '_' })).toEqual([]);
      // Age on the database clock.
      expect(await list({ olderThanMs: 1_000 })).toEqual([old1, old2]);
      const first = await c.admin.get(k1);
      expect(first).not.toBeNull();
      expect(await list({ createdAfter: first?.createdAt })).toEqual(ids);
      expect(await list({ createdBefore: first?.createdAt })).toEqual([old1, old2]);
      expect(
        await list({ topic: 'orders', status: 'dead', key: 'k3', errorContains: 'reset' }),
      ).toEqual([k3]);

      const dead = await c.admin.get(k2);
      expect(dead).toMatchObject({
        messageId: k2,
        topic: 'orders',
        key: 'k2',
        type: 'order.paid',
        status: 'dead',
        attempts: 1,
        headers: { tenant: 't-1' },
        lockedBy: null,
        lockedUntil: null,
        lockToken: null,
        deliveredAt: null,
      });
      expect(JSON.parse(dead?.payload ?? 'null')).toEqual({ n: 2 });
      expect(dead?.lastError).toContain('payload too large (100% of quota)');
      expect(dead?.deadAt).toBeInstanceOf(Date);
      expect(dead?.lastAttemptAt).toBeInstanceOf(Date);
      expect(dead?.ageMs).toBeGreaterThanOrEqual(0);
      const retrying = await c.admin.get(k4);
      expect(retrying).toMatchObject({ status: 'pending', attempts: 1, deadAt: null });
      expect(retrying?.lastError).toContain('rejected for now');
      // Due again in about a minute (retry.initialDelayMs), on the database clock.
      expect(
        (retrying?.availableAt.getTime() ?? 0) - (retrying?.lastAttemptAt?.getTime() ?? 0),
      ).toBeGreaterThan(50_000);
      const delivered = await c.admin.get(old1 as string);
      expect(delivered?.deliveredAt).toBeInstanceOf(Date);

      expect(await c.admin.get('0190a4f1-0000-7000-8000-000000000000')).toBeNull();
      await expect(c.admin.get('nope')).rejects.toThrow(OutboxError);
      await expect(c.admin.list({ status: 'lost' as 'dead' })).rejects.toThrow(/status/);
      await expect(c.admin.list({ topik: 'orders' } as never)).rejects.toThrow(
        /did you mean topic/,
      );
      await expect(c.admin.list({}, { limit: 1_001 })).rejects.toThrow(/1 to 1000/);
      await expect(c.admin.list({}, { after: '1 OR 1=1' })).rejects.toThrow(/cursor/);

      expect(await c.admin.counts()).toEqual({
        pending: 1,
        waiting: 0,
        leased: 0,
        delivered: 3,
        dead: 3,
        byTopic: [
          { topic: 'billing', pending: 0, waiting: 0, leased: 0, delivered: 2, dead: 0 },
          { topic: 'orders', pending: 1, waiting: 0, leased: 0, delivered: 1, dead: 3 },
        ],
      });
      expect((await c.admin.counts({ key: 'k1' })).dead).toBe(1);
      // The dashboard gauges: the same totals, and the age of the one pending message.
      const stats = await c.admin.stats();
      expect(stats).toMatchObject({ pending: 1, leased: 0, delivered: 3, dead: 3 });
      expect(stats.oldestPendingAgeMs).toEqual(expect.any(Number));
      // The last minute's flow per topic (delivered_at, dead_at) and the oldest pending (k4).
      const activity = await c.admin.activity(60_000);
      expect(activity.map((a) => [a.topic, a.delivered, a.dead])).toEqual([
        ['billing', 2, 0],
        ['orders', 1, 3],
      ]);
      expect(activity[0]?.oldestPendingAgeMs).toBeNull();
      expect(activity[1]?.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
      // A window that ends before anything settled: only the topic with a pending message.
      expect((await c.admin.activity(1)).map((a) => [a.topic, a.delivered, a.dead])).toEqual([
        ['orders', 0, 0],
      ]);
      await expect(c.admin.activity(0)).rejects.toThrow(/withinMs/);
    });

    it('keeps the attempt history of a message: two retries then dead, oldest first, kept by a retry of the dead letter, gone with a purge', async () => {
      const c = await open({
        instanceId: 'history-a',
        retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0, jitter: 0 },
        // Dead letters do not block: a retried one that was overtaken moves to the end of its key.
        ordering: { enabled: true, onDeadLetter: 'skip' },
      });
      const [failing, fine, later] = (await c.enqueue([msg('k'), msg('other'), msg('k')])) as [
        string,
        string,
        string,
      ];
      c.publisher
        .fail(failing, 'retryable', { times: 2, error: new Error('broker NACK: queue full') })
        .fail(failing, 'permanent', rejected('schema v3 unknown'));
      await waitFor('the failing message to die', async () => {
        await c.dispatcher.drain();
        return (await c.admin.get(failing))?.status === 'dead';
      });
      await c.dispatcher.drain();
      const dead = await c.admin.get(failing);
      // The instance id; an owner of delivery partitions adds its process's suffix.
      const byThisApp = expect.stringMatching(/^history-a(#[0-9a-f]+)?$/) as string;
      expect(
        dead?.attemptHistory.map((a) => [a.attempt, a.outcome, a.lockedBy, a.errorClass]),
      ).toEqual([
        [1, 'retry', byThisApp, 'Error'],
        [2, 'retry', byThisApp, 'Error'],
        [3, 'dead', byThisApp, 'PermanentPublishError'],
      ]);
      expect(dead?.attemptHistory.map((a) => a.error)).toEqual([
        'Error: broker NACK: queue full',
        'Error: broker NACK: queue full',
        'PermanentPublishError: schema v3 unknown',
      ]);
      // The same redacted, truncated text as last_error.
      expect(dead?.attemptHistory.at(-1)?.error).toBe(dead?.lastError);
      const times = dead?.attemptHistory.map((a) => a.failedAt.getTime()) ?? [];
      expect(times.every((t, i) => i === 0 || t >= (times[i - 1] as number))).toBe(true);
      expect(times.every((t) => Math.abs(t - Date.now()) < 60_000)).toBe(true);
      // Delivered messages have none.
      expect((await c.admin.get(fine))?.attemptHistory).toEqual([]);
      expect((await c.admin.get(later))?.status).toBe('delivered');

      // Retried once a later message of its key is queued: a new row at the end of the key,
      // the same message id, the same history; it fails again and the new attempts follow.
      c.publisher.heal().fail(failing, 'permanent', rejected('still unknown'));
      await c.enqueue([msg('k')]);
      expect(await c.admin.retry([failing])).toEqual({ requeued: 0, resequenced: 1, expired: [] });
      const requeued = await c.admin.get(failing);
      expect(requeued?.attempts).toBe(0);
      expect(requeued?.attemptHistory).toHaveLength(3);
      await c.dispatcher.drain();
      expect(
        (await c.admin.get(failing))?.attemptHistory.map((a) => [a.attempt, a.outcome]),
      ).toEqual([
        [1, 'retry'],
        [2, 'retry'],
        [3, 'dead'],
        [1, 'dead'],
      ]);
      expect((await readAttempts(scope.ds, c.table)).map((h) => h.messageId)).toEqual([
        failing,
        failing,
        failing,
        failing,
      ]);

      // An operator's purge deletes the message and its history.
      expect(await c.admin.purge([failing])).toBe(1);
      expect(await c.admin.get(failing)).toBeNull();
      expect(await readAttempts(scope.ds, c.table)).toEqual([]);
    });

    it('retries more ids than one transaction takes in queue order: two dead messages of a key keep their order, however the caller lists them', async () => {
      const c = await open({ ordering: { enabled: true, onDeadLetter: 'skip' } });
      const [first, second] = (await c.enqueue([msg('k'), msg('k')])) as [string, string];
      c.publisher
        .fail(first, 'permanent', rejected('no'))
        .fail(second, 'permanent', rejected('no'));
      await waitFor('both to die', async () => {
        await c.dispatcher.drain();
        return (await c.admin.get(second))?.status === 'dead';
      });
      // A later message of the key, queued: a retry moves them behind it, to the key's end.
      const [later] = (await c.enqueue([msg('k')])) as [string];
      c.publisher.heal();
      const sent = c.publisher.messageIds.length;
      // More than OUTBOX_ADMIN_MAX_LIMIT ids (unknown ones are ignored), the later message first.
      const unknown = Array.from({ length: 1_000 }, () => randomUUID());
      expect(await c.admin.retry([second, ...unknown, first])).toEqual({
        requeued: 0,
        resequenced: 2,
        expired: [],
      });
      await c.dispatcher.drain();
      expect(c.publisher.messageIds.slice(sent)).toEqual([later, first, second]);
    });

    it('delivered rows take their history with them: purged by the cleaner, or deleted at delivery (retention 0)', async () => {
      for (const deliveredRetentionMs of [1, 0]) {
        const c = await open({
          retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0, jitter: 0 },
          cleaner: { deliveredRetentionMs },
        });
        const [retried, fine] = (await c.enqueue([msg('a'), msg('b')])) as [string, string];
        c.publisher.fail(retried, 'retryable', { times: 1 });
        await waitFor('the retried message to go out', async () => {
          await c.dispatcher.drain();
          return c.publisher.messageIds.includes(retried);
        });
        expect(c.publisher.messageIds).toContain(fine);
        if (deliveredRetentionMs === 0) {
          // Deleted by the settle that recorded the delivery, history and all.
          expect(await readOutbox(scope.ds, c.table)).toEqual([]);
          expect(await readAttempts(scope.ds, c.table)).toEqual([]);
          continue;
        }
        expect(
          (await readAttempts(scope.ds, c.table)).map((h) => [h.messageId, h.outcome]),
        ).toEqual([[retried, 'retry']]);
        await sleep(20);
        expect(await c.cleaner.runOnce()).toMatchObject({ delivered: 2 });
        expect(await readOutbox(scope.ds, c.table)).toEqual([]);
        expect(await readAttempts(scope.ds, c.table)).toEqual([]);
      }
    });

    it('pages by id without gaps or duplicates while rows are added', async () => {
      const c = await open();
      const before = await c.enqueue(Array.from({ length: 25 }, (_, i) => msg(`p${i % 4}`)));
      const seen: OutboxMessageSummary[] = [];
      const added: string[] = [];
      let after: string | null = null;
      let pages = 0;
      do {
        const page = await c.admin.list({ topic: 'orders' }, { after, limit: 7 });
        seen.push(...page.items);
        after = page.nextCursor;
        pages += 1;
        // Writers keep going between pages; their rows come after the cursor.
        if (pages <= 3) {
          added.push(...(await c.enqueue([msg(`p${pages}`), msg(null), msg('late')])));
        }
      } while (after !== null);

      const seenIds = seen.map((m) => m.messageId);
      expect(new Set(seenIds).size).toBe(seenIds.length);
      expect(seenIds).toEqual([...before, ...added]);
      expect(seen.map((m) => BigInt(m.id))).toEqual(
        [...seen.map((m) => BigInt(m.id))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
      );
      expect(pages).toBe(Math.ceil(34 / 7));
      // A last full page reports no next page: the extra row fetched says whether there is one.
      const exact = await c.admin.list({}, { limit: 34 });
      expect(exact.items).toHaveLength(34);
      expect(exact.nextCursor).toBeNull();
    });

    it('retries dead letters by filter, keeping each key in order', async () => {
      const c = await open();
      const [a1, a2, a3, b1, b2, free] = await c.enqueue([
        msg('a'),
        msg('a'),
        msg('a'),
        msg('b'),
        msg('b'),
        msg(null, { topic: 'billing' }),
      ]);
      c.publisher
        .fail(a1 as string, 'permanent', rejected('schema REJECTED'))
        .fail(b1 as string, 'permanent', rejected('schema rejected'))
        .fail(free as string, 'permanent', rejected('schema rejected'));
      await c.dispatcher.drain();
      const statuses = async () =>
        Object.fromEntries(
          (await readOutbox(scope.ds, c.table)).map((r) => [r.messageId, r.status]),
        );
      expect(await statuses()).toEqual({
        [a1 as string]: 'dead',
        [a2 as string]: 'waiting',
        [a3 as string]: 'waiting',
        [b1 as string]: 'dead',
        [b2 as string]: 'waiting',
        [free as string]: 'dead',
      });

      c.publisher.heal();
      // Only key a matches; b's head and the billing message stay dead.
      expect(await c.admin.retryWhere({ key: 'a', errorContains: 'rejected' })).toEqual({
        requeued: 1,
        resequenced: 0,
        expired: [],
      });
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([a1, a2, a3]);
      expect(await statuses()).toMatchObject({
        [b1 as string]: 'dead',
        [b2 as string]: 'waiting',
        [free as string]: 'dead',
      });
      const requeued = await c.admin.get(a1 as string);
      expect(requeued).toMatchObject({ status: 'delivered', attempts: 1 });

      // By id: b's head goes back first, then its follower.
      expect(await c.admin.retry([(b1 as string).toUpperCase()])).toEqual({
        requeued: 1,
        resequenced: 0,
        expired: [],
      });
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([a1, a2, a3, b1, b2]);
      expect(await c.admin.retry([a1 as string])).toEqual({
        requeued: 0,
        resequenced: 0,
        expired: [],
      });
      await expect(c.admin.retryWhere({ status: 'pending' } as never)).rejects.toThrow(
        /only ever touch dead/,
      );
      expect((await c.admin.list({ status: 'dead' })).items.map((m) => m.messageId)).toEqual([
        free,
      ]);
    });

    it('refuses a bulk retry or purge whose filter names nothing (a field given as undefined, or none) and takes { all: true }', async () => {
      const c = await open();
      const [x, y] = await c.enqueue([msg('x'), msg('y')]);
      c.publisher.fail(() => true, 'permanent', rejected('refused'));
      await c.dispatcher.drain();
      c.publisher.heal();
      expect((await c.admin.counts()).dead).toBe(2);
      const missingTopic: string | undefined = undefined;
      for (const attempt of [
        () => c.admin.purgeWhere({ topic: missingTopic }),
        () => c.admin.retryWhere({ topic: missingTopic }),
        () => c.admin.purgeWhere({}),
        () => c.admin.retryWhere({}),
        () => c.admin.purgeWhere({ all: true, topic: 'orders' } as never),
        () => c.admin.purgeWhere({ all: false } as never),
      ]) {
        const error = await attempt().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(OutboxAdminInputError);
        expect(error).toMatchObject({ code: 'OUTBOX_ADMIN_INVALID_INPUT' });
      }
      expect((await c.admin.counts()).dead).toBe(2);
      expect(await c.admin.retryWhere({ all: true })).toEqual({
        requeued: 2,
        resequenced: 0,
        expired: [],
      });
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([x, y]);
    });

    it('purges dead letters by filter in pages, letting their keys move on', async () => {
      const c = await open({ dispatcher: { listen: false, batchSize: 500 } });
      // More dead letters than one page of the filter's selection (1000).
      const bulk = await c.enqueue(
        Array.from({ length: 1_050 }, (_, i) => msg(null, { topic: 'bulk' }, { i })),
      );
      const [k1, k2, keep] = await c.enqueue([msg('k'), msg('k'), msg('x')]);
      c.publisher
        .fail({ topic: 'bulk' }, 'permanent', rejected('bulk rejected'))
        .fail(k1 as string, 'permanent', rejected('k rejected'))
        .fail(keep as string, 'permanent', rejected('kept'));
      await c.dispatcher.drain();
      expect((await c.admin.counts()).dead).toBe(1_052);
      expect((await c.admin.get(k2 as string))?.status).toBe('waiting');

      expect(await c.admin.purgeWhere({ topic: 'bulk' })).toBe(1_050);
      const rows = await readOutbox(scope.ds, c.table);
      expect(rows.filter((r) => bulk.includes(r.messageId))).toEqual([]);

      c.publisher.heal();
      expect(await c.admin.purgeWhere({ key: 'k', errorContains: 'K REJECTED' })).toBe(1);
      // k's follower was promoted when its dead head went, and is delivered now.
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([k2]);
      expect(await c.admin.purge([keep as string, k2 as string])).toBe(1);
      expect((await readOutbox(scope.ds, c.table)).map((r) => [r.messageId, r.status])).toEqual([
        [k2, 'delivered'],
      ]);
    });

    it('reports keys blocked by a dead or retrying head, with the messages parked behind it', async () => {
      const c = await open();
      const [d1, d2, d3, r1, r2, lone, ok1, ok2] = await c.enqueue([
        msg('dead-head'),
        msg('dead-head'),
        msg('dead-head'),
        msg('retry-head'),
        msg('retry-head'),
        msg('lone-dead'),
        msg('fine'),
        msg('fine'),
      ]);
      c.publisher
        .fail(d1 as string, 'permanent', rejected('REJECTED: unknown schema'))
        .fail(r1 as string, 'retryable', { error: new Error('broker busy') })
        .fail(lone as string, 'permanent', rejected('rejected'));
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([ok1, ok2]);
      const waiting = (await c.admin.list({ status: 'waiting' })).items.map((m) => m.messageId);
      expect(waiting).toEqual([d2, d3, r2]);

      const { items, nextCursor } = await c.admin.blockedKeys();
      expect(nextCursor).toBeNull();
      expect(items).toEqual([
        {
          key: 'dead-head',
          headId: expect.any(String),
          headMessageId: d1,
          headStatus: 'dead',
          headAttempts: 1,
          lastError: expect.stringContaining('REJECTED: unknown schema'),
          nextAttemptAt: null,
          waiting: 2,
          oldestWaitingAgeMs: expect.any(Number),
        },
        {
          key: 'retry-head',
          headId: expect.any(String),
          headMessageId: r1,
          headStatus: 'retrying',
          headAttempts: 1,
          lastError: expect.stringContaining('broker busy'),
          nextAttemptAt: expect.any(Date),
          waiting: 1,
          oldestWaitingAgeMs: expect.any(Number),
        },
      ]);
      const head = await c.admin.get(r1 as string);
      expect(items[1]?.nextAttemptAt).toEqual(head?.availableAt);

      const first = await c.admin.blockedKeys({ limit: 1 });
      expect(first.items.map((k) => k.key)).toEqual(['dead-head']);
      const second = await c.admin.blockedKeys({ limit: 1, after: first.nextCursor });
      expect(second.items.map((k) => k.key)).toEqual(['retry-head']);
      expect(second.nextCursor).toBeNull();

      // Retrying the dead head unblocks its key.
      c.publisher.heal();
      await c.admin.retry([d1 as string]);
      expect((await c.admin.blockedKeys()).items.map((k) => k.key)).toEqual(['retry-head']);
    });

    it('reports no blocked keys when dead letters do not block (onDeadLetter: skip)', async () => {
      const c = await open({ ordering: { enabled: true, onDeadLetter: 'skip' } });
      const [s1, s2] = await c.enqueue([msg('s'), msg('s')]);
      c.publisher.fail(s1 as string, 'permanent', rejected('rejected'));
      await c.dispatcher.drain();
      expect(c.publisher.messageIds).toEqual([s2]);
      expect((await c.admin.blockedKeys()).items).toEqual([]);
    });

    it('finds claims whose lease expired, and leases held longer than asked', async () => {
      const c = await open();
      const [crashed, live, idle] = await c.enqueue([msg('c'), msg('l'), msg('i')]);
      // A dispatcher that claimed and died: its short lease runs out with nobody settling.
      const lost = await c.store.claim({ limit: 1, owner: 'crashed-instance', leaseMs: 300 });
      expect(lost.records.map((r) => r.messageId)).toEqual([crashed]);
      const held = await c.store.claim({ limit: 1, owner: 'slow-instance', leaseMs: 60_000 });
      expect(held.records.map((r) => r.messageId)).toEqual([live]);

      const expired = await waitFor('the short lease to expire', async () => {
        const page = await c.admin.stuckLeases();
        return page.items.length > 0 ? page : null;
      });
      expect(expired.items).toEqual([
        expect.objectContaining({
          messageId: crashed,
          status: 'pending',
          lockedBy: 'crashed-instance',
          leaseExpired: true,
          attempts: 1,
        }),
      ]);
      expect(expired.items[0]?.leasedForMs).toBeGreaterThanOrEqual(250);

      const long = await c.admin.stuckLeases({ leasedLongerThanMs: 200 });
      expect(long.items.map((m) => [m.messageId, m.lockedBy, m.leaseExpired])).toEqual([
        [crashed, 'crashed-instance', true],
        [live, 'slow-instance', false],
      ]);
      expect((await c.admin.stuckLeases({ leasedLongerThanMs: 60_000 })).items).toHaveLength(1);
      expect((await c.admin.counts()).leased).toBe(1);

      // The unlocker's sweep clears the expired lease: nothing stuck any more.
      expect(await c.store.releaseExpired()).toBe(1);
      expect((await c.admin.stuckLeases()).items).toEqual([]);
      expect((await c.admin.list({}, {})).items.map((m) => m.messageId)).toEqual([
        crashed,
        live,
        idle,
      ]);
    });

    // Issue 75, item 18: a 'leases' app's answer was "256 partitions, owner null".
    it("says delivery partitions are not in use on a 'leases' app, and why", async () => {
      const c = await open({ dispatcher: { claims: 'leases' } });
      await c.enqueue([msg('k1'), msg(null)]);
      await c.dispatcher.drain();
      const view = await c.admin.deliveryPartitions();
      expect(view).toEqual({
        inUse: false,
        reason: db.name === 'postgres' ? 'no-dispatcher' : 'database',
        message: expect.stringMatching(/^Delivery partitions are not in use on /) as string,
      });
      expect(view.inUse ? '' : view.message).toMatch(
        db.name === 'postgres' ? /dispatcher\.claims is 'leases'/ : /only PostgreSQL has them/,
      );
      expect(await c.admin.partitionOwners()).toBeNull();
    });

    if (db.name === 'postgres') {
      it('shows who delivers by partitions: each dispatcher, its heartbeat, share and state, and each partition and its moves', async () => {
        const name = await scope.table();
        const dispatcher = (instanceId: string) =>
          scope.open({
            ...dispatchTestApp(new RecordingPublisher(), {
              autoStart: true,
              instanceId,
              dispatcher: { claims: 'partitions', partitionTimeoutMs: 3_000 },
            }),
            table: name,
          });
        const a = await dispatcher('adm-a');
        const b = await dispatcher('adm-b');
        const holding = async (n: number) =>
          waitFor(
            `${n} dispatcher(s) holding every partition`,
            async () => {
              const view = await b.admin.deliveryPartitions();
              return view.inUse &&
                view.unowned === 0 &&
                view.dispatchers.length === n &&
                view.dispatchers.every((d) => d.partitions > 0)
                ? view
                : null;
            },
            { timeoutMs: 20_000 },
          );
        const both = await holding(2);
        expect(both.total).toBe(256);
        expect(both.dispatchers.map((d) => d.instanceId)).toEqual(['adm-a', 'adm-b']);
        for (const d of both.dispatchers) {
          expect(d).toMatchObject({ state: 'delivering', validMs: 3_000 });
          expect(d.id).toMatch(new RegExp(`^${d.instanceId ?? ''}#`));
          expect(d.heartbeatAgeMs).toBeLessThan(3_000);
          expect(d.joinedAt).toBeInstanceOf(Date);
          expect(d.lastTakenAt).toBeInstanceOf(Date);
          expect(d.ranges).toMatch(/^[0-9]+(-[0-9]+)?(, [0-9]+(-[0-9]+)?)*$/);
        }
        expect(both.dispatchers.reduce((n, d) => n + d.partitions, 0)).toBe(256);
        expect(both.dispatchers.reduce((n, d) => n + d.share, 0)).toBeCloseTo(1);
        expect(both.partitions.map((p) => p.partition)).toEqual([...Array(256).keys()]);
        // Each dispatcher's count and ranges are the partitions the rows name it for.
        for (const d of both.dispatchers) {
          expect(both.partitions.filter((p) => p.owner === d.id)).toHaveLength(d.partitions);
        }
        // Every partition was taken at least once; the partitions B took from A were taken twice.
        expect(both.moves.total).toBeGreaterThanOrEqual(256);
        expect(both.moves.lastAt).toBeInstanceOf(Date);
        // The deprecated read, as before: one row per owner, live.
        expect(await b.admin.partitionOwners()).toEqual(
          both.dispatchers.map((d): unknown =>
            expect.objectContaining({
              owner: d.id,
              label: d.instanceId,
              partitions: d.partitions,
              live: true,
            }),
          ),
        );

        // A leaves (a graceful stop hands its partitions back); B takes them: one move more each.
        const [left] = both.dispatchers;
        await a.close();
        const alone = await holding(1);
        expect(alone.dispatchers.map((d) => d.instanceId)).toEqual(['adm-b']);
        expect(alone.dispatchers[0]?.partitions).toBe(256);
        expect(alone.moves.total).toBeGreaterThanOrEqual(
          both.moves.total + (left?.partitions ?? 0),
        );
        expect(alone.moves.lastAt?.getTime()).toBeGreaterThan(both.moves.lastAt?.getTime() ?? 0);
        const moved = alone.partitions.filter((p) => p.since > (both.moves.lastAt ?? new Date()));
        expect(moved.length).toBeGreaterThanOrEqual(left?.partitions ?? 257);
        // The latest move: what A held, taken by B at one moment.
        const [latest] = alone.moves.latest;
        expect(latest).toMatchObject({ owner: alone.dispatchers[0]?.id, at: alone.moves.lastAt });
        expect(alone.moves.latest.reduce((n, m) => n + m.partitions, 0)).toBe(256);
      });

      it('says delivery partitions are not in use on a table without schema step 9', async () => {
        const name = await scope.table();
        const c = await scope.open({ table: name });
        await scope.ds.query(`DROP TABLE "${name}_owners"`);
        const view = await c.admin.deliveryPartitions();
        expect(view).toMatchObject({ inUse: false, reason: 'schema' });
        expect(view.inUse ? '' : view.message).toMatch(/schema step 9 .*outbox schema migrate/);
        expect(await c.admin.partitionOwners()).toBeNull();
      });
    }
  });
}
