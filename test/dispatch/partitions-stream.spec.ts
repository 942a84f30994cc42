import { randomUUID } from 'node:crypto';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';
import { SettleCoalescer } from '../../lib/dispatch/partitions/settle-coalescer';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import type { Settlement } from '../../lib/store/ports/outbox-store.port';
import { FaultProxy } from '../../lib/testing';
import { readOutbox, TEST_DATABASES, uniqueTable, type OutboxRow } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith, SERVICES } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// Publishing as a stream (`dispatcher.publishWindow`, docs/delivery.md "Publishing as a
// stream"): a window of unconfirmed messages across batches, and settles written together. The
// delivery promises run on it in their own project (npm run test:stream); these are what only
// the window has: its bound, a broker cut inside it, a lapse, and a shared settle that a moved
// partition refuses in part.

const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const WINDOW = 40;
const stream = { claims: 'partitions', partitionTimeoutMs: 1_000, publishWindow: WINDOW } as const;

/** Per key, the message ids in id (= commit) order, from the table. */
function idOrderByKey(rows: readonly OutboxRow[]): Map<string | null, string[]> {
  const byKey = new Map<string | null, string[]>();
  for (const r of rows) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.messageId]);
  return byKey;
}

/** `received` (ids, duplicates included) per key, each id kept where it first arrived. */
function firstArrivals(received: readonly string[], keyOf: Map<string, string | null>) {
  const seen = new Set<string>();
  const byKey = new Map<string | null, string[]>();
  for (const id of received) {
    if (seen.has(id)) continue;
    seen.add(id);
    const key = keyOf.get(id) ?? null;
    byKey.set(key, [...(byKey.get(key) ?? []), id]);
  }
  return byKey;
}

/** Answers after a short wait, counting how many messages it holds unanswered at once. */
class SlowConfirms implements OutboxPublisher {
  readonly sent: string[] = [];
  readonly calls: number[] = [];
  /** Set once the test wants the publishes to stop; each start is recorded (monotonic). */
  readonly starts: number[] = [];
  private unanswered = 0;
  most = 0;

  async publish(records: readonly OutboxRecord[]): Promise<readonly PublishOutcome[]> {
    this.starts.push(performance.now());
    this.calls.push(records.length);
    this.unanswered += records.length;
    this.most = Math.max(this.most, this.unanswered);
    await sleep(5 + Math.floor(Math.random() * 10));
    this.unanswered -= records.length;
    for (const r of records) this.sent.push(r.messageId);
    return records.map(() => ({ ok: true }));
  }
}

