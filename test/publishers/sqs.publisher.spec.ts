import { SQSClient, type Message } from '@aws-sdk/client-sqs';
import type { DataSource } from 'typeorm';
import {
  OutboxInvalidMessageError,
  PermanentPublishError,
  PublisherUnavailableError,
  type OutboxRecord,
} from '../../lib';
import { claimCheckPayload, messageIdFromSqs } from '../../lib/inbox';
import { tableClaimCheckStore } from '../../lib/claim-check';
import {
  readOutboxSqsMessage,
  SqsPublisher,
  type SqsPublisherOptions,
} from '../../lib/publishers/sqs';
import { testDatabase, uniqueTable } from '../support/databases';
import {
  allSettled,
  dispatchUntil,
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import { describeWith, SERVICES } from '../support/services';
import { FaultProxy } from '../../lib/testing';
import {
  abortGraceCases,
  consumeSqs,
  createQueue,
  outboxIdOf,
  sqsConfig,
  uniqueQueueName,
  type SqsQueueConsumer,
} from '../support/transports/aws';
import { freePort } from '../support/transports/net';
import { sleep, waitFor } from '../support/wait-for';

// PostgreSQL → SqsPublisher → ElasticMQ (scripts/elasticmq.sh, an SQS-compatible server that
// enforces SQS's limits) → a ReceiveMessage consumer. What reached the queue is read back from
// it; what the outbox made of each message is read from its table. Every test has queues of its
// own, deleted afterwards. Faults go through a TCP proxy in front of ElasticMQ.

const db = testDatabase('postgres');

type Harness = OutboxHarness<SqsPublisher>;

let n = 0;
function record(queue: string, key: string | null, over: Partial<OutboxRecord> = {}): OutboxRecord {
  n += 1;
  return {
    id: String(n),
    messageId: `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`,
    topic: queue,
    key,
    type: 'direct',
    payload: JSON.stringify({ n }),
    headers: {},
    attempts: 1,
    createdAt: new Date(),
    ...over,
  } as OutboxRecord;
}

const live = (): AbortSignal => new AbortController().signal;

/** The payloads' `n` per key, in arrival order. */
function arrivalsByKey(messages: readonly Message[]): Map<string, number[]> {
  const byKey = new Map<string, number[]>();
  for (const m of messages) {
    const read = readOutboxSqsMessage(m);
    const { n: value } = JSON.parse(read.payload as string) as { n: number };
    byKey.set(read.key ?? '', [...(byKey.get(read.key ?? '') ?? []), value]);
  }
  return byKey;
}

describeWith(['postgres', 'elasticmq'], 'SqsPublisher (PostgreSQL → ElasticMQ)', () => {
  let ds: DataSource;
  const sqs = new SQSClient(sqsConfig());
  const baseTable = uniqueTable('outbox_sqs');
  const harnesses: Harness[] = [];
  const consumers: SqsQueueConsumer[] = [];
  const proxies: FaultProxy[] = [];
  const publishers: SqsPublisher[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });

  afterEach(async () => {
    await Promise.all(harnesses.splice(0).map((h) => h.close()));
    await Promise.all(publishers.splice(0).map((p) => p.close()));
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });

  afterAll(async () => {
    sqs.destroy();
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  async function queue(fifo: boolean, attributes: Record<string, string> = {}) {
    const name = uniqueQueueName('outbox-sqs-it', fifo);
    const consumer = consumeSqs(sqs, await createQueue(sqs, name, attributes));
    consumers.push(consumer);
    return { name, consumer };
  }

  async function proxy(): Promise<FaultProxy> {
    const p = await FaultProxy.start(SERVICES.elasticmq, { lifetimeMs: 120_000 });
    proxies.push(p);
    return p;
  }

  function publisher(options: SqsPublisherOptions = {}): SqsPublisher {
    const p = new SqsPublisher({ client: sqsConfig(), ...options });
    publishers.push(p);
    return p;
  }

  async function openOutbox(
    options: SqsPublisherOptions = {},
    overrides: HarnessOverrides = {},
  ): Promise<Harness> {
    const h = await openOutboxHarness(
      ds,
      new SqsPublisher({ client: sqsConfig(), ...options }),
      overrides,
      'outbox_sqs',
    );
    harnesses.push(h);
    return h;
  }

  it('delivers committed messages to a FIFO queue in per-key order, each once, with id, type, key, headers and binary payloads as documented', async () => {
    const { name, consumer } = await queue(true);
    const h = await openOutbox({}, { dispatcher: { batchSize: 100 } });
    const KEYS = 20;
    const ROUNDS = 10;
    const ids: string[] = [];
    // One transaction per round: a key's messages commit one after the other.
    for (let round = 0; round < ROUNDS; round++) {
      ids.push(
        ...(await h.enqueue(
          Array.from({ length: KEYS }, (_, k) => ({
            topic: name,
            key: `customer ${k}/é`, // a space and non-ASCII: the group id is the key's hash
            type: 'order.updated',
            payload: { n: round },
            headers: {
              'x-tenant': `t${k}`,
              traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`,
            },
          })),
        )),
      );
    }
    const [binaryId] = await h.enqueue({
      topic: name,
      key: 'bytes',
      payload: Buffer.from([0, 1, 2, 254, 255]),
      contentType: 'application/x-protobuf',
    });
    await dispatchUntil(h, 'the outbox to drain', allSettled(h));
    const received = await consumer.received.settle(ids.length + 1, 500, 30_000);

    expect(received.map(outboxIdOf).sort()).toEqual([...ids, binaryId].sort());
    expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
    const byKey = arrivalsByKey(received.filter((m) => outboxIdOf(m) !== binaryId));
    expect(byKey.size).toBe(KEYS);
    for (const [, rounds] of byKey) expect(rounds).toEqual([...Array(ROUNDS).keys()]);

    const first = received.find((m) => outboxIdOf(m) === ids[0]) as Message;
    expect(messageIdFromSqs(first)).toBe(ids[0]);
    expect(first.Attributes?.MessageGroupId).toMatch(/^sha256:[A-Za-z0-9_-]{43}$/);
    expect(first.Attributes?.MessageDeduplicationId).toBe(ids[0]);
    expect(readOutboxSqsMessage(first)).toMatchObject({
      messageId: ids[0],
      type: 'order.updated',
      key: 'customer 0/é',
      headers: { 'x-tenant': 't0', traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01` },
      contentType: undefined,
      payload: '{"n":0}',
    });
    const binary = readOutboxSqsMessage(
      received.find((m) => outboxIdOf(m) === binaryId) as Message,
    );
    expect(binary.contentType).toBe('application/x-protobuf');
    expect(binary.payload).toEqual(Buffer.from([0, 1, 2, 254, 255]));
  });

  it('headers beyond the ten attributes travel as one JSON attribute; trace context keeps attributes of its own', async () => {
    const { name, consumer } = await queue(false);
    const h = await openOutbox();
    const headers = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`x-h${i}`, `v${i}`]));
    headers.traceparent = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
    const [id] = await h.enqueue({ topic: name, key: 'k', payload: { ok: true }, headers });
    await dispatchUntil(h, 'delivered', allSettled(h));
    const [message] = await consumer.received.settle(1);
    const attributes = Object.keys((message as Message).MessageAttributes ?? {});
    expect(attributes.sort()).toEqual(
      [
        'traceparent',
        'x-outbox-headers',
        'x-outbox-key',
        'x-outbox-message-id',
        'x-outbox-type',
      ].sort(),
    );
    expect(readOutboxSqsMessage(message as Message)).toMatchObject({ messageId: id, headers });
  });

  it('refuses at enqueue what SQS would never take: over the size limit (base64 counted), and a per-message delay on a FIFO queue; nothing is written', async () => {
    const fifo = uniqueQueueName('outbox-sqs-it', true);
    const h = await openOutbox({ maxMessageBytes: 65_536 });
    const tooLarge = h.enqueue({ topic: 'orders', payload: { text: 'x'.repeat(66_000) } });
    await expect(tooLarge).rejects.toBeInstanceOf(OutboxInvalidMessageError);
    await expect(tooLarge).rejects.toMatchObject({ reason: 'payload-too-large' });
    await expect(tooLarge).rejects.toThrow(/over the limit of 65536 bytes .*claimCheck option/);
    // 50 000 bytes fit the limit as bytes, not as the base64 text SQS carries (66 668).
    await expect(
      h.enqueue({
        topic: 'orders',
        payload: Buffer.alloc(50_000, 7),
        contentType: 'application/octet-stream',
      }),
    ).rejects.toMatchObject({ reason: 'payload-too-large' });
    await expect(
      h.enqueue({ topic: fifo, key: 'k', payload: {}, attributes: { sqs: { delaySeconds: 5 } } }),
    ).rejects.toMatchObject({ reason: 'invalid-attributes' });
    await expect(
      h.enqueue({ topic: 'orders', payload: {}, attributes: { sqs: { delaySeconds: 901 } } }),
    ).rejects.toMatchObject({ reason: 'invalid-attributes' });
    expect(await h.rows()).toEqual([]);
    // Just under the limit passes, and a delay on a standard queue too.
    await h.enqueue({ topic: 'orders', payload: { text: 'x'.repeat(60_000) } });
    await h.enqueue({ topic: 'orders', payload: {}, attributes: { sqs: { delaySeconds: 5 } } });
    expect(await h.rows()).toHaveLength(2);
  });

  it('with the claim check, a message over the size limit passes enqueue and reaches the queue as a reference the consumer reads the payload back from', async () => {
    const { name, consumer } = await queue(false);
    const h = await openOutbox(
      { maxMessageBytes: 65_536 },
      { claimCheck: { store: tableClaimCheckStore(), thresholdBytes: 60_000 } },
    );
    // The reader names the harness's own table.
    const reader = tableClaimCheckStore({ dataSource: ds, tableName: h.table });
    const payload = { text: 'x'.repeat(200_000) };
    const [id] = await h.enqueue({ topic: name, key: 'k', payload });
    await dispatchUntil(h, 'delivered', allSettled(h));
    const [message] = await consumer.received.settle(1);
    expect(messageIdFromSqs(message as Message)).toBe(id);
    expect((message as Message).Body?.length).toBeLessThan(1_000);
    const read = await claimCheckPayload(message, reader);
    expect(read.fromStore).toBe(true);
    expect(read.json()).toEqual(payload);
    // A type whose policy turns the claim check off is refused, pointed to it.
    await h.close();
    const off = await openOutbox(
      { maxMessageBytes: 65_536 },
      {
        claimCheck: { store: tableClaimCheckStore() },
        policies: { small: { claimCheckThresholdBytes: null } },
      },
    );
    await expect(
      off.enqueue({ topic: name, type: 'small', payload: { text: 'x'.repeat(66_000) } }),
    ).rejects.toThrow(/claimCheck option/);
  });

  it('the server gone mid-drain and back: nothing lost, no attempt burnt, per-key order kept, delivery resumes within a second or so', async () => {
    const { name, consumer } = await queue(true);
    const p = await proxy();
    const h = await openOutbox(
      { client: sqsConfig(`http://127.0.0.1:${p.port}`) },
      { dispatcher: { batchSize: 20, publishTimeoutMs: 2_000, maxOutagePauseMs: 500 } },
    );
    const KEYS = 50;
    const ROUNDS = 20;
    const ids: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      ids.push(
        ...(await h.enqueue(
          Array.from({ length: KEYS }, (_, k) => ({
            topic: name,
            key: `k${k}`,
            payload: { n: round },
          })),
        )),
      );
    }
    let stop = false;
    const dispatching = (async () => {
      while (!stop) {
        await h.dispatcher.drain();
        await sleep(20);
      }
    })();
    try {
      await waitFor(
        'three batches delivered',
        async () => (await h.rows()).filter((r) => r.status === 'delivered').length >= 60,
        { timeoutMs: 30_000, intervalMs: 10 },
      );
      p.cut('reset');
      const outagesAtCut = h.outages.length;
      await waitFor('the dispatcher to meet the outage', () => h.outages.length > outagesAtCut, {
        timeoutMs: 15_000,
      });
      const during = await h.rows();
      expect(during.some((r) => r.status === 'pending')).toBe(true);
      // A batch whose calls failed as a whole gave its attempts back; none went dead.
      expect(during.every((r) => r.status !== 'dead' && r.attempts <= 1)).toBe(true);
      await sleep(1_000);
      const deliveredBefore = (await h.rows()).filter((r) => r.status === 'delivered').length;

      p.restore();
      const restoredAt = Date.now();
      await waitFor(
        'delivery to resume after the server returns',
        async () =>
          (await h.rows()).filter((r) => r.status === 'delivered').length > deliveredBefore,
        { timeoutMs: 3_000, intervalMs: 20 },
      );
      process.stdout.write(
        `SQS outage: delivery resumed ${Date.now() - restoredAt} ms after the restore\n`,
      );
      await waitFor('every row delivered', allSettled(h), { timeoutMs: 60_000 });
    } finally {
      stop = true;
      await dispatching;
    }
    const received = await consumer.received.settle(ids.length, 500, 30_000);
    const rows = await h.rows();
    expect(rows.every((r) => r.status === 'delivered' && r.attempts <= 2)).toBe(true);
    // Nothing lost, and on a FIFO queue nothing twice (a re-sent batch is deduplicated by id).
    expect(received.map(outboxIdOf).sort()).toEqual([...ids].sort());
    for (const [, rounds] of arrivalsByKey(received))
      expect(rounds).toEqual([...Array(ROUNDS).keys()]);
    expect(h.outages.every((e) => e instanceof PublisherUnavailableError)).toBe(true);
  }, 120_000);

  for (const fifo of [true, false]) {
    it(`a lost answer (the publish times out after SQS took the batch) is published again: ${fifo ? 'a FIFO queue stores it once (MessageDeduplicationId)' : 'a standard queue stores it twice, as documented'}`, async () => {
      const { name, consumer } = await queue(fifo);
      const p = await proxy();
      const h = await openOutbox(
        { client: sqsConfig(`http://127.0.0.1:${p.port}`) },
        {
          // The claim loop settles a timed-out batch at once (the rows read below); an owner of
          // partitions settles it when the held call returns.
          dispatcher: { claims: 'leases', batchSize: 10, publishTimeoutMs: 1_000 },
          retry: { initialDelayMs: 50, jitter: 0 },
        },
      );
      const ids = await h.enqueue(
        Array.from({ length: 10 }, (_, k) => ({ topic: name, key: `k${k}`, payload: { k } })),
      );
      p.holdAnswerTo(/SendMessageBatch/);
      await h.dispatcher.runOnce();
      // The batch timed out: each message counts an attempt and waits for its retry.
      const timedOut = await h.rows();
      expect(timedOut.every((r) => r.status === 'pending' && r.attempts === 1)).toBe(true);
      expect(
        timedOut.every((r) => /PublishTimeoutError|did not finish/i.test(r.lastError ?? '')),
      ).toBe(true);
      p.restore();
      await dispatchUntil(h, 'the retry to go through', allSettled(h));
      expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts === 2)).toBe(
        true,
      );
      const received = await consumer.received.settle(10, 1_500, 30_000);
      const got = received.map(outboxIdOf);
      expect(new Set(got)).toEqual(new Set(ids));
      if (fifo) expect(got).toHaveLength(10);
      else expect(got).toHaveLength(20);
    }, 60_000);
  }

  it('one message SQS refuses in a batch (too long for the queue) fails alone and is dead-lettered at once; its neighbours are published once', async () => {
    const { name, consumer } = await queue(false);
    // The publisher allows 1 MiB, the queue 256 KiB (ElasticMQ's strict SQS limits): the batch
    // is refused as a whole, and narrowed down to the one message.
    const h = await openOutbox(
      { maxMessageBytes: 1_048_576 },
      { maxPayloadBytes: 1_048_576, dispatcher: { batchSize: 20 } },
    );
    const small = await h.enqueue(
      Array.from({ length: 9 }, (_, k) => ({ topic: name, key: `k${k}`, payload: { k } })),
    );
    const [poison] = await h.enqueue({
      topic: name,
      key: 'big',
      payload: { text: 'x'.repeat(300_000) },
    });
    const more = await h.enqueue(
      Array.from({ length: 9 }, (_, k) => ({ topic: name, key: `m${k}`, payload: { k } })),
    );
    await dispatchUntil(h, 'settled', allSettled(h));
    const rows = await h.rows();
    const dead = rows.filter((r) => r.status === 'dead');
    expect(dead.map((r) => r.messageId)).toEqual([poison]);
    expect(dead[0]).toMatchObject({ attempts: 1 });
    expect(dead[0]?.lastError).toMatch(
      /PermanentPublishError: SQS refused the message .*MessageTooLong/,
    );
    expect(rows.filter((r) => r.status === 'delivered')).toHaveLength(18);
    const received = await consumer.received.settle(18, 1_000, 30_000);
    expect(received.map(outboxIdOf).sort()).toEqual([...small, ...more].sort());
  });

  describe('publish() driven directly', () => {
    it('an entry SQS refuses as the sender fault (a per-message delay on a FIFO queue) fails permanently, alone; the others are published', async () => {
      const { name, consumer } = await queue(true);
      const p = publisher();
      const batch = [
        record(name, 'a'),
        record(name, 'b', { attributes: { sqs: { delaySeconds: 3 } } }),
        record(name, 'c'),
      ];
      const outcomes = await p.publish(batch, live());
      expect(outcomes[0]).toEqual({ ok: true });
      expect(outcomes[2]).toEqual({ ok: true });
      expect(outcomes[1]).toMatchObject({ ok: false });
      const error = (outcomes[1] as { error: unknown }).error;
      expect(error).toBeInstanceOf(PermanentPublishError);
      expect(String(error)).toMatch(/InvalidParameterValue.*DelaySeconds/);
      const received = await consumer.received.settle(2);
      expect(received.map(outboxIdOf)).toEqual([batch[0]?.messageId, batch[2]?.messageId]);
    });

    it('a key whose message failed sends nothing more of it in that publish; other keys go on', async () => {
      const { name, consumer } = await queue(true);
      const p = publisher();
      const batch = [
        record(name, 'a', { attributes: { sqs: { delaySeconds: 3 } } }),
        record(name, 'a'),
        record(name, 'b'),
        record(name, 'b'),
      ];
      const outcomes = await p.publish(batch, live());
      expect(outcomes.map((o) => o.ok)).toEqual([false, false, true, true]);
      expect(outcomes[1]).toMatchObject({ sent: false });
      const received = await consumer.received.settle(2);
      expect(received.map(outboxIdOf)).toEqual([batch[2]?.messageId, batch[3]?.messageId]);
    });

    it('a missing queue fails its messages permanently (by name, from GetQueueUrl; by URL, from SendMessageBatch)', async () => {
      const p = publisher();
      const byName = record(uniqueQueueName('never-created'), 'k');
      const byUrl = record('ignored', 'k');
      const [named] = await p.publish([byName], live());
      expect((named as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
      expect(String((named as { error: unknown }).error)).toMatch(/does not exist/);
      const q = new SqsPublisher({
        client: sqsConfig(),
        queue: `http://${SERVICES.elasticmq.host}:${SERVICES.elasticmq.port}/000000000000/${uniqueQueueName('gone')}`,
      });
      publishers.push(q);
      const [url] = await q.publish([byUrl], live());
      expect((url as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    });

    describe('aborted with the batch in the queue and the answer to its call held back (a proxy)', () => {
      it.each(abortGraceCases())('$name', async (c) => {
        const { name, consumer } = await queue(false);
        const p = await proxy();
        const target = {
          proxy: p,
          call: /SendMessageBatch/,
          publisher: publisher({ client: sqsConfig(`http://127.0.0.1:${p.port}`) }),
          destination: name,
          received: consumer.received,
        };
        expect(await c.run(target)).toEqual(c.expected);
      });
    });

    it('nothing listening: every message is an outage never sent (no attempt), and ping() rejects; ping() resolves against ElasticMQ', async () => {
      const { name } = await queue(false);
      const down = publisher({ client: sqsConfig(`http://127.0.0.1:${await freePort()}`) });
      const outcomes = await down.publish([record(name, 'a'), record(name, null)], live());
      for (const outcome of outcomes) {
        expect(outcome).toMatchObject({ ok: false, sent: false });
        expect((outcome as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);
      }
      await expect(down.ping(AbortSignal.timeout(5_000))).rejects.toBeInstanceOf(
        PublisherUnavailableError,
      );
      const up = publisher({ queue: name });
      await expect(up.ping(AbortSignal.timeout(5_000))).resolves.toBeUndefined();
      await expect(publisher().ping(AbortSignal.timeout(5_000))).resolves.toBeUndefined();
    });
  });
});
