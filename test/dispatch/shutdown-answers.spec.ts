import { connect, type Channel, type ChannelModel } from 'amqplib';
import { DataSource } from 'typeorm';
import type { OutboxMessage, OutboxPublisher, OutboxRecord } from '../../lib';
import type { PublishOutcome } from '../../lib/publishers/outbox-publisher.interface';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { FaultProxy } from '../../lib/testing';
import { CapturingLogger } from '../support/capturing-logger';
import { serverOptions } from '../support/databases';
import { dispatchUntil, type OutboxApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith, SERVICES } from '../support/services';
import { POLL_RUN_DATABASES } from '../support/sources';
import { expectNever, resolvesWithin, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Shutdown past shutdownTimeoutMs aborts the publishes in flight (docs/delivery.md, "Graceful
// shutdown"). What the publisher answers the abort is recorded: what the broker confirmed is
// delivered and never published again, what was never written goes back with its attempt given
// back, the rest counts a timed-out attempt. A publish that does not answer keeps its messages
// leased while it runs, so no other instance sends one of them at the same time.

const RABBITMQ_URL = (host: string, port: number): string =>
  `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${host}:${port}`;

const msg = (n: number): OutboxMessage => ({
  topic: 'ledger',
  type: 'entry',
  key: `k${n}`,
  payload: { n },
});

/** A publisher as the dispatcher sees it, keeping each message's last answer. */
class AnswerRecorder implements OutboxPublisher {
  readonly answers = new Map<string, PublishOutcome>();

  constructor(private readonly inner: OutboxPublisher) {}

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes = [...(await this.inner.publish(records, signal))];
    records.forEach((r, i) => {
      const outcome = outcomes[i];
      if (outcome !== undefined) this.answers.set(r.messageId, outcome);
    });
    return outcomes;
  }

  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }

  /** The messages whose last answer was a broker confirm. */
  confirmed(): string[] {
    return [...this.answers].filter(([, o]) => o.ok).map(([id]) => id);
  }
}

/** A publisher deaf to the abort: its call returns only when the test lets it. */
class DeafPublisher implements OutboxPublisher {
  calls = 0;
  /** Messages it published (once let go with `'published'`). */
  readonly sent: string[] = [];
  private let: ((answer: 'published' | 'never written') => void) | undefined;

  async publish(records: readonly OutboxRecord[]): Promise<PublishOutcome[]> {
    this.calls += 1;
    const answer = await new Promise<'published' | 'never written'>((resolve) => {
      this.let = resolve;
    });
    if (answer === 'published') {
      this.sent.push(...records.map((r) => r.messageId));
      return records.map(() => ({ ok: true }));
    }
    return records.map(() => ({ ok: false, error: new Error('never written'), sent: false }));
  }

  /** Lets the hanging call return. */
  answer(answer: 'published' | 'never written'): void {
    this.let?.(answer);
  }
}