for (const db of TEST_DATABASES.filter((d) => d.name === 'postgres')) {
  describeWith(['postgres', 'rabbitmq'], `publishing as a stream on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_w' });

    it('holds at most publishWindow messages unanswered, in slices across batches, and delivers every message once in key order', async () => {
      const name = await scope.table();
      const publisher = new SlowConfirms();
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          instanceId: 'stream-window',
          dispatcher: { ...stream, batchSize: 50, pollIntervalMs: 50 },
        }),
        table: name,
      });
      const keys = Array.from({ length: 30 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 10; tx++)
        ids.push(...(await app.enqueue(keys.map((k) => msg(k, { tx })))));
      await app.dispatcher.start();
      await waitFor(
        'every message delivered',
        async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
        { timeoutMs: 20_000 },
      );
      const rows = await readOutbox(scope.ds, name);
      expect(publisher.sent.sort()).toEqual([...ids].sort());
      // A quarter of the window per slice; never more than the window unanswered.
      expect(Math.max(...publisher.calls)).toBeLessThanOrEqual(WINDOW / 4);
      expect(publisher.most).toBeLessThanOrEqual(WINDOW);
      // More than one slice out at once: the window is used, not just bounded.
      expect(publisher.most).toBeGreaterThan(WINDOW / 4);
      const keyOf = new Map(rows.map((r) => [r.messageId, r.key]));
      expect(firstArrivals(publisher.sent, keyOf)).toEqual(idOrderByKey(rows));
      await app.close();
    });

    describe('through RabbitMQ', () => {
      let consumer: ChannelModel | undefined;
      let channel: Channel | undefined;
      const queue = uniqueTable('outbox_stream_q');
      const received: string[] = [];

      beforeAll(async () => {
        consumer = await connect(RABBITMQ_URL);
        channel = await consumer.createChannel();
        await channel.assertQueue(queue, { durable: false });
        await channel.purgeQueue(queue);
        await channel.consume(queue, (message) => {
          if (message === null) return;
          received.push(String(message.properties.messageId));
          channel?.ack(message);
        });
      });
      afterAll(async () => {
        await channel?.deleteQueue(queue).catch(() => undefined);
        await consumer?.close().catch(() => undefined);
      });

      it('a broker cut inside the window loses nothing and keeps key order; its only copies are of messages unconfirmed at the cut', async () => {
        const proxy = await FaultProxy.start(SERVICES.rabbitmq);
        scope.defer(() => proxy.close());
        const name = await scope.table();
        const publisher = new RabbitMqPublisher({
          url: `amqp://guest:guest@${proxy.endpoint.host}:${proxy.endpoint.port}`,
          routingKey: () => queue,
          publishTimeoutMs: 2_000,
        });
        const app = await scope.open({
          ...dispatchTestApp(publisher, {
            instanceId: 'stream-cut',
            dispatcher: {
              ...stream,
              batchSize: 50,
              pollIntervalMs: 50,
              publishTimeoutMs: 2_000,
              maxOutagePauseMs: 500,
            },
          }),
          table: name,
        });
        received.length = 0;
        const keys = Array.from({ length: 20 }, (_, k) => `key-${k}`);
        const ids: string[] = [];
        for (let tx = 0; tx < 40; tx++)
          ids.push(...(await app.enqueue(keys.map((k) => msg(k, { tx })))));
        await app.dispatcher.start();
        await waitFor('a first part delivered', () => received.length >= 100);
        proxy.cut('reset');
        await sleep(300);
        proxy.restore();
        await waitFor(
          'every message delivered',
          async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
          { timeoutMs: 30_000 },
        );
        await waitFor('every message in the queue', () => new Set(received).size === ids.length);
        await sleep(200);
        const rows = await readOutbox(scope.ds, name);
        const keyOf = new Map(rows.map((r) => [r.messageId, r.key]));
        expect(new Set(received)).toEqual(new Set(ids));
        expect(firstArrivals(received, keyOf)).toEqual(idOrderByKey(rows));
        // The cut was felt (the publishes in flight failed as an outage)…
        expect(app.outages.length).toBeGreaterThan(0);
        // …and a copy is of a message the broker had when the link went: at most the window.
        expect(received.length - ids.length).toBeLessThanOrEqual(WINDOW);
        await app.close();
      });
    });

    it('publishes nothing once its heartbeat lapsed: the whole window stops until a heartbeat lands', async () => {
      const name = await scope.table();
      const publisher = new SlowConfirms();
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'stream-lapse',
          dispatcher: { ...stream, batchSize: 50, pollIntervalMs: 50 },
        }),
        table: name,
      });
      let writing = true;
      const writer = (async () => {
        for (let tx = 0; writing; tx++) {
          await app.enqueue(Array.from({ length: 10 }, (_, k) => msg(`key-${k}`, { tx })));
          await sleep(10);
        }
      })();
      await waitFor('publishing', () => publisher.sent.length >= 50);
      const blocker = scope.ds.createQueryRunner();
      await blocker.connect();
      let locked = 0;
      let unlocked = 0;
      try {
        await blocker.startTransaction();
        await blocker.query(`LOCK TABLE "${name}_dispatchers" IN ACCESS EXCLUSIVE MODE`);
        locked = performance.now();
        await sleep(2_500);
        unlocked = performance.now();
        await blocker.commitTransaction();
      } finally {
        await blocker.release();
      }
      writing = false;
      await writer;
      // The last beat landed before the lock; a heartbeat holds 1 000 ms from it.
      const lapsedBy = locked + 1_000 + 100;
      expect(publisher.starts.filter((t) => t > lapsedBy && t < unlocked)).toEqual([]);
      await waitFor(
        'every message delivered after the lapse',
        async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
        { timeoutMs: 20_000 },
      );
      const rows = await readOutbox(scope.ds, name);
      const keyOf = new Map(rows.map((r) => [r.messageId, r.key]));
      expect(firstArrivals(publisher.sent, keyOf)).toEqual(idOrderByKey(rows));
      await app.close();
    });

    it("a settle written for several batches that a moved partition refuses in part settles what is still the owner's, and tells each batch it settled nothing known", async () => {
      const name = await scope.table();
      const app = await scope.open({ table: name });
      const store = app.store.deliveryPartitions;
      if (store === undefined) throw new Error('no partition store on postgres');
      // Three keys in three different partitions.
      const picked: { id: string; key: string; partition: number }[] = [];
      for (let k = 0; picked.length < 3; k++) {
        const key = `key-${k}`;
        const [id] = (await app.enqueue([msg(key, { k })])) as [string];
        const [row] = await scope.ds.query<{ id: string; p: number }[]>(
          `SELECT id::text AS id, delivery_partition AS p FROM "${name}" WHERE message_id = $1`,
          [id],
        );
        if (row === undefined) throw new Error('the row is missing');
        if (picked.some((p) => p.partition === row.p)) continue;
        picked.push({ id: row.id, key, partition: row.p });
      }
      const [first, kept, moved] = picked as [
        (typeof picked)[0],
        (typeof picked)[0],
        (typeof picked)[0],
      ];
      const member = (id: string, validMs: number) => ({ id, label: id, validMs });
      await store.beat(member('old', 60_000), false);
      const taken = await store.take(
        'old',
        picked.map((p) => p.partition),
      );
      const fenceOf = (p: number) => new Map([[p, taken.get(p)?.generation as string]]);
      // The first statement waits until the other two settles are queued behind it.
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const statements: Settlement[] = [];
      const coalescer = new SettleCoalescer(async (fence, settlement, token) => {
        statements.push(settlement);
        if (statements.length === 1) await gate;
        return store.settleOwned('old', fence, settlement, false, token);
      });
      const delivering = (p: (typeof picked)[0]): Settlement => ({
        delivered: [p.id],
        retry: [],
        dead: [],
        release: [],
        advancedKeys: [p.key],
      });
      const settledFirst = coalescer.settle(fenceOf(first.partition), delivering(first));
      const settledKept = coalescer.settle(fenceOf(kept.partition), delivering(kept));
      const settledMoved = coalescer.settle(fenceOf(moved.partition), delivering(moved));
      // Meanwhile `moved`'s partition is taken over by a new owner, at a higher generation.
      await store.beat(member('old', 10), true);
      await sleep(50);
      await store.beat(member('new', 60_000), false);
      const takenOver = await store.take('new', [moved.partition]);
      expect(takenOver.size).toBe(1);
      release();
      await expect(settledFirst).resolves.toMatchObject({ changed: 1 });
      await expect(settledKept).resolves.toMatchObject({ changed: 0 });
      await expect(settledMoved).resolves.toMatchObject({ changed: 0 });
      // One statement carried the two later settles.
      expect(statements).toHaveLength(2);
      expect(statements[1]?.delivered).toEqual([kept.id, moved.id]);
      const byId = new Map((await readOutbox(scope.ds, name)).map((r) => [r.id, r]));
      expect(byId.get(first.id)).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(byId.get(kept.id)).toMatchObject({ status: 'delivered', attempts: 1 });
      // The moved partition's row is its new owner's to publish and settle.
      expect(byId.get(moved.id)).toMatchObject({ status: 'pending', attempts: 0 });
      const newFence = new Map([
        [moved.partition, takenOver.get(moved.partition)?.generation as string],
      ]);
      const settledByNew = await store.settleOwned(
        'new',
        newFence,
        delivering(moved),
        false,
        randomUUID(),
      );
      expect(settledByNew.changed).toBe(1);
    });
  });
}
