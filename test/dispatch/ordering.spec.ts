import {
  PublisherUnavailableError,
  type OutboxMessage,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { IN_FLIGHT_GRACE_MS } from '../../lib/store/shared-sql/claim-window';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import { readOutbox, storedId, TestOrder } from '../support/databases';
import { quoteTable } from '../support/outbox-harness';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import {
  describeSource,
  POLL_RUN_DATABASES,
  PUBLISH_WINDOW,
  SOURCE_CASES,
  useSource,
} from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, resolvesWithin, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Ordering: a key's messages are published in commit order, one at a time, whatever happens to
// its head (backoff, dead letter under 'block' or 'skip', a retried dead letter, a stuck key's
// backlog), with several batches in flight, and with transactions that overlap; other keys
// flow meanwhile, and enqueueing distinct keys never deadlocks.

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

/** Holds every batch that carries a message of `key` for `slowMs` before publishing it. */
class SlowKeyPublisher extends RecordingPublisher {
  constructor(
    private readonly key: string,
    public slowMs: number,
  ) {
    super();
  }

  override async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<PublishOutcome[]> {
    if (this.slowMs > 0 && messages.some((m) => m.key === this.key)) {
      await abortableDelay(this.slowMs, signal);
    }
    return super.publish(messages, signal);
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

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): a key's messages go out in commit order, one at a time, past a head
// that backs off or is dead ('block' and 'skip'), with several batches in flight, and with
// transactions that overlap. Retries and requeued dead letters come back through the table,
// which the log source sweeps every second here (5 s by default).
for (const source of SOURCE_CASES) {
  describeSource(source, 'ordering', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_o' });
    const src = useSource(scope, source);
    const swept = { sweepIntervalMs: 1_000 } as const;
    /** Matches the message whose payload names it (A1, B2…): a failure scripted before it commits. */
    const named =
      (name: string) =>
      (r: OutboxRecord): boolean =>
        (JSON.parse(String(r.payload)) as { name?: string }).name === name;
    const allDelivered = (h: { rows(): Promise<{ status: string }[]> }) => async () =>
      (await h.rows()).every((r) => r.status === 'delivered');

    /** Commits A1 B1 A2 B2 A3 B3, one transaction each; resolves to their ids by name. */
    async function interleaved(h: { commit: (m: OutboxMessage[]) => Promise<string[]> }) {
      const ids: Record<string, string> = {};
      for (const name of ['A1', 'B1', 'A2', 'B2', 'A3', 'B3'])
        ids[name] = (await h.commit([msg(name[0] as string, { name })]))[0] as string;
      return ids as Record<'A1' | 'B1' | 'A2' | 'B2' | 'A3' | 'B3', string>;
    }

    it('holds the later messages of a key while its head backs off, while other keys flow', async () => {
      const publisher = new RecordingPublisher();
      // The head's backoff is long enough to look at the table while it lasts.
      const h = await src.boot(publisher, { retry: { initialDelayMs: 2_000, jitter: 0 } }, swept);
      publisher.fail(named('A1'), 'retryable', { times: 1 });
      const ids = await interleaved(h);

      await src.deliver(
        h,
        "B's messages, and A1's first attempt",
        () => publisher.sentForKey('B').length === 3 && publisher.attemptsOf(ids.A1) === 1,
      );
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(publisher.sentForKey('A')).toEqual([]);
      // A2 and A3 were never even handed to the publisher while A1 backs off.
      expect(publisher.attemptsOf(ids.A2)).toBe(0);
      expect(publisher.attemptsOf(ids.A3)).toBe(0);
      await waitFor('A1 settled as a retry', async () => (await h.row(ids.A1)).attempts === 1);
      expect(await h.row(ids.A1)).toMatchObject({ status: 'pending', attempts: 1 });
      // Queued behind A1 (parked by a claim, or pending where the log left it to the table).
      for (const later of [ids.A2, ids.A3]) {
        expect(['pending', 'waiting']).toContain((await h.row(later)).status);
        expect(await h.row(later)).toMatchObject({ attempts: 0, lockedBy: null });
      }

      await src.deliver(h, 'A1 retried, then A2 and A3', allDelivered(h));
      expect(publisher.sentForKey('A')).toEqual([ids.A1, ids.A2, ids.A3]);
      expect(publisher.attemptsOf(ids.A1)).toBe(2);
      expect(publisher.attemptsOf(ids.A2)).toBe(1);
      expect(publisher.attemptsOf(ids.A3)).toBe(1);
    });

    it("with onDeadLetter 'block', a dead head keeps holding its key until an operator requeues it", async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, { ordering: { onDeadLetter: 'block' } }, swept);
      publisher.fail(named('A1'), 'permanent');
      const ids = await interleaved(h);

      await src.deliver(
        h,
        "B's messages, and A1 dead",
        async () =>
          publisher.sentForKey('B').length === 3 && (await h.row(ids.A1)).status === 'dead',
      );
      // Past a sweep of the table: the dead head still holds its key.
      await expectNever(
        'a message of A published',
        () => publisher.sentForKey('A').length > 0,
        1_500,
      );
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(await h.row(ids.A1)).toMatchObject({ status: 'dead', attempts: 1 });
      for (const later of [ids.A2, ids.A3]) {
        expect(['pending', 'waiting']).toContain((await h.row(later)).status);
        expect(await h.row(later)).toMatchObject({ attempts: 0, lockedBy: null });
        expect(publisher.attemptsOf(later)).toBe(0);
      }

      publisher.heal();
      expect(await h.outbox.retryDead()).toBe(1);
      await src.deliver(h, 'A1 requeued, then A2 and A3', allDelivered(h));
      expect(publisher.sentForKey('A')).toEqual([ids.A1, ids.A2, ids.A3]);
    });

    it("with onDeadLetter 'skip', the later messages of a dead head flow in order", async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(publisher, { ordering: { onDeadLetter: 'skip' } }, swept);
      publisher.fail(named('A1'), 'permanent');
      const ids = await interleaved(h);

      await src.deliver(
        h,
        'every message but A1 delivered',
        () => publisher.sentForKey('A').length === 2 && publisher.sentForKey('B').length === 3,
      );
      expect(publisher.sentForKey('A')).toEqual([ids.A2, ids.A3]);
      expect(publisher.sentForKey('B')).toEqual([ids.B1, ids.B2, ids.B3]);
      expect(await h.row(ids.A1)).toMatchObject({ status: 'dead', attempts: 1 });
      expect(publisher.attemptsOf(ids.A1)).toBe(1);
    });

    it('with ordering.enabled false, a later message of a key goes while an earlier one backs off', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(
        publisher,
        { ordering: { enabled: false }, retry: { initialDelayMs: 5_000, jitter: 0 } },
        swept,
      );
      publisher.fail(named('A1'), 'retryable', { times: 1 });
      const ids = await interleaved(h);
      await src.deliver(h, 'every message but A1', () => publisher.sentIds.length === 5);
      // Without per-key order nothing ranks A2 and A3 either: the log source may publish them in
      // one batch, each on its own.
      expect([...publisher.sentForKey('A')].sort()).toEqual([ids.A2, ids.A3].sort());
      expect(await h.row(ids.A1)).toMatchObject({ status: 'pending', attempts: 1 });
    });

    it('a batch carries at most ordering.maxRun messages of one key', async () => {
      const publisher = new RecordingPublisher();
      const batches: number[] = [];
      const h = await src.boot(
        publisher,
        {
          ordering: { maxRun: 3 },
          dispatcher: { batchSize: 50 },
          observer: { onBatch: (report) => batches.push(report.claimed) },
        },
        swept,
      );
      const ids = await h.commit(Array.from({ length: 10 }, (_, n) => msg('hot', { n })));
      await src.deliver(h, 'the hot key', () => publisher.sentForKey('hot').length === 10);
      expect(publisher.sentForKey('hot')).toEqual(ids);
      expect(Math.max(...batches)).toBeLessThanOrEqual(3);
    });

    it('every way a row can end, in every position of its key in one batch, decides for that row alone: a key moves past it only once it is delivered (or dead under skip)', async () => {
      // Five messages a key in batches of two: the message at position p ends one way (the
      // others are delivered), first or second in its batch, with later messages of its key
      // already read and queued behind the batch. A dead letter that follows a delivered
      // message of its key in the same batch must not free the key: the settle is read per
      // row, never per key.
      const ends = ['retry', 'dead-block', 'dead-skip', 'expired-block'] as const;
      const positions = [1, 2, 3, 4] as const;
      const messages = [1, 2, 3, 4, 5] as const;
      // Slow enough that the next reads queue a key's later messages behind its batch.
      const publisher = new RecordingPublisher().slow(40);
      const h = await src.boot(
        publisher,
        {
          dispatcher: { batchSize: 2 },
          ordering: { onDeadLetter: 'block' },
          retry: { initialDelayMs: 300, jitter: 0 },
          policies: {
            'order.skipping': { onDeadLetter: 'skip' },
            'order.expiring': { maxAgeMs: 1 },
          },
        },
        swept,
      );
      const ids = new Map<string, string[]>();
      const keyOf = (end: string, p: number): string => `${end}@${p}`;
      for (const end of ends) {
        for (const p of positions) {
          const key = keyOf(end, p);
          const type = (n: number): string =>
            n !== p
              ? 'order.event'
              : end === 'dead-skip'
                ? 'order.skipping'
                : end === 'expired-block'
                  ? 'order.expiring'
                  : 'order.event';
          if (end === 'retry') publisher.fail(named(`${key}#${p}`), 'retryable', { times: 1 });
          if (end === 'dead-block' || end === 'dead-skip')
            publisher.fail(named(`${key}#${p}`), 'permanent');
          ids.set(
            key,
            await h.commit(
              messages.map((n) => msg(key, { name: `${key}#${n}` }, { type: type(n) })),
            ),
          );
        }
      }
      const idsOf = (end: string, p: number): string[] => ids.get(keyOf(end, p)) ?? [];
      const at = (end: string, p: number): string => idsOf(end, p)[p - 1] as string;
      const without = (list: string[], p: number): string[] => list.filter((_, i) => i !== p - 1);

      await src.deliver(h, 'every key as far as it may go', async () => {
        for (const p of positions) {
          if (publisher.sentForKey(keyOf('retry', p)).length < 5) return false;
          if (publisher.sentForKey(keyOf('dead-skip', p)).length < 4) return false;
          for (const end of ['dead-block', 'expired-block'])
            if ((await h.row(at(end, p))).status !== 'dead') return false;
        }
        return true;
      });
      // Past a sweep of the table: nothing behind a dead message under 'block' goes.
      await expectNever(
        'a message published past a dead one',
        () =>
          positions.some(
            (p) =>
              publisher.sentForKey(keyOf('dead-block', p)).length > p - 1 ||
              publisher.sentForKey(keyOf('expired-block', p)).length > p - 1,
          ),
        1_500,
      );
      for (const p of positions) {
        expect(publisher.sentForKey(keyOf('retry', p))).toEqual(idsOf('retry', p));
        expect(publisher.attemptsOf(at('retry', p))).toBe(2);
        expect(publisher.sentForKey(keyOf('dead-skip', p))).toEqual(
          without(idsOf('dead-skip', p), p),
        );
        expect(await h.row(at('dead-skip', p))).toMatchObject({ status: 'dead' });
        for (const end of ['dead-block', 'expired-block']) {
          expect(publisher.sentForKey(keyOf(end, p))).toEqual(idsOf(end, p).slice(0, p - 1));
          for (const later of idsOf(end, p).slice(p)) {
            expect(publisher.attemptsOf(later)).toBe(0);
            expect(['pending', 'waiting']).toContain((await h.row(later)).status);
          }
        }
        expect(await h.row(at('expired-block', p))).toMatchObject({ status: 'dead', attempts: 0 });
      }

      // Requeued, the dead head goes first and its key follows in order.
      publisher.heal();
      const heads = positions.map((p) => at('dead-block', p));
      expect(await h.outbox.retryDead(heads)).toBe(heads.length);
      await src.deliver(h, 'the requeued keys delivered', () =>
        positions.every((p) => publisher.sentForKey(keyOf('dead-block', p)).length === 5),
      );
      for (const p of positions)
        expect(publisher.sentForKey(keyOf('dead-block', p))).toEqual(idsOf('dead-block', p));
    });

    if (source.db.name !== 'sqlite') {
      // SQLite serialises writers, so two enqueuing transactions cannot interleave there.
      it('publishes a key in commit order when enqueuing transactions overlap', async () => {
        const publisher = new RecordingPublisher();
        const h = await src.boot(publisher);
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
        const t1 = scope.ds.transaction(async (m) => {
          firstId = (await h.outbox.enqueue([msg('K', { n: 1 })], m))[0] as string;
          t1Enqueued.fire();
          await t1MayCommit.fired;
        });
        await t1Enqueued.fired;
        const t2 = scope.ds
          .transaction(async (m) => {
            await m.save(TestOrder, { customer: 'second' });
            t2Enqueuing.fire();
            secondId = (await h.outbox.enqueue([msg('K', { n: 2 })], m))[0] as string;
          })
          .then(() => (secondDone = true));
        await t2Enqueuing.fired;
        // T2 waits on K's enqueue lock until T1 commits: it cannot finish in this window.
        await expectNever('T2 committing while T1 holds K', () => secondDone, 300);
        expect(publisher.calls).toHaveLength(0);
        t1MayCommit.fire();
        await Promise.all([t1, t2]);

        // A transaction that began earlier but commits later is published later: the slow one
        // begins, the fast one begins, enqueues and commits, then the slow one enqueues and commits.
        const slowBegan = signal();
        const fastCommitted = signal();
        let late = '';
        let early = '';
        const slow = scope.ds.transaction(async (m) => {
          await m.save(TestOrder, { customer: 'slow' });
          slowBegan.fire();
          await fastCommitted.fired;
          late = (await h.outbox.enqueue([msg('L', { n: 'late' })], m))[0] as string;
        });
        await slowBegan.fired;
        await scope.ds.transaction(async (m) => {
          early = (await h.outbox.enqueue([msg('L', { n: 'early' })], m))[0] as string;
        });
        fastCommitted.fire();
        await slow;

        await src.deliver(h, 'K and L', () => publisher.sentIds.length >= 4);
        expect(publisher.sentForKey('K')).toEqual([firstId, secondId]);
        expect(publisher.sentForKey('L')).toEqual([early, late]);
      });
    }

    it('with batchesInFlight 3, 30 keys × 20 messages under random per-message publish delays: all delivered once, each key in commit order, one message per key in flight', async () => {
      const seed = 0x5eed ^ Number(process.pid);
      const random = seeded(seed);
      const publisher = new ConcurrentJitterPublisher(random, 15);
      const table = await scope.table();
      const app = await src.dispatcherApp(table, publisher, {
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

      // The log's dispatcher runs already (its reader read every commit above).
      if (source.name === 'poll') await app.dispatcher.start();
      await waitFor('every message acknowledged', () => publisher.acked.length >= all.length, {
        timeoutMs: 60_000,
      });
      await waitFor(
        'every row settled as delivered',
        async () => (await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered'),
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
      // Batches really overlapped, and never more than batchesInFlight of them (as a stream:
      // slices, each of one message at least, never more than the window's messages). On the
      // log source the table's sweep has batchesInFlight of its own beside the reader's
      // (docs/log-tailing.md): rows the log handed over before the table showed them go to it.
      expect(publisher.maxConcurrentCalls).toBeGreaterThanOrEqual(2);
      expect(publisher.maxConcurrentCalls).toBeLessThanOrEqual(
        PUBLISH_WINDOW ?? (source.name === 'log' ? 2 * 3 : 3),
      );
    });
  });
}

// The claim's own ordering machinery: runs and rounds in one batch, exhausted runs, parking of a
// stuck key's backlog and the in-flight grace, a dead letter retried behind a message in flight,
// key-lock buckets. The log leaves all of it to the table (ARCHITECTURE.md, "Log tailing: two
// paths, one owner"); the sources project runs only the block above.
for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `ordering on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_o', options: CLAIM_LOOP });

    const { boot } = dispatchApps(scope);

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

    it('runs of a key are sent one message after another; an outage part way keeps what was acknowledged and hands the rest back unsent, no attempt counted', async () => {
      const calls: string[][] = [];
      let firstBatch = true;
      // The broker goes away on the first batch's second publish call (its second round).
      const recording = new (class extends RecordingPublisher {
        override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
          calls.push(messages.map((m) => m.messageId));
          return firstBatch && calls.length === 2
            ? Promise.reject(new PublisherUnavailableError('connection lost mid-batch'))
            : super.publish(messages, signal);
        }
      })();
      const h = await boot(recording, { dispatcher: { maxOutagePauseMs: 100 } });
      const ids = await h.commit(['R', 'R', 'R', 'S', 'S', 'S'].map((key, n) => msg(key, { n })));
      const [r1, r2, r3, s1, s2, s3] = ids as [string, string, string, string, string, string];

      const first = await h.dispatcher.runOnce();
      firstBatch = false;
      // Round 1 is both heads; round 2 failed as a whole.
      expect(first).toMatchObject({
        claimed: 6,
        published: 2,
        released: 4,
        retried: 0,
        deadLettered: 0,
      });
      expect(calls[0]?.sort()).toEqual([r1, s1].sort());
      expect(calls[1]?.sort()).toEqual([r2, s2].sort());
      expect(recording.sentIds.sort()).toEqual([r1, s1].sort());
      for (const id of [r2, r3, s2, s3]) {
        expect(await h.row(id)).toMatchObject({ attempts: 0, lockedBy: null });
      }

      await waitFor('the outage pause to end', () => h.dispatcher.status().pausedUntil === null);
      await h.runUntilIdle();
      expect(recording.sentForKey('R')).toEqual([r1, r2, r3]);
      expect(recording.sentForKey('S')).toEqual([s1, s2, s3]);
      expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(
        true,
      );
    });

    it('a first round that times out counts an attempt for what it sent only: the rest of each run goes back unsent, never dead-lettered with its head', async () => {
      const calls: string[][] = [];
      // The broker hangs on the first publish call (the first batch's first round) until the
      // dispatcher gives up on it; then it answers normally.
      const recording = new (class extends RecordingPublisher {
        override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
          calls.push(messages.map((m) => m.messageId));
          if (calls.length > 1) return super.publish(messages, signal);
          return new Promise<PublishOutcome[]>((_, reject) =>
            signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }),
          );
        }
      })();
      // One attempt allowed: a timed-out message is dead at once, so a follower charged with
      // its head's timeout would be dead-lettered without ever having been sent.
      const h = await boot(recording, {
        retry: { maxAttempts: 1 },
        ordering: { onDeadLetter: 'skip' },
        dispatcher: { publishTimeoutMs: 300, maxOutagePauseMs: 100 },
      });
      const ids = await h.commit(['R', 'R', 'R', 'S', 'S', 'S'].map((key, n) => msg(key, { n })));
      const [r1, r2, r3, s1, s2, s3] = ids as [string, string, string, string, string, string];

      const first = await h.dispatcher.runOnce();
      expect(calls).toHaveLength(1);
      expect(calls[0]?.sort()).toEqual([r1, s1].sort());
      // Only the heads were handed to the broker: they count the attempt (and, at the limit,
      // are dead); their followers go back with no attempt counted.
      expect(first).toMatchObject({ claimed: 6, published: 0, deadLettered: 2, released: 4 });
      for (const id of [r1, s1]) expect(await h.row(id)).toMatchObject({ status: 'dead' });
      for (const id of [r2, r3, s2, s3]) {
        expect(await h.row(id)).toMatchObject({ attempts: 0, lockedBy: null });
        expect((await h.row(id))?.status).not.toBe('dead');
      }

      await waitFor('the pause to end', () => h.dispatcher.status().pausedUntil === null);
      await h.runUntilIdle();
      // 'skip': the keys move on past their dead heads, in order.
      expect(recording.sentForKey('R')).toEqual([r2, r3]);
      expect(recording.sentForKey('S')).toEqual([s2, s3]);
      for (const id of [r2, r3, s2, s3]) {
        expect(await h.row(id)).toMatchObject({ status: 'delivered', attempts: 1 });
      }
    });

    it('a run whose middle message is exhausted (claimed past maxAttempts without an outcome) sends what is before it, dead-letters it unpublished, and holds what is behind it', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { retry: { maxAttempts: 3 } });
      const [k1, k2, k3] = (await h.commit(['K', 'K', 'K'].map((key, n) => msg(key, { n })))) as [
        string,
        string,
        string,
      ];
      // As if k2's earlier claims all ended in crashes: the next claim counts its fourth attempt.
      await scope.ds.query(
        `UPDATE ${quoteTable(scope.ds, h.table)} SET attempts = 3 WHERE message_id = ${
          db.name === 'postgres' ? '$1' : '?'
        }`,
        [storedId(scope.ds.options.type, k2)],
      );

      const report = await h.dispatcher.runOnce();
      expect(report).toMatchObject({ claimed: 3, published: 1, deadLettered: 1, released: 1 });
      expect(publisher.sentIds).toEqual([k1]);
      expect(await h.row(k2)).toMatchObject({ status: 'dead', attempts: 4 });
      expect(await h.row(k3)).toMatchObject({ attempts: 0, lockedBy: null });
      // The dead message holds its key ('block'): k3 never goes.
      await h.runUntilIdle();
      expect(publisher.sentIds).toEqual([k1]);
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
      // Parked (waiting): by a claim, or by the owner of their partition.
      expect(
        rows.filter((r) => backlog.includes(r.messageId)).every((r) => r.status === 'waiting'),
      ).toBe(true);
      expect(publisher.attemptsOf(backlog[0] as string)).toBe(0);

      publisher.heal();
      expect(await h.outbox.retryDead([head])).toBe(1);
      await h.dispatcher.drain();
      expect(publisher.sentForKey('stuck')).toEqual([head, ...backlog]);
    });

    it("a key's next messages wait for its batch in flight without being parked: no park, no promotion, order kept", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { dispatcher: { batchSize: 10, batchesInFlight: 2 } });
      const ids = { A: [] as string[], B: [] as string[] };
      for (let i = 0; i < 4; i++) {
        ids.A.push(...(await h.commit(Array.from({ length: 10 }, (_, n) => msg('A', { n })))));
        ids.B.push(...(await h.commit(Array.from({ length: 10 }, (_, n) => msg('B', { n })))));
      }
      // Every claim while a batch is in flight finds both keys' heads leased.
      const park = jest.spyOn(h.store, 'park');
      expect(await h.dispatcher.drain()).toBe(80);
      expect(park).not.toHaveBeenCalled();
      expect(publisher.sentForKey('A')).toEqual(ids.A);
      expect(publisher.sentForKey('B')).toEqual(ids.B);
      expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
    });

    it(`a slow publish holds its key's backlog only for the in-flight grace (${IN_FLIGHT_GRACE_MS} ms): then it is parked and the keys behind it flow`, async () => {
      const publisher = new SlowKeyPublisher('slow', 3 * IN_FLIGHT_GRACE_MS);
      const h = await boot(publisher, { dispatcher: { batchSize: 10, batchesInFlight: 2 } });
      // More of the slow key than a claim's window holds, then other keys behind it.
      const backlog = await h.commit(Array.from({ length: 100 }, (_, n) => msg('slow', { n })));
      const others = await h.commit(Array.from({ length: 5 }, (_, n) => msg(`other-${n}`)));
      const draining = h.dispatcher.drain();
      await publisher.until(
        (p) => others.every((id) => p.sentIds.includes(id)),
        10_000,
        'the keys behind the slow one',
      );
      // While the slow key's first batch was still publishing.
      expect(publisher.sentForKey('slow')).toEqual([]);
      publisher.slowMs = 0;
      await draining;
      await h.dispatcher.drain();
      expect(publisher.sentForKey('slow')).toEqual(backlog);
      expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
    });

    // A second dispatcher's row lease holds the key here: both are 'leases' dispatchers, since
    // dispatchers of one table never mix the two modes (docs/delivery.md, "Partitions").
    it("with onDeadLetter 'skip', retryDead() puts a dead message behind the key's message in flight, never beside it (dispatchers of 'leases': the other's row lease holds the key)", async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, {
        ordering: { onDeadLetter: 'skip' },
        dispatcher: { claims: 'leases' },
      });
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
        const t1 = scope.ds.transaction(async (m) => {
          await h.outbox.enqueue(msg(k1), m);
          await step();
          await h.outbox.enqueue(msg(k3), m);
        });
        const t2 = scope.ds.transaction(async (m) => {
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
