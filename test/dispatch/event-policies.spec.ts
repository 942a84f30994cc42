import { Injectable } from '@nestjs/common';
import {
  OnOutboxDeadLetter,
  OutboxEvent,
  OutboxOptionsError,
  type OutboxFallbackResult,
  type OutboxMessage,
  type OutboxRecord,
} from '../../lib';
import { CapturingLogger } from '../support/capturing-logger';
import { msg } from '../support/dispatch-fixtures';
import { storedId } from '../support/databases';
import {
  dispatchTestApp,
  dispatchUntil,
  mergeOutboxOptions,
  quoteTable,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { expectNever } from '../support/wait-for';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
} from '../../lib/store/schema/outbox-table-ddl';
import { CLAIM_LOOP } from '../support/test-claims';

// Per-event-type policies: one instance delivers event types with different needs. A type's
// onDeadLetter decides whether its dead letter holds its key (both ways round from the module's
// default), its retry budget is its own, a message past its type's expiry is dead-lettered
// without being published, and the cleaner keeps each type's rows as long as its policy says.

const CACHE = 'cache.invalidate';
const PAYMENT = 'payment.captured';
const OTHER = 'order.event';

/** Matches the message whose payload names it (A1, B2…): a failure scripted before it commits. */
const named =
  (name: string) =>
  (r: OutboxRecord): boolean =>
    (JSON.parse(String(r.payload)) as { name?: string }).name === name;

const typed = (key: string, name: string, type: string, extra: Partial<OutboxMessage> = {}) =>
  msg(key, { name }, { type, ...extra });

@OutboxEvent({ topic: 'payments', type: PAYMENT, policy: { onDeadLetter: 'skip' } })
class PaymentCaptured {}

/** The app's fallbacks: a payment is refunded elsewhere (settled) unless the refund fails. */
@Injectable()
class PaymentFallbacks {
  readonly calls: { messageId: string; error: string }[] = [];

  @OnOutboxDeadLetter(PAYMENT)
  refund(record: OutboxRecord, error: unknown): OutboxFallbackResult | undefined {
    this.calls.push({ messageId: record.messageId, error: String(error) });
    const { name } = JSON.parse(String(record.payload)) as { name: string };
    if (name.startsWith('refund-fails')) throw new Error('refund service down');
    if (name.startsWith('no-refund')) return undefined;
    return { settled: true };
  }

  @OnOutboxDeadLetter(CACHE, { outbox: 'another-instance' })
  notMine(): OutboxFallbackResult {
    return { settled: true };
  }
}