for (const db of POLL_RUN_DATABASES) {
  describeWith(
    [...(db.service === null ? [] : [db.service]), 'rabbitmq'],
    `shutdown reads what the publisher answered the abort, on ${db.name} with RabbitMQ`,
    () => {
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_stop_ans', options: CLAIM_LOOP });
      const queue = `outbox-it-stop-answers-${process.pid}-${db.name}`;
      let consumer: ChannelModel | undefined;
      let channel: Channel | undefined;
      /** How many times each message id reached the queue. */
      const received = new Map<string, number>();

      beforeAll(async () => {
        consumer = await connect(RABBITMQ_URL(SERVICES.rabbitmq.host, SERVICES.rabbitmq.port));
        channel = await consumer.createChannel();
        await channel.assertQueue(queue, { durable: false });
        await channel.purgeQueue(queue);
        await channel.consume(queue, (message) => {
          if (message === null) return;
          const id = String(message.properties.messageId);
          received.set(id, (received.get(id) ?? 0) + 1);
          channel?.ack(message);
        });
      });
      afterAll(async () => {
        await channel?.deleteQueue(queue).catch(() => undefined);
        await consumer?.close().catch(() => undefined);
      });

      const rabbit = (endpoint: { host: string; port: number }): RabbitMqPublisher =>
        new RabbitMqPublisher({
          url: RABBITMQ_URL(endpoint.host, endpoint.port),
          assertTopology: async (ch) => {
            await ch.assertQueue(queue, { durable: false });
          },
          routingKey: () => queue,
          // Fewer than the batch: the messages past the window are never written once the
          // confirms stop coming.
          maxOutstandingConfirms: 20,
          publishTimeoutMs: 60_000,
        });

      it('keeps what the broker confirmed when shutdown aborts a publish into a link gone quiet, and the next instance sends only the rest', async () => {
        const proxy = await FaultProxy.start(SERVICES.rabbitmq);
        scope.defer(() => proxy.close());
        const table = await scope.table();
        const first = new AnswerRecorder(rabbit(proxy.endpoint));
        const options = {
          dispatcher: {
            batchSize: 100,
            shutdownTimeoutMs: 500,
            leaseMs: 120_000,
            publishTimeoutMs: 60_000,
          },
          retry: { initialDelayMs: 100, jitter: 0 },
        };
        const h1 = await scope.open({ table, publisher: first, options });

        // A first publish opens the connection and the channel through the proxy.
        const [warm] = await h1.enqueue(msg(0));
        await h1.dispatcher.runOnce();
        await waitFor('the warm-up message consumed', () => received.has(warm ?? ''));

        const ids = await h1.enqueue(Array.from({ length: 60 }, (_, n) => msg(n + 1)));
        // The broker's answers stop once message 30 went through: it has what came before,
        // and the publisher hears no confirm after that.
        proxy.holdAnswerTo(new RegExp((ids[29] ?? '').slice(-12)));
        const run = h1.dispatcher.runOnce();
        await waitFor('the link gone quiet', () => proxy.state === 'blackhole');
        await resolvesWithin('close() with a publish into a quiet link', h1.close(), 15_000);
        const report = await run;
        // The publisher's close() waits on the quiet link: let it go.
        proxy.cut();

        const confirmed = first.confirmed().filter((id) => ids.includes(id));
        const unsent = ids.filter((id) => {
          const o = first.answers.get(id);
          return o?.ok === false && o.sent === false;
        });
        const unconfirmed = ids.filter((id) => !confirmed.includes(id) && !unsent.includes(id));
        // The publisher answered the abort for every message: some confirmed, some written and
        // not confirmed, some never written.
        expect(ids.every((id) => first.answers.has(id))).toBe(true);
        expect(confirmed.length).toBeGreaterThan(0);
        expect(unconfirmed.length).toBeGreaterThan(0);
        expect(unsent.length).toBeGreaterThan(0);
        expect(report).toMatchObject({
          claimed: 60,
          published: confirmed.length,
          retried: unconfirmed.length,
          released: unsent.length,
        });

        const rows = new Map((await h1.rows()).map((r) => [r.messageId, r]));
        const state = (id: string) => {
          const r = rows.get(id);
          return [r?.status, r?.attempts, r?.lockedBy];
        };
        expect(confirmed.map(state)).toEqual(confirmed.map(() => ['delivered', 1, null]));
        // The broker may have these: an attempt each, retried after a backoff.
        expect(unconfirmed.map(state)).toEqual(unconfirmed.map(() => ['pending', 1, null]));
        // Never written: handed back with the attempt given back.
        expect(unsent.map(state)).toEqual(unsent.map(() => ['pending', 0, null]));

        // The next instance publishes what was not confirmed, and nothing the broker confirmed.
        const second = new AnswerRecorder(rabbit(SERVICES.rabbitmq));
        const h2 = await scope.open({ table, publisher: second, options });
        await dispatchUntil(h2, 'every message delivered', async () =>
          (await h2.rows()).every((r) => r.status === 'delivered'),
        );
        expect([...second.answers.keys()].sort()).toEqual([...unconfirmed, ...unsent].sort());
        expect(second.confirmed().sort()).toEqual([...unconfirmed, ...unsent].sort());
        await waitFor('every message at the queue', () => ids.every((id) => received.has(id)));
        // What reached the queue: a confirmed message once, a never-written one once (only the
        // next instance sent it), an unconfirmed one once or twice (the broker may have had it).
        expect(confirmed.map((id) => received.get(id))).toEqual(confirmed.map(() => 1));
        expect(unsent.map((id) => received.get(id))).toEqual(unsent.map(() => 1));
        for (const id of unconfirmed) expect([1, 2]).toContain(received.get(id));
      });
    },
  );
}

