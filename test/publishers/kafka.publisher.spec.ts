import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  Kafka,
  logLevel,
  Partitioners,
  type Admin,
  type Consumer,
  type PartitionMetadata,
} from 'kafkajs';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  PublishTimeoutError,
  type OutboxRecord,
} from '../../lib';
import { KafkaPublisher, type KafkaPublisherOptions } from '../../lib/publishers/kafka';
import { testDatabase, uniqueTable } from '../support/databases';
import {
  allSettled,
  dispatchUntil,
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import { describeWith, SERVICES } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// @runs-alone: its restart test stops the Kafka broker and starts it with a fresh data dir, which
// would fail any Kafka spec running beside it (scripts/test.sh runs this spec by itself).
//
// PostgreSQL → KafkaPublisher → a real single-node Kafka broker (scripts/kafka.sh) → a kafkajs
// consumer. Every test asserts what the consumer received and what the outbox table says (or,
// driving the publisher directly, what publish() returned).

const db = testDatabase('postgres');
const BROKERS = [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`];
const PARTITIONS = 3;
const run = promisify(execFile);
const KAFKA_SCRIPT = join(__dirname, '../../scripts/kafka.sh');
// The restart test may only stop a broker that scripts/kafka.sh started (and will start again).
const KAFKA_PID_FILE = join(process.env.KAFKA_DATA_DIR ?? '/tmp/nestjs-outbox-kafka', 'kafka.pid');

interface Received {
  readonly topic: string;
  readonly partition: number;
  readonly key: string | null;
  readonly value: string;
  readonly headers: Record<string, string>;
}

type Harness = OutboxHarness<KafkaPublisher>;

let counter = 0;
const uniqueTopic = (): string =>
  `outbox-kafka-it-${process.pid}-${Date.now() % 1_000_000}-${++counter}`;

/** A record as the dispatcher would hand it over, for tests that drive publish() directly. */
function record(topic: string, n: number, payload = `{"n":${n}}`): OutboxRecord {
  return {
    id: String(n),
    messageId: `${topic}-m-${n}`,
    topic,
    key: `key-${n}`,
    type: 'direct',
    payload,
    headers: {},
    attempts: 1,
    createdAt: new Date(),
  };
}

describeWith(['postgres', 'kafka'], 'KafkaPublisher (PostgreSQL → Kafka)', () => {
  let ds: DataSource;
  let kafka: Kafka;
  let admin: Admin;
  const baseTable = uniqueTable('outbox_kafka');
  const consumers: Consumer[] = [];
  const harnesses: Harness[] = [];
  const publishers: KafkaPublisher[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
    kafka = new Kafka({
      brokers: BROKERS,
      clientId: 'outbox-it-consumer',
      logLevel: logLevel.NOTHING,
    });
    admin = kafka.admin();
    await admin.connect();
  });

  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.disconnect().catch(() => undefined)));
    await Promise.all(harnesses.splice(0).map((h) => h.close()));
    await Promise.all(publishers.splice(0).map((p) => p.close().catch(() => undefined)));
  });

  afterAll(async () => {
    await admin?.disconnect().catch(() => undefined);
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  async function createTopic(topic: string, client: Admin = admin): Promise<void> {
    await client.createTopics({
      topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
      waitForLeaders: true,
    });
  }

  function kafkaPublisher(options: Partial<KafkaPublisherOptions> = {}): KafkaPublisher {
    const publisher = new KafkaPublisher({ brokers: BROKERS, clientId: 'outbox-it', ...options });
    publishers.push(publisher);
    return publisher;
  }

  async function openOutbox(
    publisherOptions: Partial<KafkaPublisherOptions> = {},
    overrides: HarnessOverrides = {},
  ): Promise<Harness> {
    const harness = await openOutboxHarness(
      ds,
      kafkaPublisher(publisherOptions),
      overrides,
      'outbox_kafka',
    );
    harnesses.push(harness);
    return harness;
  }

  /**
   * A topic of its own, a publisher connected and warm on it (one message sent), and a consumer
   * of it: the batches a test sends next go out on the producer at once.
   */
  async function warmPublisher(): Promise<{
    topic: string;
    publisher: KafkaPublisher;
    received: Received[];
  }> {
    const topic = uniqueTopic();
    await createTopic(topic);
    const publisher = kafkaPublisher();
    expect(await publisher.publish([record(topic, 0)], new AbortController().signal)).toEqual([
      { ok: true },
    ]);
    const { received } = await consume(topic);
    return { topic, publisher, received };
  }

  async function consume(
    topic: string,
    into: Received[] = [],
  ): Promise<{ received: Received[]; consumer: Consumer }> {
    const consumer = kafka.consumer({
      groupId: `outbox-it-${topic}-${++counter}`,
      maxWaitTimeInMs: 100,
    });
    consumers.push(consumer);
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: ({ topic: t, partition, message }) => {
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(message.headers ?? {}))
          headers[name] = String(value);
        into.push({
          topic: t,
          partition,
          key: message.key?.toString() ?? null,
          value: message.value?.toString() ?? '',
          headers,
        });
        return Promise.resolve();
      },
    });
    return { received: into, consumer };
  }

  it('delivers committed messages with key, JSON value and headers; rolled-back ones never arrive', async () => {
    const topic = uniqueTopic();
    await createTopic(topic);
    const h = await openOutbox();
    const ids = await h.enqueue(
      Array.from({ length: 20 }, (_, i) => ({
        topic,
        key: i === 19 ? null : `order-${i % 7}`,
        type: 'order.created',
        payload: { n: i, text: 'é✓ "quoted"' },
        headers: { 'x-tenant': 't1' },
      })),
    );
    await expect(
      ds.transaction(async (m) => {
        await h.outbox.enqueue(
          { topic, key: 'ghost', type: 'order.created', payload: { ghost: true } },
          m,
        );
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');

    const { received } = await consume(topic);
    await dispatchUntil(h, 'the outbox to drain', allSettled(h));
    await waitFor('20 messages at the consumer', () => received.length >= 20, {
      timeoutMs: 30_000,
    });
    await sleep(500); // anything else (a ghost, a duplicate) would arrive by now

    expect(received).toHaveLength(20);
    const byId = new Map(received.map((r) => [r.headers[OUTBOX_HEADER_MESSAGE_ID], r]));
    ids.forEach((id, i) => {
      const r = byId.get(id);
      expect(r).toBeDefined();
      expect(r?.key).toBe(i === 19 ? null : `order-${i % 7}`);
      expect(JSON.parse(r?.value ?? 'null')).toEqual({ n: i, text: 'é✓ "quoted"' });
      expect(r?.headers).toEqual({
        'x-tenant': 't1',
        [OUTBOX_HEADER_MESSAGE_ID]: id,
        [OUTBOX_HEADER_TYPE]: 'order.created',
      });
    });
    expect(received.some((r) => r.value.includes('ghost'))).toBe(false);
    const rows = await h.rows();
    expect(rows.map((r) => r.messageId)).toEqual(ids);
    // One attempt each (counted at claim), and it succeeded.
    expect(rows.every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
  });

  it('puts each key in the partition the murmur2 DefaultPartitioner picks (like the Java client)', async () => {
    const topic = uniqueTopic();
    await createTopic(topic);
    const h = await openOutbox();
    const keys = Array.from({ length: 40 }, (_, i) => `customer-${i * 7919}`);
    await h.enqueue(
      keys.map((key) => ({ topic, key, type: 'customer.updated', payload: { key } })),
    );
    const { received } = await consume(topic);
    await dispatchUntil(h, 'the outbox to drain', allSettled(h));
    await waitFor('40 messages', () => received.length >= keys.length, { timeoutMs: 30_000 });

    const partitioner = Partitioners.DefaultPartitioner();
    const metadata: PartitionMetadata[] = Array.from({ length: PARTITIONS }, (_, partitionId) => ({
      partitionId,
      leader: 1,
      partitionErrorCode: 0,
      replicas: [1],
      isr: [1],
    }));
    const expected = new Map(
      keys.map((key) => [
        key,
        partitioner({ topic, partitionMetadata: metadata, message: { key, value: null } }),
      ]),
    );
    for (const r of received)
      expect({ key: r.key, partition: r.partition }).toEqual({
        key: r.key,
        partition: expected.get(r.key ?? ''),
      });
    // The keys really spread: every partition got some.
    expect(new Set(received.map((r) => r.partition)).size).toBe(PARTITIONS);
  });

  it('keeps per-key order at the consumer for 50 keys × 100 messages enqueued in separate transactions', async () => {
    const topic = uniqueTopic();
    await createTopic(topic);
    const h = await openOutbox();
    const { received } = await consume(topic);
    const KEYS = 50;
    const PER_KEY = 100;
    let producing = true;
    // Dispatch while the transactions commit, as an app would.
    const dispatching = (async () => {
      while (producing || !(await allSettled(h)())) {
        await h.dispatcher.drain();
        await sleep(10);
      }
    })();
    const WORKERS = 10;
    try {
      await Promise.all(
        Array.from({ length: WORKERS }, async (_, w) => {
          for (let n = 0; n < PER_KEY; n++) {
            for (let k = w; k < KEYS; k += WORKERS) {
              await h.enqueue({ topic, key: `key-${k}`, type: 'seq', payload: { k, n } });
            }
          }
        }),
      );
    } finally {
      producing = false;
    }
    await dispatching;
    await waitFor('5000 messages at the consumer', () => received.length >= KEYS * PER_KEY, {
      timeoutMs: 30_000,
    });
    await sleep(300);

    expect(received).toHaveLength(KEYS * PER_KEY);
    const perKey = new Map<string, number[]>();
    for (const r of received) {
      const { n } = JSON.parse(r.value) as { n: number };
      const list = perKey.get(r.key ?? '') ?? [];
      list.push(n);
      perKey.set(r.key ?? '', list);
    }
    expect(perKey.size).toBe(KEYS);
    const inOrder = Array.from({ length: PER_KEY }, (_, n) => n);
    for (const [, ns] of perKey) expect(ns).toEqual(inOrder);
    expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
  });

  it('dead-letters a message over the broker limit alone; the rest of its batch and partition is delivered once', async () => {
    const topic = uniqueTopic();
    await createTopic(topic);
    // message.max.bytes is ~1 MB on the broker; the outbox itself accepts up to 4 MB.
    const h = await openOutbox({}, { maxPayloadBytes: 4_000_000 });
    const small = Array.from({ length: 30 }, (_, i) => ({
      topic,
      key: `small-${i}`,
      type: 'small',
      payload: { i },
    }));
    const big = { topic, key: 'big-one', type: 'big', payload: { blob: 'x'.repeat(1_300_000) } };
    // One transaction, so one claim: the oversize message shares its batch (and a partition) with others.
    const ids = await h.enqueue([...small.slice(0, 15), big, ...small.slice(15)]);
    const bigId = ids[15];
    const after = await h.enqueue({ topic, key: 'later', type: 'small', payload: { later: true } });
    const { received } = await consume(topic);

    await dispatchUntil(h, 'the outbox to settle', allSettled(h));
    await waitFor('31 small messages', () => received.length >= 31, { timeoutMs: 30_000 });
    await sleep(500);

    const rows = await h.rows();
    const bigRow = rows.find((r) => r.messageId === bigId);
    expect(bigRow).toMatchObject({ status: 'dead', attempts: 1 });
    expect(bigRow?.lastError).toMatch(/PermanentPublishError.*larger than the max message size/);
    expect(
      rows
        .filter((r) => r.messageId !== bigId)
        .every((r) => r.status === 'delivered' && r.attempts === 1),
    ).toBe(true);
    // Exactly once each: partitions the broker had appended before refusing the request were
    // deduplicated by the idempotent producer when the batch was narrowed down.
    const seenIds = received.map((r) => r.headers[OUTBOX_HEADER_MESSAGE_ID]).sort();
    expect(seenIds).toEqual(
      ids
        .filter((id) => id !== bigId)
        .concat(after)
        .sort(),
    );
  });

  it('narrowing a refused batch keeps each keyless message in the partition it was first sent to: every message it reports ok is in the topic once', async () => {
    // Keyless messages are spread round-robin. A refused request rolls back the idempotent
    // producer's sequence numbers of every partition in it, so a message sent again to another
    // partition could be answered as a duplicate of what the broker appended there, and
    // reported ok without being written.
    const topic = uniqueTopic();
    await admin.createTopics({
      topics: [
        {
          topic,
          numPartitions: 3,
          replicationFactor: 1,
          configEntries: [{ name: 'max.message.bytes', value: '2000' }],
        },
      ],
      waitForLeaders: true,
    });
    const publisher = kafkaPublisher();
    const keyless = (n: number, payload: string): OutboxRecord => ({
      ...record(topic, n, payload),
      key: null,
    });
    const { received } = await consume(topic);
    const outcomes: boolean[] = [];
    const sent: OutboxRecord[] = [];
    // Several batches, the oversize message at each place of a batch of 4 to 7.
    for (let size = 4, n = 0; size <= 7; size++) {
      for (let bad = 0; bad < size; bad++) {
        const batch = Array.from({ length: size }, (_, i) =>
          keyless(++n, i === bad ? `"${'x'.repeat(5_000)}"` : `{"n":${n}}`),
        );
        const answers = await publisher.publish(batch, new AbortController().signal);
        answers.forEach((o, i) => outcomes.push(o.ok && i !== bad));
        expect(answers[bad]).toMatchObject({ ok: false });
        sent.push(...batch);
      }
    }
    const okIds = sent.filter((_, i) => outcomes[i]).map((r) => r.messageId);
    const offsets = await admin.fetchTopicOffsets(topic);
    const written = offsets.reduce((sum, o) => sum + Number(o.high), 0);
    await waitFor('every written message', () => received.length >= written, {
      timeoutMs: 30_000,
    });
    const seen = received.map((r) => r.headers[OUTBOX_HEADER_MESSAGE_ID] ?? '');
    // A message reported ok is in the topic, once (the others may be retried: not counted here).
    expect(okIds.filter((id) => seen.filter((s) => s === id).length !== 1)).toEqual([]);
    expect(okIds.length).toBeGreaterThan(0);
  });

  it('a run refused part way (over the size limit): the key stops there, the rest of its run stays unpublished behind the dead message; other runs arrive whole and in order', async () => {
    const topic = uniqueTopic();
    await createTopic(topic);
    const h = await openOutbox({}, { maxPayloadBytes: 4_000_000 });
    const { received } = await consume(topic);
    // Key A's third message is over the broker's ~1 MB limit; key B's run is all small.
    const ids = await h.enqueue(
      ['A', 'B'].flatMap((key) =>
        [1, 2, 3, 4].map((n) => ({
          topic,
          key,
          type: 'run',
          payload: key === 'A' && n === 3 ? { n, blob: 'x'.repeat(1_300_000) } : { n },
        })),
      ),
    );
    const [a1, a2, a3, a4, ...b] = ids as [string, string, string, string, ...string[]];

    expect(await h.dispatcher.runOnce()).toMatchObject({
      claimed: 8,
      published: 6,
      deadLettered: 1,
      released: 1,
    });
    await waitFor('6 messages at the consumer', () => received.length >= 6, { timeoutMs: 30_000 });
    // Nothing of A may follow its dead message (onDeadLetter 'block'), however long we wait.
    await dispatchUntil(h, 'the outbox to settle', allSettled(h));
    await sleep(500);
    const byKey = (key: string): string[] =>
      received.filter((r) => r.key === key).map((r) => r.headers[OUTBOX_HEADER_MESSAGE_ID] ?? '');
    expect(byKey('A')).toEqual([a1, a2]);
    expect(byKey('B')).toEqual(b);
    const rows = await h.rows();
    expect(rows.find((r) => r.messageId === a3)).toMatchObject({ status: 'dead', attempts: 1 });
    expect(rows.find((r) => r.messageId === a4)).toMatchObject({ attempts: 0, lockedBy: null });
    expect(rows.find((r) => r.messageId === a4)?.status).not.toBe('delivered');
  });

  it('aborted because its hold was lost, a batch already sent waits a moment for its answer: what Kafka took is answered as delivered, so nothing reaches the topic reported failed', async () => {
    const { topic, publisher, received } = await warmPublisher();
    const batch = Array.from({ length: 50 }, (_, i) => record(topic, 1_000 + i));
    const abort = new AbortController();
    const call = publisher.publish(batch, abort.signal);
    // Sent (the producer is connected and warm), not yet answered by the broker.
    await new Promise((resolve) => setImmediate(resolve));
    abort.abort(new Error('the delivery partitions were lost'));
    const outcomes = await call;

    expect(outcomes.map((o) => o.ok)).toEqual(batch.map(() => true));
    await waitFor(
      'the batch at the consumer',
      () =>
        batch.every((r) =>
          received.some((m) => m.headers[OUTBOX_HEADER_MESSAGE_ID] === r.messageId),
        ),
      { timeoutMs: 30_000 },
    );
  });

  it('aborting one batch leaves the other in-flight batch on the shared producer alone', async () => {
    // Connected and warm, so both batches below are in flight on the same producer at once.
    const { topic, publisher, received } = await warmPublisher();
    const blob = 'x'.repeat(2_000);
    const aborted = Array.from({ length: 300 }, (_, i) =>
      record(topic, 1_000 + i, JSON.stringify({ n: 1_000 + i, blob })),
    );
    // The other batch holds a message over the broker's 1 MB limit, so it keeps sending after its
    // first request (the refused request is narrowed down to the culprit): its later requests
    // go out after the first batch was aborted.
    const kept = Array.from({ length: 40 }, (_, i) => record(topic, 2_000 + i));
    const tooLarge = record(topic, 2_100, JSON.stringify({ blob: 'y'.repeat(1_300_000) }));
    kept.splice(20, 0, tooLarge);

    const abort = new AbortController();
    const reason = new PublishTimeoutError(1);
    const first = publisher.publish(aborted, abort.signal);
    const second = publisher.publish(kept, new AbortController().signal);
    await new Promise((resolve) => setImmediate(resolve));
    const abortedAt = Date.now();
    abort.abort(reason);

    const firstOutcomes = await first;
    const abandonedAfterMs = Date.now() - abortedAt;
    const secondOutcomes = await second;
    // The aborted batch stops waiting at once; whatever Kafka had not answered carries the reason.
    expect(abandonedAfterMs).toBeLessThan(100);
    expect(firstOutcomes).toHaveLength(aborted.length);
    for (const outcome of firstOutcomes) expect(outcome.ok || outcome.error === reason).toBe(true);
    // The other batch is unaffected: only its oversize message fails, and alone; the rest arrive.
    expect(secondOutcomes.map((o) => (o.ok ? 'ok' : (o.error as Error).name))).toEqual(
      kept.map((r) => (r === tooLarge ? 'PermanentPublishError' : 'ok')),
    );
    const delivered = kept.filter((r) => r !== tooLarge).map((r) => r.messageId);
    await waitFor(
      'the other batch at the consumer',
      () =>
        delivered.every((id) => received.some((m) => m.headers[OUTBOX_HEADER_MESSAGE_ID] === id)),
      { timeoutMs: 30_000 },
    );
    // The producer was not torn down: the next batch goes out on it.
    expect(await publisher.publish([record(topic, 3_000)], new AbortController().signal)).toEqual([
      { ok: true },
    ]);
  });

  // Only a broker this project's script runs can be stopped and restarted by the test.
  const restartable = existsSync(KAFKA_PID_FILE);
  if (!restartable && process.env.CI === 'true') {
    throw new Error(
      `CI=true but the Kafka broker was not started by scripts/kafka.sh (no ${KAFKA_PID_FILE}): the restart test cannot run`,
    );
  }
  (restartable ? it : it.skip)(
    'survives a Kafka broker restart mid-run (STOPS AND RESTARTS the local scripts/kafka.sh broker): nothing lost, none dead-lettered, no attempt burnt by the outage itself' +
      (restartable
        ? ''
        : ` [skipped: the broker on ${SERVICES.kafka.host}:${SERVICES.kafka.port} was not started by scripts/kafka.sh]`),
    async () => {
      const topic = uniqueTopic();
      await createTopic(topic);
      const h = await openOutbox(
        { requestTimeout: 2_000, connectionTimeout: 1_000 },
        { dispatcher: { batchSize: 5, publishTimeoutMs: 4_000 } },
      );
      const KEYS = 30;
      const ROUNDS = 20;
      const ids: string[] = [];
      for (let n = 0; n < ROUNDS; n++) {
        ids.push(
          ...(await h.enqueue(
            Array.from({ length: KEYS }, (_, k) => ({
              topic,
              key: `key-${k}`,
              type: 'restart',
              payload: { k, n },
            })),
          )),
        );
      }
      const before: Received[] = [];
      const { consumer: beforeConsumer } = await consume(topic, before);

      let stopDispatching = false;
      const dispatching = (async () => {
        while (!stopDispatching) {
          await h.dispatcher.drain();
          await sleep(25);
        }
      })();
      let brokerDown = false;
      try {
        await waitFor(
          'a quarter delivered',
          async () =>
            (await h.rows()).filter((r) => r.status === 'delivered').length >= ids.length / 4,
          { timeoutMs: 30_000 },
        );
        // This consumer is done before the stop: a kafkajs consumer that lost its broker retries
        // on a timer that a later disconnect() does not cancel (kafkajs #1147), and it would
        // reconnect to the restarted broker after the test, a socket left open at the end of
        // the run. What it did not receive was either settled before the stop (allowed missing
        // below, the restart wipes the log) or is published again after it.
        consumers.splice(consumers.indexOf(beforeConsumer), 1);
        await beforeConsumer.disconnect();
        brokerDown = true;
        await run(KAFKA_SCRIPT, ['stop'], { timeout: 60_000 });
        const outagesAtStop = h.outages.length;
        await waitFor(
          'the dispatcher to see the outage',
          () => h.outages.length > outagesAtStop + 1,
          { timeoutMs: 30_000 },
        );
        // Runs never overlap, so every batch published before the stop has been settled now.
        const deliveredBeforeWipe = new Set(
          (await h.rows()).filter((r) => r.status === 'delivered').map((r) => r.messageId),
        );
        const receivedBeforeWipe = [...before];
        const duringOutage = await h.rows();
        expect(duringOutage.some((r) => r.status === 'pending')).toBe(true);
        // An outage gives the attempt back; a batch cut off mid-flight that hit the publish
        // deadline counts one (the broker may have it), and none is dead.
        expect(duringOutage.every((r) => r.attempts <= 1 && r.status !== 'dead')).toBe(true);

        await run(KAFKA_SCRIPT, ['start'], { timeout: 120_000 });
        brokerDown = false;
        // scripts/kafka.sh start formats a fresh data dir: topics must be created again.
        const freshAdmin = kafka.admin();
        await freshAdmin.connect();
        await createTopic(topic, freshAdmin);
        await freshAdmin.disconnect();
        const after: Received[] = [];
        await consume(topic, after);
        await waitFor('every row delivered after the restart', allSettled(h), {
          timeoutMs: 60_000,
        });
        await waitFor(
          'the consumer to catch up',
          () => after.length >= ids.length - deliveredBeforeWipe.size,
          { timeoutMs: 30_000 },
        );

        const rows = await h.rows();
        expect(
          rows.every((r) => r.status === 'delivered' && r.attempts >= 1 && r.attempts <= 2),
        ).toBe(true);
        expect(h.outages.length).toBeGreaterThan(0);
        // Nothing lost: each message reached a consumer, except ones the broker had acknowledged
        // before the stop, whose log the restart wiped (scripts/kafka.sh formats a fresh broker).
        const seen = new Set(
          [...receivedBeforeWipe, ...after].map((r) => r.headers[OUTBOX_HEADER_MESSAGE_ID]),
        );
        const missing = ids.filter((id) => !seen.has(id));
        expect(missing.filter((id) => !deliveredBeforeWipe.has(id))).toEqual([]);
        // Per-key order holds after the restart too.
        const perKey = new Map<string, number[]>();
        for (const r of after) {
          const { n } = JSON.parse(r.value) as { n: number };
          perKey.set(r.key ?? '', [...(perKey.get(r.key ?? '') ?? []), n]);
        }
        for (const [, ns] of perKey) expect(ns).toEqual([...ns].sort((a, b) => a - b));
      } finally {
        stopDispatching = true;
        await dispatching;
        if (brokerDown)
          await run(KAFKA_SCRIPT, ['start'], { timeout: 120_000 }).catch(() => undefined);
      }
    },
    150_000,
  );
});