// What holds whatever the source of new messages (the table's poll or the database's log):
// retries and dead letters come back through the table, swept every second on the log source.
for (const source of SOURCE_CASES) {
  describeSource(source, 'per-event policies', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_pol' });
    const src = useSource(scope, source);
    const swept = { sweepIntervalMs: 1_000 } as const;

    /** Commits each message in its own transaction; resolves to their ids by payload name. */
    async function commitEach(
      h: { commit: (m: OutboxMessage[]) => Promise<string[]> },
      messages: readonly OutboxMessage[],
    ): Promise<Record<string, string>> {
      const ids: Record<string, string> = {};
      for (const m of messages) {
        const name = (m.payload as { name: string }).name;
        ids[name] = (await h.commit([m]))[0] as string;
      }
      return ids;
    }

    it.each([
      ['block', 'skip'],
      ['skip', 'block'],
    ] as const)(
      "module onDeadLetter '%s', a type with '%s': each dead head holds its key or not by its own type",
      async (moduleRule, typeRule) => {
        const publisher = new RecordingPublisher();
        const h = await src.boot(
          publisher,
          {
            ordering: { onDeadLetter: moduleRule },
            policies: { [CACHE]: { onDeadLetter: typeRule } },
          },
          swept,
        );
        publisher.fail(named('A1'), 'permanent');
        publisher.fail(named('B1'), 'permanent');
        // Key A carries the type with a policy, key B the module's default type.
        const ids = await commitEach(h, [
          typed('A', 'A1', CACHE),
          typed('B', 'B1', OTHER),
          typed('A', 'A2', CACHE),
          typed('B', 'B2', OTHER),
          typed('A', 'A3', CACHE),
          typed('B', 'B3', OTHER),
        ]);
        const [skipping, blocking] = typeRule === 'skip' ? ['A', 'B'] : ['B', 'A'];
        const dead = `${skipping}1`;
        const held = `${blocking}1`;

        await src.deliver(
          h,
          `both heads dead, and the later messages of ${skipping}`,
          async () =>
            publisher.sentForKey(skipping).length === 2 &&
            (await h.row(ids[held] as string)).status === 'dead',
        );
        await expectNever(
          `a later message of ${blocking} published`,
          () => publisher.sentForKey(blocking).length > 0,
          1_500,
        );
        expect(publisher.sentForKey(skipping)).toEqual([ids[`${skipping}2`], ids[`${skipping}3`]]);
        expect(await h.row(ids[dead] as string)).toMatchObject({ status: 'dead', attempts: 1 });
        for (const later of [`${blocking}2`, `${blocking}3`]) {
          const row = await h.row(ids[later] as string);
          expect(['pending', 'waiting']).toContain(row.status);
          expect(row).toMatchObject({ attempts: 0, lockedBy: null });
        }
        // The admin names the policy each dead message is under, and what it does to its key.
        const cacheWhy = await h.admin.why(ids.A1 as string);
        expect(cacheWhy.message?.policy).toMatchObject({ name: CACHE, onDeadLetter: typeRule });
        expect(cacheWhy.reason).toContain(
          typeRule === 'skip'
            ? `Dead under policy '${CACHE}': onDeadLetter 'skip', so later messages of its key go on.`
            : `Dead under policy '${CACHE}': onDeadLetter 'block', so it holds back the later messages of key "A"`,
        );
        expect((await h.admin.get(ids.B1 as string))?.policy).toMatchObject({
          name: 'default',
          onDeadLetter: moduleRule,
        });
        expect(h.admin.policyList().map((p) => [p.name, p.onDeadLetter])).toEqual([
          ['default', moduleRule],
          [CACHE, typeRule],
        ]);
        expect(await h.admin.blockedKeys()).toMatchObject({ items: [{ key: blocking }] });

        // Requeued, the blocking head goes first and its key flows in order.
        publisher.heal();
        expect(await h.outbox.retryDead([ids[held] as string])).toBe(1);
        await src.deliver(
          h,
          `${blocking}'s messages`,
          () => publisher.sentForKey(blocking).length === 3,
        );
        expect(publisher.sentForKey(blocking)).toEqual([
          ids[`${blocking}1`],
          ids[`${blocking}2`],
          ids[`${blocking}3`],
        ]);
      },
    );

    it("applies each type's retry budget: a payment dies after its 2 attempts while other types keep retrying", async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(
        publisher,
        { policies: { [PAYMENT]: { retry: { maxAttempts: 2, initialDelayMs: 100 } } } },
        swept,
      );
      publisher.fail(() => true, 'retryable');
      const ids = await commitEach(h, [typed('P', 'P1', PAYMENT), typed('O', 'O1', OTHER)]);

      await src.deliver(
        h,
        'the payment dead and the other message failed thrice',
        async () =>
          (await h.row(ids.P1 as string)).status === 'dead' &&
          (await h.row(ids.O1 as string)).attempts >= 3,
        20_000,
      );
      expect(await h.row(ids.P1 as string)).toMatchObject({ status: 'dead', attempts: 2 });
      expect(publisher.attemptsOf(ids.P1 as string)).toBe(2);
      // The module's budget is 5: the other type is still being retried.
      expect((await h.row(ids.O1 as string)).status).toBe('pending');
      const history = (await h.admin.get(ids.P1 as string))?.attemptHistory ?? [];
      expect(history.map((a) => a.outcome)).toEqual(['retry', 'dead']);
    });

    it('dead-letters unpublished a message past its expiry, and at once a retry that would fall past it', async () => {
      const publisher = new RecordingPublisher();
      const h = await src.boot(
        publisher,
        {
          policies: {
            [CACHE]: { maxAgeMs: 400 },
            [PAYMENT]: { maxAgeMs: 1_000, retry: { initialDelayMs: 2_000 } },
          },
        },
        swept,
      );
      publisher.fail(named('P1'), 'retryable', { times: 1 });
      const ids = await commitEach(h, [
        // Due only after its expiry: claimed, it is already too old to publish.
        typed('C', 'C1', CACHE, { delayMs: 800 }),
        typed('D', 'D1', CACHE),
        typed('P', 'P1', PAYMENT),
      ]);

      await src.deliver(
        h,
        'the late cache message and the payment dead, the fresh cache message delivered',
        async () =>
          (await h.row(ids.C1 as string)).status === 'dead' &&
          (await h.row(ids.P1 as string)).status === 'dead' &&
          (await h.row(ids.D1 as string)).status === 'delivered',
        15_000,
      );
      expect(publisher.attemptsOf(ids.C1 as string)).toBe(0);
      const late = await h.admin.get(ids.C1 as string);
      expect(late?.lastError).toMatch(
        /^OutboxMessageExpiredError: expired: not delivered within 400 ms of its enqueue \(policy 'cache\.invalidate': maxAgeMs 400\)/,
      );
      expect(late?.attemptHistory).toMatchObject([
        { outcome: 'dead', errorClass: 'OutboxMessageExpiredError' },
      ]);
      // Never published, so never attempted: the claim's count is given back, and the reason
      // says it expired unpublished rather than "after 1 attempt(s)".
      expect(late?.attempts).toBe(0);
      const why = await h.admin.why(ids.C1 as string);
      expect(why?.reason).toMatch(
        /^Dead-lettered at .* unpublished: it expired before any attempt/,
      );
      expect(why?.reason).not.toMatch(/attempt\(s\)/);
      // One attempt, then dead at once: its 2 s backoff would end past its 1 s expiry.
      expect(publisher.attemptsOf(ids.P1 as string)).toBe(1);
      const payment = await h.admin.get(ids.P1 as string);
      expect(payment).toMatchObject({ attempts: 1, status: 'dead' });
      expect(payment?.lastError).toMatch(/expired: .*its next retry would fall past that/);
      expect(payment?.attemptHistory.map((a) => [a.outcome, a.errorClass])).toEqual([
        ['dead', 'OutboxMessageExpiredError'],
      ]);

      // A retry could only expire them again (and under 'block' hold their key again): refused,
      // named in the report, the rows left as they are.
      const expired = [ids.C1, ids.P1] as string[];
      expect(await h.admin.retry(expired)).toEqual({ requeued: 0, resequenced: 0, expired });
      expect(await h.admin.retryWhere({ all: true })).toEqual({
        requeued: 0,
        resequenced: 0,
        expired,
      });
      for (const id of expired) expect((await h.row(id)).status).toBe('dead');
      expect(publisher.attemptsOf(ids.C1 as string)).toBe(0);
    });

    it("calls the type's fallback before dead-lettering: settled, it is delivered; declined or failing, dead with the fallback noted", async () => {
      const publisher = new RecordingPublisher();
      const table = await scope.table('outbox_s');
      const observed = await src.prepare(table, swept);
      const h = await scope.open({
        ...dispatchTestApp(
          publisher,
          mergeOutboxOptions({ ordering: { onDeadLetter: 'block' } }, observed),
        ),
        table,
        providers: [PaymentFallbacks],
      });
      await src.started(table);
      const fallbacks = h.moduleRef.get(PaymentFallbacks);
      publisher.fail(() => true, 'permanent');
      const ids = await commitEach(h, [
        typed('P', 'refunded', PAYMENT),
        typed('P', 'refunded-later', PAYMENT),
        typed('Q', 'no-refund', PAYMENT),
        typed('R', 'refund-fails', PAYMENT),
        typed('S', 'no-fallback', CACHE),
      ]);

      await src.deliver(h, 'every message settled or dead', async () =>
        (await h.rows()).every((r) => r.status === 'delivered' || r.status === 'dead'),
      );
      const status = new Map((await h.rows()).map((r) => [r.messageId, r.status]));
      // Settled by the fallback: delivered, and its key went on to the next message.
      expect(status.get(ids.refunded as string)).toBe('delivered');
      expect(status.get(ids['refunded-later'] as string)).toBe('delivered');
      expect(status.get(ids['no-refund'] as string)).toBe('dead');
      expect(status.get(ids['refund-fails'] as string)).toBe('dead');
      // The cache type's fallback serves another instance only.
      expect(status.get(ids['no-fallback'] as string)).toBe('dead');
      expect(fallbacks.calls.map((c) => c.messageId).sort()).toEqual(
        [ids.refunded, ids['refunded-later'], ids['no-refund'], ids['refund-fails']].sort(),
      );
      expect(fallbacks.calls[0]?.error).toMatch(/PermanentPublishError/);
      // A fallback that let its message die is noted in its last error and attempt history.
      const failed = await h.admin.get(ids['refund-fails'] as string);
      expect(failed?.lastError).toMatch(
        /fallback PaymentFallbacks\.refund failed: Error: refund service down$/,
      );
      expect(failed?.attemptHistory.map((a) => [a.outcome, a.errorClass, a.error])).toEqual([
        ['dead', 'PermanentPublishError', failed?.lastError],
      ]);
      expect((await h.admin.get(ids['no-refund'] as string))?.lastError).toMatch(
        /fallback PaymentFallbacks\.refund declined$/,
      );
      const refunded = await h.admin.get(ids.refunded as string);
      expect(refunded?.lastError).toBeNull();
      // The settling run is in the attempt history, written by the settle that delivered it.
      expect(
        refunded?.attemptHistory.map((a) => [a.attempt, a.outcome, a.errorClass, a.error]),
      ).toEqual([
        [
          1,
          'fallback',
          'PermanentPublishError',
          expect.stringMatching(
            /^fallback PaymentFallbacks\.refund settled it after: PermanentPublishError: /,
          ) as unknown,
        ],
      ]);
    });
  });
}