// Two instances at once on one table: PostgreSQL and MariaDB (SQLite runs one dispatcher).
for (const db of POLL_RUN_DATABASES.filter((d) => d.name !== 'sqlite')) {
  describeWith(
    db.service === null ? [] : [db.service],
    `a publish deaf to the shutdown's abort on ${db.name}`,
    () => {
      // Leases renewed while a call holds them, and what a lapsed lease lets the other do.
      const scope = useOutboxScope(db, { tablePrefix: 'outbox_stop_deaf', options: CLAIM_LOOP });
      const dispatcher = {
        shutdownTimeoutMs: 300,
        publishTimeoutMs: 300_000,
        dbTimeoutMs: 500,
        pollIntervalMs: 50,
        listen: false,
      };

      /** The deaf instance with its batch publishing, and the other instance running beside it. */
      async function deafBeside(
        leaseMs: number,
        dataSource?: DataSource,
      ): Promise<{
        deaf: DeafPublisher;
        logs: CapturingLogger;
        h1: OutboxApp<DeafPublisher>;
        h2: OutboxApp<RecordingPublisher>;
        ids: string[];
      }> {
        const table = await scope.table();
        const deaf = new DeafPublisher();
        const logs = new CapturingLogger();
        const options = {
          dispatcher: { ...dispatcher, leaseMs, leaseRenewal: { intervalMs: leaseMs / 4 } },
        };
        const h1 = await scope.open(
          { table, publisher: deaf, logger: logs, options: { ...options, instanceId: 'deaf' } },
          dataSource,
        );
        const ids = await h1.enqueue(Array.from({ length: 5 }, (_, n) => msg(n)));
        const run = h1.dispatcher.runOnce();
        scope.defer(() => run);
        await waitFor('the deaf publish to begin', () => deaf.calls === 1);
        // Nest's logger is one per process: the other instance's module takes the same.
        const h2 = await scope.open({
          table,
          publisher: new RecordingPublisher(),
          logger: logs,
          options: { ...options, instanceId: 'other', autoStart: true },
        });
        // Let the deaf call go at the end, whatever the test came to.
        scope.defer(() => Promise.resolve(deaf.answer('never written')));
        return { deaf, logs, h1, h2, ids };
      }

      /** The messages of the deaf batch the other instance published (false: none). */
      const overlap = (h2: OutboxApp<RecordingPublisher>, ids: readonly string[]) => {
        const sent = h2.publisher.sentIds.filter((id) => ids.includes(id));
        return sent.length > 0 && sent;
      };

      const leftRunning = (logs: CapturingLogger): string[] =>
        logs.linesOf(/^Dispatcher stopped .*still running/, 'warn').map((l) => l.message);

      it('is never overlapped by another instance while it runs after close(), however long past its lease; its answer is recorded when it returns', async () => {
        const leaseMs = 2_000;
        const { deaf, logs, h1, h2, ids } = await deafBeside(leaseMs);

        await resolvesWithin('close() with a deaf publish', h1.close(), 15_000);
        // The other instance runs beside it for several leases (and past any takeover of the
        // closed instance's owner lock) and takes none of its messages.
        await expectNever(
          'the other instance publishing a message the deaf call holds',
          () => overlap(h2, ids),
          3 * leaseMs,
        );
        expect(leftRunning(logs)).toEqual([
          expect.stringMatching(
            /batch [0-9a-f]{8} \(5 message\(s\) from the claim loop, publishing: its publish did not answer the abort; its messages stay leased until about \S+, renewed while the call runs/,
          ),
        ]);
        expect((await h1.rows()).map((r) => [r.status, r.lockedBy])).toEqual(
          ids.map(() => ['pending', 'deaf']),
        );

        // Let go, the call's answer is recorded under the lease it held: delivered, once.
        deaf.answer('published');
        await waitFor('the deaf batch settled', async () =>
          (await h1.rows()).every((r) => r.status === 'delivered'),
        );
        expect(deaf.sent.sort()).toEqual([...ids].sort());
        expect(overlap(h2, ids)).toBe(false);
      });

      it('holds its messages after close() even once the application closed its database, and another instance delivers them once the lease ends', async () => {
        const leaseMs = 5_000;
        const own = new DataSource(serverOptions(db.name === 'postgres' ? 'postgres' : 'mariadb'));
        await own.initialize();
        scope.defer(async () => {
          if (own.isInitialized) await own.destroy();
        });
        const { deaf, h1, h2, ids } = await deafBeside(leaseMs, own);

        await resolvesWithin('close() with a deaf publish', h1.close(), 15_000);
        // As TypeORM's module does after the dispatcher stopped: the owner lock's session goes.
        await own.destroy();
        // Longer than a takeover of the freed owner lock takes, shorter than the held lease.
        await expectNever(
          'the other instance publishing a message the deaf call holds',
          () => overlap(h2, ids),
          3_000,
        );
        await waitFor(
          'the other instance to deliver the held messages once their lease ended',
          async () => (await h2.rows()).every((r) => r.status === 'delivered'),
          { timeoutMs: 30_000 },
        );
        expect(h2.publisher.sentIds.filter((id) => ids.includes(id)).sort()).toEqual(
          [...ids].sort(),
        );
        // Claimed again after a publish that may have reached the broker: that attempt counts.
        expect((await h2.rows()).map((r) => r.attempts)).toEqual(ids.map(() => 2));
        deaf.answer('never written');
      });
    },
  );
}