// The cleaner and the bootstrap checks are the table's and the module's, whatever the source.
for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `per-event policies on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_polc', options: CLAIM_LOOP });

    it("settles through a fallback on a table without schema step 8: delivered, with no 'fallback' history row", async () => {
      const publisher = new RecordingPublisher();
      const table = await scope.table('outbox_polc7');
      const dialect = outboxDialectOf(scope.ds.options.type);
      // The history as tables made before step 8 have it: its check refuses 'fallback'.
      await outboxDatabase(dialect).schema.fallbackOutcome?.drop(
        (sql, params) => scope.ds.query(sql, params),
        tableNamesFor(dialect, { tableName: table }),
      );
      const h = await scope.open({
        ...dispatchTestApp(publisher, {}),
        table,
        providers: [PaymentFallbacks],
      });
      publisher.fail(() => true, 'permanent');
      const [refunded, dead] = await h.commit([
        typed('P', 'refunded', PAYMENT),
        typed('Q', 'no-refund', PAYMENT),
      ]);
      await dispatchUntil(h, 'both settled', async () =>
        (await h.rows()).every((r) => r.status === 'delivered' || r.status === 'dead'),
      );
      expect((await h.row(refunded as string)).status).toBe('delivered');
      expect((await h.admin.get(refunded as string))?.attemptHistory).toEqual([]);
      // The other outcomes are recorded as before.
      expect((await h.admin.get(dead as string))?.attemptHistory.map((a) => a.outcome)).toEqual([
        'dead',
      ]);
    });

    it("purges each type's delivered and dead rows by its own retention, the other types by the module's", async () => {
      const publisher = new RecordingPublisher();
      const h = await scope.open({
        publisher,
        tablePrefix: 'outbox_polc',
        logger: ['error', 'fatal'],
        options: {
          retry: { maxAttempts: 1 },
          cleaner: { deliveredRetentionMs: 3_600_000 },
          events: [PaymentCaptured],
          policies: {
            [CACHE]: { deliveredRetentionMs: 0 },
            [OTHER]: { deadRetentionMs: 60_000 },
          },
        },
      });
      publisher.fail(named('dead-other'), 'permanent');
      publisher.fail(named('dead-payment'), 'permanent');
      const ids = await h.commit([
        typed('a', 'cache', CACHE),
        typed('b', 'kept', 'stock.moved'),
        typed('c', 'dead-other', OTHER),
        typed('d', 'dead-payment', PAYMENT),
      ]);
      await h.runUntilIdle();
      expect((await h.rows()).map((r) => r.status).sort()).toEqual([
        'dead',
        'dead',
        'delivered',
        'delivered',
      ]);
      // Dead for two hours: past the 60 s of its type, not past the module's (kept forever).
      const t = quoteTable(scope.ds, h.table);
      const back =
        db.name === 'postgres'
          ? `dead_at = dead_at - interval '2 hours'`
          : db.name === 'mariadb'
            ? `dead_at = dead_at - INTERVAL 2 HOUR`
            : `dead_at = strftime('%Y-%m-%d %H:%M:%f', dead_at, '-2 hours')`;
      const param = db.name === 'postgres' ? '$1' : '?';
      for (const id of [ids[2], ids[3]] as string[]) {
        await scope.ds.query(`UPDATE ${t} SET ${back} WHERE message_id = ${param}`, [
          storedId(db.name, id),
        ]);
      }

      expect(await h.cleaner.runOnce()).toEqual({ delivered: 1, dead: 1 });
      const left = new Map((await h.rows()).map((r) => [r.messageId, `${r.type} ${r.status}`]));
      expect(left).toEqual(
        new Map([
          [ids[1], 'stock.moved delivered'],
          [ids[3], `${PAYMENT} dead`],
        ]),
      );
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
    });

    it("names a type's policy in the dispatcher's lines for its retries and dead letters", async () => {
      const logger = new CapturingLogger();
      const publisher = new RecordingPublisher();
      const h = await scope.open({
        publisher,
        tablePrefix: 'outbox_polc',
        logger,
        options: {
          retry: { maxAttempts: 2, initialDelayMs: 0, jitter: 0 },
          policies: { [PAYMENT]: { maxAgeMs: 60_000 } },
        },
      });
      publisher.fail(() => true, 'retryable', { error: new Error('broker said no') });
      await h.commit([typed('p', 'p', PAYMENT), typed('o', 'o', OTHER)]);
      await h.runUntilIdle();
      await h.runUntilIdle();
      const lines = logger.lines
        .filter((l) => l.context === 'OutboxDispatcher' && l.level === 'warn')
        .map((l) => l.message);
      expect(
        lines.filter((l) => l.includes(`(${PAYMENT} to orders, policy '${PAYMENT}')`)),
      ).toEqual([
        expect.stringMatching(/failed attempt 1, retrying in 0 ms: Error: broker said no/),
        expect.stringMatching(/dead-lettered after 2 attempt\(s\): Error: broker said no/),
      ]);
      // A type without a policy keeps the lines it always had (its first failure on the topic
      // came after the payment's, so it was logged at verbose).
      const all = logger.lines
        .filter((l) => l.context === 'OutboxDispatcher')
        .map((l) => l.message);
      expect(all.filter((l) => l.includes(`(${OTHER} to orders)`))).toHaveLength(2);
      expect(all.filter((l) => l.includes(`(${OTHER} to orders, policy`))).toEqual([]);
      // The start line names the types with a policy of their own.
      await h.dispatcher.start();
      const lifecycle = logger.lines
        .filter((l) => l.context === 'OutboxDispatcher')
        .map((l) => l.message);
      expect(lifecycle.filter((l) => l.startsWith('Dispatcher started'))).toEqual([
        expect.stringContaining(`, event policies for ${PAYMENT}, instance `),
      ]);
    });

    it('warns once per type when enqueue meets an event class whose policy this instance does not apply', async () => {
      const logger = new CapturingLogger();
      const h = await scope.open({
        tablePrefix: 'outbox_polc',
        logger,
        publisher: new RecordingPublisher(),
      });
      for (let i = 0; i < 2; i++) {
        await scope.ds.transaction((m) =>
          h.outbox.enqueue([new PaymentCaptured(), new PaymentCaptured()], m),
        );
      }
      const warned = logger.linesOf(/does not apply it/, 'warn', 'OutboxService');
      expect(warned.map((l) => l.message)).toEqual([
        `PaymentCaptured (type "${PAYMENT}") has an @OutboxEvent policy, but outbox "default" does not apply it: its dispatcher delivers this type under the module's defaults. List the class in the module's events option (or give the policy by type in policies).`,
      ]);
      expect(await h.rows()).toHaveLength(4);

      // An enqueue-only instance delivers nothing: the policies are the delivering instance's.
      const quiet = new CapturingLogger();
      const writer = await scope.open({ table: h.table, logger: quiet });
      await scope.ds.transaction((m) => writer.outbox.enqueue(new PaymentCaptured(), m));
      expect(quiet.linesOf(/does not apply it/, 'warn', 'OutboxService')).toEqual([]);
      expect(await h.rows()).toHaveLength(5);
    });

    it.each<[string, Record<string, unknown>, RegExp]>([
      [
        'a type name SQL would have to escape',
        { policies: { "pay'ment": { onDeadLetter: 'skip' } } },
        /cannot have a policy/,
      ],
      [
        'a type with two policies',
        { events: [PaymentCaptured], policies: { [PAYMENT]: {} } },
        /also has a policy from events\[0\]/,
      ],
      [
        'an unknown policy option',
        { policies: { [CACHE]: { maxAge: 1 } } },
        /policies\["cache\.invalidate"\]\.maxAge is not an option; did you mean .*maxAgeMs/,
      ],
    ])('fails the app start on %s', async (_name, options, message) => {
      const opened = scope.open({
        publisher: new RecordingPublisher(),
        tablePrefix: 'outbox_polc',
        logger: ['fatal'],
        options,
      });
      await expect(opened).rejects.toThrow(OutboxOptionsError);
      await expect(opened).rejects.toThrow(message);
    });
  });
}
