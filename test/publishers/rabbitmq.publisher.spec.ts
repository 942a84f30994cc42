import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { Logger } from '@nestjs/common';
import { connect, type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  PermanentPublishError,
  PublisherUnavailableError,
  PublishTimeoutError,
  type OutboxRecord,
} from '../../lib';
import {
  RABBITMQ_PUBLISH_ID_HEADER,
  RabbitMqAccessRefusedError,
  RabbitMqPublishError,
  RabbitMqPublisher,
  type RabbitMqPublisherOptions,
} from '../../lib/publishers/rabbitmq';
import { TEST_DATABASES, type TestDatabase, testDatabase, uniqueTable } from '../support/databases';
import {
  allSettled,
  dispatchUntil,
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import { describeWith, SERVICES } from '../support/services';
import { startTcpRelay } from '../support/transports/net';
import { sleep, waitFor } from '../support/wait-for';

// @runs-alone: its memory-alarm test blocks every publisher on the broker, which would fail the
// RabbitMQ specs running beside it (scripts/test.sh runs this spec by itself).
//
// {PostgreSQL, MariaDB} → RabbitMqPublisher → a real RabbitMQ → an amqplib consumer. Every test
// asserts what the consumer received and what the outbox table says.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const KEY_HEADER = 'x-outbox-key';
const run = promisify(execFile);

/**
 * The broker-control tests need rabbitmqctl on this machine (the memory-alarm test also the
 * relative memory watermark to restore; the access tests add users and vhosts of their own).
 * Decided at load time so that a test that cannot run is skipped with the reason in its name, and
 * under CI=true fails the run instead of passing without checking anything.
 */
function probeRabbitmqctl(): { missing?: string; watermark?: string } {
  // rabbitmqctl status can fail for a moment while the broker (re)starts: try a few times.
  for (let attempt = 0; attempt < 3; attempt++) {
    if (attempt > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_000);
    let status: string;
    try {
      status = execFileSync('rabbitmqctl', ['status'], {
        encoding: 'utf8',
        timeout: 30_000,
        stdio: ['ignore', 'pipe', 'ignore'],
      });
    } catch {
      continue;
    }
    return {
      watermark: /Memory high watermark setting: ([\d.]+) of available memory/.exec(status)?.[1],
    };
  }
  return { missing: 'rabbitmqctl is not available to this user' };
}
const RABBITMQCTL = probeRabbitmqctl();
const NO_ALARM_CONTROL =
  RABBITMQCTL.missing ??
  (RABBITMQCTL.watermark === undefined ? 'the memory watermark is not relative' : undefined);
if (NO_ALARM_CONTROL !== undefined && process.env.CI === 'true') {
  throw new Error(`CI=true but the RabbitMQ broker-control tests cannot run: ${NO_ALARM_CONTROL}`);
}
const brokerControlTest = (name: string, fn: () => Promise<void>, timeout?: number): void =>
  NO_ALARM_CONTROL !== undefined
    ? it.skip(`${name} [skipped: ${NO_ALARM_CONTROL}]`, fn)
    : it(name, fn, timeout);
/** A test that uses rabbitmqctl on users, vhosts or connections of its own only. */
const ownResourcesTest = (name: string, fn: () => Promise<void>, timeout?: number): void =>
  RABBITMQCTL.missing !== undefined
    ? it.skip(`${name} [skipped: ${RABBITMQCTL.missing}]`, fn)
    : it(name, fn, timeout);
const rabbitmqctl = (...args: string[]) => run('rabbitmqctl', args, { timeout: 60_000 });

/** Has the broker close the connection named `name` (320 CONNECTION_FORCED); no other. */
async function closeConnectionNamed(name: string): Promise<void> {
  const { stdout } = await rabbitmqctl('list_connections', 'pid', 'client_properties', '-q');
  const pid = stdout
    .split('\n')
    .find((line) => line.includes(`"${name}"`))
    ?.split('\t')[0];
  if (pid === undefined) throw new Error(`no RabbitMQ connection named ${name}`);
  await rabbitmqctl('close_connection', pid, 'closed by the test');
}

interface Delivered {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly body: string;
  readonly headers: Record<string, unknown>;
  readonly message: ConsumeMessage;
}

interface Harness extends OutboxHarness<RabbitMqPublisher> {
  /** The durable queue the publisher declares (its topology) and publishes to by default. */
  readonly queue: string;
}

/** RABBITMQ_URL through a relay on this machine's `port`. */
const relayed = (port: number): string =>
  RABBITMQ_URL.replace(
    `@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`,
    `@127.0.0.1:${port}`,
  );

let counter = 0;
const uniqueName = (what: string): string => `outbox-it-${what}-${process.pid}-${++counter}`;

/**
 * An amqplib consumer connection (as guest, or `url`) for one describe block: consumes queues
 * into arrays and deletes the queues and exchanges it was told about when the block ends.
 */
function rabbitConsumers(url = RABBITMQ_URL) {
  let connection: ChannelModel | undefined;
  const queues: string[] = [];
  const exchanges: string[] = [];

  async function channel(): Promise<Channel> {
    if (connection === undefined) {
      const opened = await connect(url);
      opened.on('error', () => undefined);
      opened.on('close', () => {
        if (connection === opened) connection = undefined;
      });
      connection = opened;
    }
    const created = await connection.createChannel();
    created.on('error', () => undefined);
    return created;
  }

  /** Consumes `queue` (declared durable) into an array, acknowledging each message. */
  async function consume(queue: string): Promise<Delivered[]> {
    const ch = await channel();
    await ch.assertQueue(queue, { durable: true });
    await ch.prefetch(500);
    const received: Delivered[] = [];
    await ch.consume(queue, (message) => {
      if (message === null) return;
      const headers = (message.properties.headers ?? {}) as Record<string, unknown>;
      received.push({
        messageId: String(message.properties.messageId),
        type: String(message.properties.type),
        key: typeof headers[KEY_HEADER] === 'string' ? headers[KEY_HEADER] : null,
        body: message.content.toString('utf8'),
        headers,
        message,
      });
      ch.ack(message);
    });
    return received;
  }

  afterAll(async () => {
    if (queues.length + exchanges.length > 0) {
      const ch = await channel().catch(() => undefined);
      for (const queue of queues) await ch?.deleteQueue(queue).catch(() => undefined);
      for (const exchange of exchanges) await ch?.deleteExchange(exchange).catch(() => undefined);
    }
    await connection?.close().catch(() => undefined);
  });

  return {
    channel,
    consume,
    deleteAtEnd: (queue: string) => queues.push(queue),
    deleteExchangeAtEnd: (exchange: string) => exchanges.push(exchange),
  };
}

/** A publisher to RabbitMQ as guest that declares `queue` (durable) on connect. */
function rabbitPublisher(
  queue: string,
  options: Partial<RabbitMqPublisherOptions> = {},
): RabbitMqPublisher {
  return new RabbitMqPublisher({
    url: RABBITMQ_URL,
    assertTopology: async (channel) => {
      await channel.assertQueue(queue, { durable: true });
    },
    reconnect: { initialDelayMs: 100, maxDelayMs: 1_000 },
    ...options,
  });
}

/** One DataSource per database, a table and a queue per test, one amqplib consumer connection. */
function rabbitSuite(db: TestDatabase) {
  let ds: DataSource;
  const baseTable = uniqueTable('outbox_rmq');
  const harnesses: Harness[] = [];
  const consumers = rabbitConsumers();

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });

  afterEach(async () => {
    await Promise.all(harnesses.splice(0).map((h) => h.close()));
  });

  afterAll(async () => {
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  async function openOutbox(
    publisherOptions: Partial<RabbitMqPublisherOptions> = {},
    overrides: HarnessOverrides = {},
  ): Promise<Harness> {
    const queue = uniqueName('q');
    consumers.deleteAtEnd(queue);
    const harness = await openOutboxHarness(
      ds,
      rabbitPublisher(queue, publisherOptions),
      overrides,
      'outbox_rmq',
    );
    const withQueue: Harness = { ...harness, queue };
    harnesses.push(withQueue);
    return withQueue;
  }

  return {
    ds: () => ds,
    openOutbox,
    consume: consumers.consume,
    dispatchUntil,
    allSettled,
    consumerChannel: consumers.channel,
  };
}

for (const db of TEST_DATABASES.filter((d) => d.service !== null)) {
  describeWith(
    [db.service ?? 'postgres', 'rabbitmq'],
    `RabbitMqPublisher (${db.name} → RabbitMQ)`,
    () => {
      const suite = rabbitSuite(db);

      it('delivers committed messages as persistent JSON with id, type, key and headers; rolled-back ones never arrive', async () => {
        const h = await suite.openOutbox();
        const received = await suite.consume(h.queue);
        const ids = await h.enqueue(
          Array.from({ length: 20 }, (_, i) => ({
            topic: h.queue,
            key: i === 19 ? null : `order-${i % 7}`,
            type: 'order.created',
            payload: { n: i, text: 'é✓ "quoted"' },
            headers: { 'x-tenant': 't1' },
          })),
        );
        await expect(
          suite.ds().transaction(async (m) => {
            await h.outbox.enqueue(
              { topic: h.queue, key: 'ghost', type: 'order.created', payload: { ghost: true } },
              m,
            );
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');

        await suite.dispatchUntil(h, 'the outbox to drain', suite.allSettled(h));
        await waitFor('20 messages at the consumer', () => received.length >= 20, {
          timeoutMs: 30_000,
        });
        await sleep(300);

        expect(received).toHaveLength(20);
        // Keys are published head first, so arrival order is per key; check each by id.
        expect(received.map((r) => r.messageId).sort()).toEqual([...ids].sort());
        const byId = new Map(received.map((r) => [r.messageId, r]));
        ids.forEach((id, i) => {
          const r = byId.get(id) as Delivered;
          expect(r.type).toBe('order.created');
          expect(r.key).toBe(i === 19 ? null : `order-${i % 7}`);
          expect(JSON.parse(r.body)).toEqual({ n: i, text: 'é✓ "quoted"' });
          expect(r.headers).toEqual({
            'x-tenant': 't1',
            [OUTBOX_HEADER_MESSAGE_ID]: id,
            [OUTBOX_HEADER_TYPE]: 'order.created',
            ...(i === 19 ? {} : { [KEY_HEADER]: `order-${i % 7}` }),
            // Names this publish (differs on every attempt), so a return is matched to it.
            [RABBITMQ_PUBLISH_ID_HEADER]: expect.stringMatching(/^\d+$/) as unknown,
          });
          expect(r.message.properties).toMatchObject({
            deliveryMode: 2,
            contentType: 'application/json',
            messageId: id,
            type: 'order.created',
          });
          expect(typeof r.message.properties.timestamp).toBe('number');
        });
        // Per key, arrival order is enqueue order.
        const keyOrder = (list: readonly string[]) => list.map((id) => byId.get(id)?.key ?? '');
        for (const key of new Set(keyOrder(ids))) {
          expect(received.filter((r) => (r.key ?? '') === key).map((r) => r.messageId)).toEqual(
            ids.filter((id) => (byId.get(id)?.key ?? '') === key),
          );
        }
        expect(received.some((r) => r.body.includes('ghost'))).toBe(false);
        const rows = await h.rows();
        expect(rows.map((r) => r.messageId)).toEqual(ids);
        expect(rows.every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
      });

      it('keeps per-key order at the consumer for 50 keys × 100 messages enqueued in separate transactions', async () => {
        const h = await suite.openOutbox();
        const received = await suite.consume(h.queue);
        const KEYS = 50;
        const PER_KEY = 100;
        let producing = true;
        const dispatching = (async () => {
          while (producing || !(await suite.allSettled(h)())) {
            await h.dispatcher.drain();
            await sleep(10);
          }
        })();
        const WORKERS = 10;
        try {
          await Promise.all(
            Array.from({ length: WORKERS }, async (_, w) => {
              for (let n = 0; n < PER_KEY; n++) {
                for (let k = w; k < KEYS; k += WORKERS)
                  await h.enqueue({
                    topic: h.queue,
                    key: `key-${k}`,
                    type: 'seq',
                    payload: { k, n },
                  });
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
          const { n } = JSON.parse(r.body) as { n: number };
          perKey.set(r.key ?? '', [...(perKey.get(r.key ?? '') ?? []), n]);
        }
        expect(perKey.size).toBe(KEYS);
        const inOrder = Array.from({ length: PER_KEY }, (_, n) => n);
        for (const [, ns] of perKey) expect(ns).toEqual(inOrder);
        expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
      });
    },
  );
}

const postgres = testDatabase('postgres');

describeWith(['postgres', 'rabbitmq'], 'RabbitMqPublisher failures (PostgreSQL → RabbitMQ)', () => {
  const suite = rabbitSuite(postgres);
  const retry = { maxAttempts: 3, initialDelayMs: 20, maxDelayMs: 50 };

  /** An outbox whose topic 'unroutable' goes to an exchange with no queue bound (yet). */
  async function unroutableOutbox(
    retryOptions: typeof retry,
  ): Promise<{ h: Harness; noBinding: string }> {
    const noBinding = uniqueName('no-binding');
    let queue = '';
    const h = await suite.openOutbox(
      {
        exchange: (r) => (r.topic === 'unroutable' ? noBinding : ''),
        routingKey: (r) => (r.topic === 'unroutable' ? 'nowhere' : queue),
        assertTopology: async (channel) => {
          await channel.assertExchange(noBinding, 'direct', { durable: false, autoDelete: false });
          await channel.assertQueue(queue, { durable: true });
        },
      },
      { retry: retryOptions },
    );
    queue = h.queue;
    return { h, noBinding };
  }

  it('retries an unroutable message (returned, though confirmed) and dead-letters it; it is never delivered', async () => {
    const { h, noBinding } = await unroutableOutbox(retry);
    const received = await suite.consume(h.queue);
    const ids = await h.enqueue([
      ...Array.from({ length: 5 }, (_, i) => ({ topic: 'ok', key: `k-${i}`, payload: { i } })),
      { topic: 'unroutable', key: 'lost-key', payload: { unroutable: true } },
      ...Array.from({ length: 5 }, (_, i) => ({
        topic: 'ok',
        key: `k-${i + 5}`,
        payload: { i: i + 5 },
      })),
    ]);
    const first = await h.dispatcher.runOnce();
    expect(first).toMatchObject({
      claimed: 11,
      published: 10,
      retried: 1,
      deadLettered: 0,
      released: 0,
    });

    await suite.dispatchUntil(h, 'the unroutable message to be dead-lettered', suite.allSettled(h));
    await sleep(300);
    const rows = await h.rows();
    const bad = rows.find((r) => r.messageId === ids[5]);
    expect(bad).toMatchObject({ status: 'dead', attempts: 3 });
    expect(bad?.lastError).toMatch(
      /RabbitMqPublishError: RabbitMQ returned the message as unroutable \(312 NO_ROUTE\)/,
    );
    expect(
      rows.filter((r) => r !== bad).every((r) => r.status === 'delivered' && r.attempts === 1),
    ).toBe(true);
    expect(received.map((r) => r.messageId)).toEqual(ids.filter((id) => id !== ids[5]));
    const channel = await suite.consumerChannel();
    await channel.deleteExchange(noBinding);
    await channel.close();
  });

  it('with outboxHeaders: false: no headers unless the message has headers of its own, the publish id in correlationId; an unroutable message is still retried and dead-lettered', async () => {
    const noBinding = uniqueName('no-binding');
    let queue = '';
    const h = await suite.openOutbox(
      {
        outboxHeaders: false,
        exchange: (r) => (r.topic === 'unroutable' ? noBinding : ''),
        routingKey: (r) => (r.topic === 'unroutable' ? 'nowhere' : queue),
        assertTopology: async (channel) => {
          await channel.assertExchange(noBinding, 'direct', { durable: false, autoDelete: false });
          await channel.assertQueue(queue, { durable: true });
        },
      },
      { retry },
    );
    queue = h.queue;
    const received = await suite.consume(h.queue);
    const ids = await h.enqueue([
      { topic: 'ok', key: 'k-1', type: 'order.created', payload: { n: 1 } },
      {
        topic: 'ok',
        key: 'k-2',
        type: 'order.created',
        payload: { n: 2 },
        headers: { 'x-tenant': 't1' },
      },
      { topic: 'unroutable', key: 'lost-key', payload: { unroutable: true } },
    ]);
    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 3, published: 2, retried: 1 });
    await suite.dispatchUntil(h, 'the unroutable message to be dead-lettered', suite.allSettled(h));
    await sleep(300);

    expect(received.map((r) => r.messageId).sort()).toEqual([ids[0], ids[1]].sort());
    const plain = received.find((r) => r.messageId === ids[0]);
    const tenant = received.find((r) => r.messageId === ids[1]);
    // No headers for a message without headers of its own (amqplib sends an empty table); its
    // own for the other.
    expect(plain?.message.properties.headers ?? {}).toEqual({});
    expect(tenant?.message.properties.headers).toEqual({ 'x-tenant': 't1' });
    for (const r of received) {
      expect(r.message.properties).toMatchObject({
        deliveryMode: 2,
        messageId: r.messageId,
        type: 'order.created',
        contentType: 'application/json',
        correlationId: expect.stringMatching(/^x-outbox-publish:\d+$/) as unknown,
      });
    }
    const rows = await h.rows();
    expect(rows.find((r) => r.messageId === ids[2])).toMatchObject({ status: 'dead', attempts: 3 });
    expect(rows.find((r) => r.messageId === ids[2])?.lastError).toMatch(
      /RabbitMQ returned the message as unroutable \(312 NO_ROUTE\)/,
    );
    const channel = await suite.consumerChannel();
    await channel.deleteExchange(noBinding);
    await channel.close();
  });

  it('a run refused part way (unroutable): the key stops there and the rest of its run goes back unpublished; once routable it goes on in order', async () => {
    const { h, noBinding } = await unroutableOutbox({
      maxAttempts: 50,
      initialDelayMs: 20,
      maxDelayMs: 50,
    });
    const { queue } = h;
    const received = await suite.consume(h.queue);
    // Key A's third message is refused; key B's run is all routable.
    const ids = await h.enqueue(
      ['A', 'B'].flatMap((key) =>
        [1, 2, 3, 4, 5].map((n) => ({
          topic: key === 'A' && n === 3 ? 'unroutable' : 'ok',
          key,
          payload: { key, n },
        })),
      ),
    );
    const [a1, a2, a3, a4, a5, ...b] = ids as [string, string, string, string, string, ...string[]];

    // One batch holds both runs: A stops at a3 (retried), a4 and a5 go back unsent.
    expect(await h.dispatcher.runOnce()).toMatchObject({
      claimed: 10,
      published: 7,
      retried: 1,
      released: 2,
      deadLettered: 0,
    });
    await sleep(300);
    const byKey = (key: string): string[] =>
      received.filter((r) => r.key === key).map((r) => r.messageId);
    expect(byKey('A')).toEqual([a1, a2]);
    expect(byKey('B')).toEqual(b);
    const rows = await h.rows();
    for (const id of [a4, a5]) {
      expect(rows.find((r) => r.messageId === id)).toMatchObject({ attempts: 0, lockedBy: null });
    }

    // Routable again: a3 goes on its next try, then the rest of A, in order, each once.
    const channel = await suite.consumerChannel();
    await channel.bindQueue(queue, noBinding, 'nowhere');
    await suite.dispatchUntil(h, 'key A to be delivered', suite.allSettled(h));
    await waitFor('10 messages at the consumer', () => received.length >= 10, {
      timeoutMs: 10_000,
    });
    await sleep(300);
    expect(byKey('A')).toEqual([a1, a2, a3, a4, a5]);
    expect(byKey('B')).toEqual(b);
    expect(received).toHaveLength(10);
    await channel.deleteExchange(noBinding);
    await channel.close();
  });

  it('a publish to a missing exchange (404 closes the channel) fails alone; the rest of the batch is delivered', async () => {
    const missing = uniqueName('missing-exchange');
    let queue = '';
    // One batch holding every row, which a claim gives (a partition owner's first read after
    // taking its partitions is a short one).
    const h = await suite.openOutbox(
      { exchange: (r) => (r.topic === 'missing' ? missing : ''), routingKey: () => queue },
      { retry, dispatcher: { claims: 'leases' } },
    );
    queue = h.queue;
    const received = await suite.consume(h.queue);
    const ids = await h.enqueue([
      ...Array.from({ length: 40 }, (_, i) => ({ topic: 'ok', key: `k-${i}`, payload: { i } })),
      { topic: 'missing', key: 'bad', payload: { bad: true } },
      ...Array.from({ length: 40 }, (_, i) => ({
        topic: 'ok',
        key: `k-${i + 40}`,
        payload: { i: i + 40 },
      })),
    ]);
    const badId = ids[40];
    const first = await h.dispatcher.runOnce();
    expect(first).toMatchObject({ claimed: 81, published: 80, retried: 1, deadLettered: 0 });
    const afterFirst = (await h.rows()).find((r) => r.messageId === badId);
    expect(afterFirst).toMatchObject({ status: 'pending', attempts: 1 });
    expect(afterFirst?.lastError).toMatch(/404 \(NOT-FOUND\).*no exchange/);

    // The channel is opened again for the next batches; the bad message ends dead-lettered.
    const later = await h.enqueue(
      Array.from({ length: 5 }, (_, i) => ({
        topic: 'ok',
        key: `later-${i}`,
        payload: { later: i },
      })),
    );
    await suite.dispatchUntil(h, 'every message settled', suite.allSettled(h));
    await waitFor(
      '85 messages at the consumer',
      () => new Set(received.map((r) => r.messageId)).size >= 85,
      { timeoutMs: 30_000 },
    );
    await sleep(300);

    const rows = await h.rows();
    expect(rows.find((r) => r.messageId === badId)).toMatchObject({ status: 'dead', attempts: 3 });
    expect(
      rows
        .filter((r) => r.messageId !== badId)
        .every((r) => r.status === 'delivered' && r.attempts === 1),
    ).toBe(true);
    // Nothing lost. Messages whose confirm the closed channel swallowed were published again, so a
    // copy is allowed (at least once), but every one arrived.
    const expected = [...ids.filter((id) => id !== badId), ...later].sort();
    expect([...new Set(received.map((r) => r.messageId))].sort()).toEqual(expected);
  });

  /**
   * The broker's replies held back on the way: the first message reaches RabbitMQ, its confirm
   * does not come back, and with one confirm slot the other two are never written. Whichever
   * deadline cuts the publish short (`first`), only the first counts an attempt.
   */
  async function cutShort(first: 'publisher' | 'dispatcher'): Promise<void> {
    const [own, dispatcher] = first === 'publisher' ? [300, 5_000] : [5_000, 300];
    const relay = await startTcpRelay(SERVICES.rabbitmq.host, SERVICES.rabbitmq.port);
    try {
      const h = await suite.openOutbox(
        { url: relayed(relay.port), maxOutstandingConfirms: 1, publishTimeoutMs: own },
        { dispatcher: { publishTimeoutMs: dispatcher } },
      );
      const received = await suite.consume(h.queue);
      await h.enqueue({ topic: h.queue, key: 'warm-up', payload: {} });
      await h.dispatcher.drain(); // connected, channel open
      const ids = await h.enqueue(
        ['a', 'b', 'c'].map((key) => ({ topic: h.queue, key, payload: { key } })),
      );

      relay.holdReplies();
      expect(await h.dispatcher.runOnce()).toMatchObject({
        claimed: 3,
        published: 0,
        retried: 1,
        released: 2,
      });
      const rows = await h.rows();
      expect(ids.map((id) => rows.find((r) => r.messageId === id)?.attempts)).toEqual([1, 0, 0]);
      expect(rows.every((r) => r.status !== 'dead')).toBe(true);

      relay.release();
      await suite.dispatchUntil(h, 'delivery once the replies flow', suite.allSettled(h));
      await waitFor('the 3 messages', () =>
        ids.every((id) => received.some((r) => r.messageId === id)),
      );
    } finally {
      await relay.close();
    }
  }

  it("a publish cut short by the publisher's own timeout counts an attempt only for what it wrote; the rest goes back unsent", () =>
    cutShort('publisher'));

  it("a publish cut short by the dispatcher's deadline reads the publisher's answer to the abort: an attempt only for what was written", () =>
    cutShort('dispatcher'));

  it('publishes a batch larger than maxOutstandingConfirms by waiting for confirms to free slots', async () => {
    // One batch of 150, which a claim gives (a partition owner's first read is a short one).
    const h = await suite.openOutbox(
      { maxOutstandingConfirms: 3 },
      { dispatcher: { claims: 'leases' } },
    );
    const received = await suite.consume(h.queue);
    const ids = await h.enqueue(
      Array.from({ length: 150 }, (_, i) => ({ topic: h.queue, key: `k-${i}`, payload: { i } })),
    );
    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 150, published: 150 });
    await waitFor('150 messages', () => received.length >= 150, { timeoutMs: 30_000 });
    expect(received.map((r) => r.messageId)).toEqual(ids);
  });

  brokerControlTest(
    'fails fast while RabbitMQ blocks publishers (memory alarm), dead-letters nothing, then resumes',
    async () => {
      const watermark = RABBITMQCTL.watermark ?? '0.4';
      const h = await suite.openOutbox({ publishTimeoutMs: 5_000 });
      const received = await suite.consume(h.queue);
      await h.enqueue({ topic: h.queue, key: 'warm-up', payload: { warm: true } });
      await h.dispatcher.drain(); // connected and published once: RabbitMQ notifies publishing connections
      const ids = await h.enqueue(
        Array.from({ length: 10 }, (_, i) => ({ topic: h.queue, key: `k-${i}`, payload: { i } })),
      );
      try {
        await run('rabbitmqctl', ['set_vm_memory_high_watermark', '0']);
        const started = Date.now();
        await waitFor(
          'the outage to be reported',
          async () => {
            await h.dispatcher.runOnce();
            return h.outages.length > 0;
          },
          { timeoutMs: 10_000, intervalMs: 20 },
        );
        expect(Date.now() - started).toBeLessThan(5_000); // not the publish timeout: the blocked notice
        expect(
          h.outages.some(
            (e) => e instanceof PublisherUnavailableError && /blocking publishers/.test(e.message),
          ),
        ).toBe(true);
        const rows = await h.rows();
        // An outage gives the attempt back; a batch the block cut in half (some confirmed, the
        // rest refused) counts one for those written before the block, none for the others,
        // and none is dead.
        expect(rows.every((r) => r.attempts <= 1 && r.status !== 'dead')).toBe(true);
      } finally {
        await run('rabbitmqctl', ['set_vm_memory_high_watermark', watermark]);
      }
      await suite.dispatchUntil(h, 'delivery after the alarm cleared', suite.allSettled(h));
      await waitFor(
        'the 10 messages',
        () => ids.every((id) => received.some((r) => r.messageId === id)),
        { timeoutMs: 30_000 },
      );
      expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(
        true,
      );
    },
  );

  brokerControlTest(
    'survives a broker stop mid-run (rabbitmqctl STOP_APP / START_APP): nothing lost, none dead-lettered, no attempt burnt by the outage itself, reconnects',
    async () => {
      const h = await suite.openOutbox({}, { dispatcher: { batchSize: 5 } });
      const KEYS = 30;
      const ROUNDS = 30;
      const ids: string[] = [];
      const round = (n: number) =>
        Array.from({ length: KEYS }, (_, k) => ({
          topic: h.queue,
          key: `key-${k}`,
          type: 'restart',
          payload: { k, n },
        }));
      for (let n = 0; n < ROUNDS; n++) ids.push(...(await h.enqueue(round(n))));
      // Declared durable now; consumed only after the restart (persistent messages survive it).
      const channel = await suite.consumerChannel();
      await channel.assertQueue(h.queue, { durable: true });
      await channel.close();

      let stopDispatching = false;
      const dispatching = (async () => {
        while (!stopDispatching) {
          await h.dispatcher.drain();
          await sleep(50);
        }
      })();
      let stopped = false;
      try {
        await waitFor(
          'a tenth delivered',
          async () =>
            (await h.rows()).filter((r) => r.status === 'delivered').length >= ids.length / 10,
          { timeoutMs: 30_000 },
        );
        stopped = true;
        await run('rabbitmqctl', ['stop_app'], { timeout: 60_000 });
        const outagesAtStop = h.outages.length;
        // The backlog may be gone by the time the broker has stopped: commit more, so the
        // dispatcher certainly has work during the outage.
        ids.push(...(await h.enqueue(round(ROUNDS))));
        await waitFor(
          'the dispatcher to see the outage',
          () => h.outages.length > outagesAtStop + 1,
          { timeoutMs: 30_000 },
        );
        const duringOutage = await h.rows();
        expect(duringOutage.some((r) => r.status === 'pending')).toBe(true);
        // An outage gives the attempt back; a batch cut off mid-flight that hit the publish
        // deadline counts one (the broker may have it), and none is dead.
        expect(duringOutage.every((r) => r.attempts <= 1 && r.status !== 'dead')).toBe(true);

        await run('rabbitmqctl', ['start_app'], { timeout: 60_000 });
        stopped = false;
        await waitFor('every row delivered after the restart', suite.allSettled(h), {
          timeoutMs: 60_000,
        });
      } finally {
        stopDispatching = true;
        await dispatching;
        if (stopped)
          await run('rabbitmqctl', ['start_app'], { timeout: 60_000 }).catch(() => undefined);
      }

      const received = await suite.consume(h.queue);
      await waitFor(
        'every message at the consumer',
        () => ids.every((id) => received.some((r) => r.messageId === id)),
        { timeoutMs: 30_000 },
      );
      const rows = await h.rows();
      expect(
        rows.every((r) => r.status === 'delivered' && r.attempts >= 1 && r.attempts <= 2),
      ).toBe(true);
      expect(h.outages.length).toBeGreaterThan(0);
      // Per key, first arrivals are in order (a message in flight during the stop may come twice).
      const firstSeen = new Map<string, number[]>();
      const seen = new Set<string>();
      for (const r of received) {
        if (seen.has(r.messageId)) continue;
        seen.add(r.messageId);
        const { n } = JSON.parse(r.body) as { n: number };
        firstSeen.set(r.key ?? '', [...(firstSeen.get(r.key ?? '') ?? []), n]);
      }
      for (const [, ns] of firstSeen)
        expect(ns).toEqual(Array.from({ length: ROUNDS + 1 }, (_, n) => n));
    },
    120_000,
  );
});

/** A record as the dispatcher hands it over, for tests that drive publish() directly. */
function rec(topic: string, messageId: string, payload = '{"n":1}'): OutboxRecord {
  return {
    id: messageId,
    messageId,
    topic,
    key: null,
    type: 'direct',
    payload,
    headers: {},
    attempts: 1,
    createdAt: new Date(),
  };
}

const anySignal = (): AbortSignal => new AbortController().signal;

describeWith(
  ['rabbitmq'],
  'RabbitMqPublisher channel closes and returns (publish() driven directly)',
  () => {
    const consumers = rabbitConsumers();
    const publishers: RabbitMqPublisher[] = [];

    afterEach(async () => {
      await Promise.all(publishers.splice(0).map((p) => p.close()));
    });

    function publisherFor(
      queue: string,
      options: Partial<RabbitMqPublisherOptions>,
    ): RabbitMqPublisher {
      consumers.deleteAtEnd(queue);
      const publisher = rabbitPublisher(queue, options);
      publishers.push(publisher);
      return publisher;
    }

    it('close() ends when the connection drops as it closes (amqplib would wait for an answer that cannot come)', async () => {
      const relay = await startTcpRelay(SERVICES.rabbitmq.host, SERVICES.rabbitmq.port);
      try {
        const publisher = publisherFor(uniqueName('q-close-drop'), { url: relayed(relay.port) });
        await publisher.connect();
        const closing = publisher.close();
        await relay.close(); // the socket ends before the broker's close-ok gets through
        await expect(closing).resolves.toBeUndefined();
      } finally {
        await relay.close();
      }
    }, 20_000);

    it('close() ends the connection itself when the broker does not answer the close', async () => {
      const relay = await startTcpRelay(SERVICES.rabbitmq.host, SERVICES.rabbitmq.port);
      try {
        const publisher = publisherFor(uniqueName('q-close-silent'), {
          url: relayed(relay.port),
          publishTimeoutMs: 300,
        });
        await publisher.connect();
        expect(relay.connections()).toBe(1);
        relay.holdReplies(); // the broker's close-ok never arrives; the socket stays open
        await expect(publisher.close()).resolves.toBeUndefined();
        await waitFor('the socket to be closed', () => relay.connections() === 0);
      } finally {
        await relay.close();
      }
    }, 20_000);

    it('each message carries exactly its own headers, whatever the messages before it carried (with and without the outbox headers)', async () => {
      // The publisher reuses one headers table per set of header names (amqplib encodes it
      // before publish() returns): a value or a name of one message must never reach another.
      const shapes: { key: string | null; headers: Record<string, string> }[] = [
        { key: 'k-a', headers: { a: 'a0' } },
        { key: null, headers: {} },
        { key: 'k-b', headers: { b: 'b2' } },
        { key: null, headers: { a: 'a3' } },
        { key: 'k-a', headers: { a: 'a4', b: 'b4' } },
        { key: null, headers: {} },
        { key: 'k-c', headers: { b: 'b6', a: 'a6' } },
        { key: 'k-d', headers: {} },
      ];
      for (const outboxHeaders of [true, false]) {
        const queue = uniqueName(`q-headers-${outboxHeaders}`);
        const publisher = publisherFor(queue, {
          exchange: '',
          routingKey: () => queue,
          outboxHeaders,
        });
        await publisher.connect();
        const received = await consumers.consume(queue);
        // Three rounds, so that every set of names is met again after another.
        const records = Array.from({ length: 3 }, (_, round) =>
          shapes.map((shape, i): OutboxRecord => ({
            ...rec(queue, `m-${outboxHeaders}-${round}-${i}`),
            key: shape.key,
            type: `type-${i}`,
            headers: Object.fromEntries(
              Object.entries(shape.headers).map(([k, v]) => [k, `${v}-${round}`]),
            ),
          })),
        ).flat();
        const outcomes = await publisher.publish(records, anySignal());
        expect(outcomes.every((o) => o.ok === true)).toBe(true);
        await waitFor('every message at the queue', () => received.length === records.length);
        for (const record of records) {
          const got = received.find((m) => m.messageId === record.messageId);
          const { [RABBITMQ_PUBLISH_ID_HEADER]: publishId, ...headers } = got?.headers ?? {};
          const expected: Record<string, unknown> = { ...record.headers };
          if (outboxHeaders) {
            expected[OUTBOX_HEADER_MESSAGE_ID] = record.messageId;
            expected[OUTBOX_HEADER_TYPE] = record.type;
            if (record.key !== null) expected[KEY_HEADER] = record.key;
            expect(typeof publishId).toBe('string');
          } else {
            expect(publishId).toBeUndefined();
          }
          // Header values arrive as the long strings AMQP tables carry: compare as text.
          expect(
            Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, String(v)])),
          ).toEqual(expected);
          expect(got?.type).toBe(record.type);
        }
      }
    });

    /**
     * Publishes `bad` between two good messages to a queue of its own: `bad` must fail alone,
     * permanently (not as an outage of the connection), and both good messages must arrive.
     */
    async function failsAloneAndPermanently(
      bad: (queue: string) => OutboxRecord,
      options: Partial<RabbitMqPublisherOptions> = {},
    ): Promise<void> {
      const queue = uniqueName('q-encode');
      const publisher = publisherFor(queue, { exchange: '', routingKey: () => queue, ...options });
      await publisher.connect();
      const received = await consumers.consume(queue);
      const outcomes = await publisher.publish(
        [rec(queue, 'good-1'), bad(queue), rec(queue, 'good-2')],
        anySignal(),
      );
      expect(outcomes[0]).toEqual({ ok: true });
      expect(outcomes[2]).toEqual({ ok: true });
      const failed = outcomes[1];
      expect(failed?.ok).toBe(false);
      expect(failed !== undefined && !failed.ok ? failed.error : undefined).toBeInstanceOf(
        PermanentPublishError,
      );
      await waitFor('both good messages at the queue', () => received.length === 2);
      expect(received.map((m) => m.messageId).sort()).toEqual(['good-1', 'good-2']);
    }

    it('a message amqplib cannot encode is a permanent failure, not an outage; the rest of the batch is published', async () => {
      // An invalid date gives a NaN AMQP timestamp, which amqplib refuses to encode.
      await failsAloneAndPermanently((queue) => ({
        ...rec(queue, 'bad-date'),
        createdAt: new Date(Number.NaN),
      }));
    });

    it.each([true, false])(
      'headers too large for a header frame (outboxHeaders: %s) are a permanent failure of that message, not an outage of the connection; the rest of the batch is published',
      async (outboxHeaders) => {
        // Headers as enqueue accepts them (up to 64 of 8 192 characters), past amqplib's 64 KiB
        // buffer for a message's properties: amqplib cut the last one short without an error,
        // and RabbitMQ closed the connection, failing every message on it as an outage.
        const headers: Record<string, string> = {};
        for (let i = 0; i < 8; i++) headers[`h${i}`] = 'a'.repeat(8_000);
        headers.h8 = 'b'.repeat(3_000);
        await failsAloneAndPermanently((queue) => ({ ...rec(queue, 'big-headers'), headers }), {
          outboxHeaders,
        });
      },
    );

    it("a channel closed by one batch's messages fails only those; the other batch in flight on it is published again in full", async () => {
      const queue = uniqueName('q-close');
      const missing = uniqueName('missing-exchange');
      const publisher = publisherFor(queue, {
        exchange: (r) => (r.topic === 'missing' ? `${missing}-${r.id}` : ''),
        routingKey: () => queue,
      });
      await publisher.connect();
      const received = await consumers.consume(queue);
      const good = (from: number, count: number): OutboxRecord[] =>
        Array.from({ length: count }, (_, i) => rec(queue, `good-${from + i}`));
      // Two messages to exchanges that do not exist: each closes the channel it is published on (404).
      const culprits = [rec('missing', 'bad-1'), rec('missing', 'bad-2')];
      const first = [
        ...good(0, 30),
        culprits[0] as OutboxRecord,
        ...good(30, 30),
        culprits[1] as OutboxRecord,
        ...good(60, 30),
      ];
      const second = good(100, 90);

      // Both batches on the one shared channel at once, as the dispatcher pipelines them.
      const [a, b] = await Promise.all([
        publisher.publish(first, anySignal()),
        publisher.publish(second, anySignal()),
      ]);

      expect(b).toEqual(second.map(() => ({ ok: true })));
      first.forEach((r, i) => {
        const outcome = a[i];
        if (!culprits.includes(r)) {
          expect(outcome).toEqual({ ok: true });
          return;
        }
        const error = outcome !== undefined && !outcome.ok ? outcome.error : undefined;
        expect(error).toBeInstanceOf(RabbitMqPublishError);
        expect(error).toMatchObject({
          reason: 'channel-error',
          replyCode: 404,
          exchange: `${missing}-${r.id}`,
        });
      });
      const goodIds = [...first, ...second]
        .filter((r) => !culprits.includes(r))
        .map((r) => r.messageId);
      await waitFor('every good message at the consumer', () =>
        goodIds.every((id) => received.some((m) => m.messageId === id)),
      );
      expect(received.some((m) => m.messageId.startsWith('bad'))).toBe(false);
    });

    it('one message in a hundred to a missing exchange: only those fail, and no other message is delivered twice', async () => {
      const queue = uniqueName('q-poison');
      const missing = uniqueName('missing-exchange');
      const publisher = publisherFor(queue, {
        exchange: (r) => (r.topic === 'missing' ? missing : ''),
        routingKey: () => queue,
      });
      await publisher.connect();
      const received = await consumers.consume(queue);
      const batch = Array.from({ length: 200 }, (_, i) =>
        i % 100 === 50 ? rec('missing', `bad-${i}`) : rec(queue, `good-${i}`),
      );

      const outcomes = await publisher.publish(batch, anySignal());

      batch.forEach((r, i) => {
        const outcome = outcomes[i];
        if (r.topic !== 'missing') return expect(outcome).toEqual({ ok: true });
        const error = outcome !== undefined && !outcome.ok ? outcome.error : undefined;
        expect(error).toMatchObject({ reason: 'channel-error', replyCode: 404, exchange: missing });
      });
      const goodIds = batch.filter((r) => r.topic !== 'missing').map((r) => r.messageId);
      await waitFor('every good message at the consumer', () =>
        goodIds.every((id) => received.some((m) => m.messageId === id)),
      );
      // Anything published twice would have arrived by now.
      await sleep(500);
      const extra = received.length - new Set(received.map((m) => m.messageId)).size;
      expect({ delivered: received.length, extra }).toEqual({ delivered: 198, extra: 0 });
    });

    it.each([
      ['its hold was lost (a fence)', () => new Error('the delivery partitions were lost')],
      ['the dispatcher stops', () => new Error('the dispatcher stopped')],
    ])(
      'aborted because %s: writes nothing more, and answers what it wrote as the broker confirms it, so no message reaches the queue reported unsent',
      async (_why, reason) => {
        const queue = uniqueName('q-halted');
        // A few confirms at a time, so that the abort comes while most of the batch is unwritten.
        const publisher = publisherFor(queue, { maxOutstandingConfirms: 5 });
        await publisher.connect();
        const received = await consumers.consume(queue);
        expect(await publisher.publish([rec(queue, 'warm-up')], anySignal())).toEqual([
          { ok: true },
        ]);
        const batch = Array.from({ length: 100 }, (_, i) => rec(queue, `halted-${i}`));
        const abort = new AbortController();
        const call = publisher.publish(batch, abort.signal);
        // The first five are written before the call first waits (for a confirm slot).
        for (let i = 0; i < 20; i++) await Promise.resolve();
        abort.abort(reason());
        const outcomes = await call;

        const confirmed = batch.filter((_, i) => outcomes[i]?.ok === true).map((r) => r.messageId);
        expect(confirmed.length).toBeGreaterThan(0);
        expect(confirmed.length).toBeLessThan(batch.length);
        // Anything the broker took would have arrived by now.
        await sleep(500);
        const arrived = received.map((m) => m.messageId).filter((id) => id !== 'warm-up');
        // What reached the queue is exactly what the answer says was confirmed: nothing written
        // after the abort, and nothing confirmed that the dispatcher would send again as a copy.
        expect(arrived).toEqual(confirmed);
        for (const outcome of outcomes.slice(confirmed.length)) {
          expect(outcome).toMatchObject({ ok: false, sent: false });
        }
      },
    );

    // Without the headers the publish id travels in correlationId: the return is matched alike.
    it.each([
      ['x-outbox-publish-id header', true],
      ['correlation id (outboxHeaders: false)', false],
    ])(
      'a late basic.return of an abandoned publish is not taken for the return of a later publish of the same message (publish id in the %s)',
      async (_name, outboxHeaders) => {
        const queue = uniqueName('q-return');
        const noBinding = uniqueName('no-binding');
        consumers.deleteExchangeAtEnd(noBinding);
        const publisher = publisherFor(queue, {
          outboxHeaders,
          exchange: (r) => (r.topic === 'unroutable' ? noBinding : ''),
          routingKey: (r) => (r.topic === 'unroutable' ? 'nowhere' : queue),
          assertTopology: async (channel) => {
            await channel.assertExchange(noBinding, 'direct', { durable: false });
            await channel.assertQueue(queue, { durable: true });
          },
        });
        await publisher.connect();
        const received = await consumers.consume(queue);
        // The publishing channel is open, so the publishes below need no I/O to go out.
        expect(await publisher.publish([rec(queue, 'warm-up')], anySignal())).toEqual([
          { ok: true },
        ]);

        // First publish of message 'dup': unroutable. The dispatcher gives up on it (its deadline)
        // and publishes it again, routable this time, all before the broker's basic.return for the
        // first publish is read: no I/O happens between these steps, only promise jobs.
        const abort = new AbortController();
        const reason = new PublishTimeoutError(1);
        const firstTry = publisher.publish([rec('unroutable', 'dup')], abort.signal);
        for (let i = 0; i < 20; i++) await Promise.resolve(); // past connect(): written to the channel
        abort.abort(reason);
        // Abandoned before the broker's answer was read: neither confirmed nor returned yet.
        const [abandoned] = await firstTry;
        expect(abandoned?.ok).toBe(false);
        expect(abandoned !== undefined && !abandoned.ok && abandoned.error).not.toBeInstanceOf(
          RabbitMqPublishError,
        );

        // The same message again, routable now, on the same channel while that return is on its way.
        const secondTry = publisher.publish([rec(queue, 'dup')], anySignal());
        expect(await secondTry).toEqual([{ ok: true }]);
        await waitFor('the retried message at the consumer', () =>
          received.some((m) => m.messageId === 'dup'),
        );
      },
    );

    ownResourcesTest(
      "a connection the broker closes (320, this publisher's only): what was confirmed stays published, the rest of the batch is an outage, and the next batch reconnects",
      async () => {
        const queue = uniqueName('q-forced');
        const name = uniqueName('forced-connection');
        // One confirm at a time, so the batch is still publishing when the connection goes.
        const publisher = publisherFor(queue, {
          connectionName: name,
          maxOutstandingConfirms: 1,
          publishTimeoutMs: 120_000,
          reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
        });
        await publisher.connect();
        const received = await consumers.consume(queue);
        const records = Array.from({ length: 20_000 }, (_, i) => rec(queue, `forced-${i}`));

        const publishing = publisher.publish(records, anySignal());
        await waitFor('the batch under way', () => received.length > 0);
        await closeConnectionNamed(name);
        const outcomes = await publishing;

        const published = records.filter((_, i) => outcomes[i]?.ok === true);
        const failures = outcomes.filter((o) => !o.ok);
        expect(published.length).toBeGreaterThan(0);
        expect(failures.length).toBeGreaterThan(0);
        // Nothing is blamed on a message: every failure is the outage.
        for (const failure of failures)
          expect(!failure.ok && failure.error).toBeInstanceOf(PublisherUnavailableError);
        await waitFor(
          'every confirmed message at the consumer',
          () => published.every((r) => received.some((m) => m.messageId === r.messageId)),
          { timeoutMs: 30_000 },
        );

        await sleep(150); // past the reconnect backoff
        expect(await publisher.publish([rec(queue, 'after-reconnect')], anySignal())).toEqual([
          { ok: true },
        ]);
      },
      120_000,
    );
  },
);

describeWith(
  ['postgres', 'rabbitmq'],
  'RabbitMqPublisher when RabbitMQ refuses the user (own users and vhost)',
  () => {
    const VHOST = `outbox-test-access-${process.pid}`;
    const USER = `outbox_test_403_${process.pid}`;
    const RIGHT = 'right-pass';
    const WRONG = 'Wr0ng-S3cret-pass';
    const STRANGER = `outbox_test_noperm_${process.pid}`;
    const WRITER = `outbox_test_403w_${process.pid}`;
    const amqpUrl = (user: string, password: string): string =>
      `amqp://${encodeURIComponent(user)}:${encodeURIComponent(password)}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}/${encodeURIComponent(VHOST)}`;
    const suite = rabbitSuite(postgres);
    const consumers = rabbitConsumers(amqpUrl('guest', 'guest'));
    const ready = RABBITMQCTL.missing === undefined;

    beforeAll(async () => {
      if (!ready) return;
      await rabbitmqctl('add_vhost', VHOST);
      await rabbitmqctl('set_permissions', '-p', VHOST, 'guest', '.*', '.*', '.*');
      await rabbitmqctl('add_user', USER, RIGHT);
      await rabbitmqctl('set_permissions', '-p', VHOST, USER, '.*', '.*', '.*');
      await rabbitmqctl('add_user', STRANGER, RIGHT); // no permissions on the vhost at all
      await rabbitmqctl('add_user', WRITER, RIGHT);
      // May publish through the default exchange only.
      await rabbitmqctl('set_permissions', '-p', VHOST, WRITER, '.*', '^amq\\.default$', '.*');
    }, 120_000);

    afterAll(async () => {
      if (!ready) return;
      for (const user of [USER, STRANGER, WRITER])
        await rabbitmqctl('delete_user', user).catch(() => undefined);
      await rabbitmqctl('delete_vhost', VHOST).catch(() => undefined);
    }, 120_000);

    let errorLogs: jest.SpyInstance;
    beforeEach(() => {
      errorLogs = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    });
    afterEach(() => errorLogs.mockRestore());
    const logged = (): string[] => errorLogs.mock.calls.map((call: unknown[]) => String(call[0]));

    ownResourcesTest(
      'a wrong password: connect() fails at once, messages wait in the outbox without losing attempts, every attempt logs an error without the password; fixed, the same publisher delivers',
      async () => {
        const h = await suite.openOutbox(
          { url: amqpUrl(USER, WRONG), reconnect: { initialDelayMs: 50, maxDelayMs: 100 } },
          { dispatcher: { maxOutagePauseMs: 100 } },
        );
        consumers.deleteAtEnd(h.queue);

        const refused: unknown = await h.publisher.connect().then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(refused).toBeInstanceOf(RabbitMqAccessRefusedError);
        expect(refused).toBeInstanceOf(PublisherUnavailableError); // nothing is burnt for it
        expect(refused).toMatchObject({
          refusal: 'login',
          user: USER,
          vhost: VHOST,
          replyCode: 403,
        });
        expect((refused as Error).message).toMatch(/credentials are wrong/);

        const ids = await h.enqueue(
          [0, 1, 2].map((n) => ({ topic: h.queue, key: `k-${n}`, payload: { n } })),
        );
        for (let i = 0; i < 3; i++) {
          await sleep(150); // past the reconnect backoff and the outage pause: a real attempt
          await h.dispatcher.runOnce();
        }
        expect(h.outages.length).toBeGreaterThan(0);
        expect(h.outages.every((e) => e instanceof RabbitMqAccessRefusedError)).toBe(true);
        for (const row of await h.rows())
          expect(row).toMatchObject({ status: 'pending', attempts: 0, lockedBy: null });
        const refusals = logged().filter((m) => m.includes('credentials are wrong'));
        expect(refusals.length).toBeGreaterThanOrEqual(3); // connect() and every later attempt
        expect(logged().join('\n')).not.toContain(WRONG);
        expect(logged().join('\n')).not.toContain(encodeURIComponent(WRONG));

        // The operator fixes it (here: the broker side); the running publisher picks it up.
        await rabbitmqctl('change_password', USER, WRONG);
        const received = await consumers.consume(h.queue);
        await dispatchUntil(h, 'delivery once the credentials are right', allSettled(h));
        await waitFor('the messages at the consumer', () =>
          ids.every((id) => received.some((m) => m.messageId === id)),
        );
        expect((await h.rows()).every((r) => r.status === 'delivered')).toBe(true);
      },
      120_000,
    );

    ownResourcesTest(
      "a wrong password shows at the app's start, before any message, without the password; the right one connects at the start",
      async () => {
        const warnings = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
        const logs = jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
        const said = (spy: jest.SpyInstance): string[] =>
          spy.mock.calls.map((call: unknown[]) => String(call[0]));
        // The test before this one leaves WRONG as the user's password.
        await rabbitmqctl('change_password', USER, RIGHT);
        try {
          const wrong = await suite.openOutbox({ url: amqpUrl(USER, WRONG) }, { autoStart: true });
          await waitFor('the startup warning', () =>
            said(warnings).some((m) => m.includes('cannot reach its broker at startup')),
          );
          const warning = said(warnings).find((m) => m.includes('at startup')) ?? '';
          expect(warning).toMatch(/credentials are wrong/);
          expect(warning).not.toContain(WRONG);
          expect(logged().some((m) => m.includes('credentials are wrong'))).toBe(true);
          expect(await wrong.rows()).toEqual([]); // nothing was enqueued: the start said it

          await suite.openOutbox({ url: amqpUrl(USER, RIGHT) }, { autoStart: true });
          await waitFor('the connection at the start', () =>
            said(logs).some((m) => m.startsWith('Connected to RabbitMQ at')),
          );
          expect(said(warnings).filter((m) => m.includes('at startup'))).toHaveLength(1);
        } finally {
          warnings.mockRestore();
          logs.mockRestore();
        }
      },
    );

    ownResourcesTest(
      'a user without permissions on the vhost: refused as such, loudly, and handed back',
      async () => {
        const publisher = new RabbitMqPublisher({
          url: amqpUrl(STRANGER, RIGHT),
          reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
        });
        try {
          const refused: unknown = await publisher.connect().then(
            () => undefined,
            (error: unknown) => error,
          );
          expect(refused).toBeInstanceOf(RabbitMqAccessRefusedError);
          expect(refused).toMatchObject({ refusal: 'vhost', user: STRANGER, vhost: VHOST });
          expect((refused as Error).message).toMatch(/vhost permissions are wrong/);
          expect((refused as Error).message).toContain(`'${VHOST}'`);
          await expect(publisher.publish([rec('q', 'm-1')], anySignal())).rejects.toBeInstanceOf(
            RabbitMqAccessRefusedError,
          );
          expect(logged().some((m) => m.includes(`may not use vhost '${VHOST}'`))).toBe(true);
        } finally {
          await publisher.close();
        }
      },
      60_000,
    );

    ownResourcesTest(
      'write permission refused for one exchange: only its message is refused (RabbitMqAccessRefusedError, logged); the rest of the batch is delivered',
      async () => {
        const queue = uniqueName('q-writer');
        const forbidden = uniqueName('forbidden-exchange');
        consumers.deleteAtEnd(queue);
        const publisher = new RabbitMqPublisher({
          url: amqpUrl(WRITER, RIGHT),
          exchange: (r) => (r.topic === 'forbidden' ? forbidden : ''),
          routingKey: () => queue,
          assertTopology: async (channel) => {
            await channel.assertExchange(forbidden, 'fanout', { durable: false, autoDelete: true });
            await channel.assertQueue(queue, { durable: true });
          },
        });
        try {
          await publisher.connect();
          const received = await consumers.consume(queue);
          const records = [
            ...Array.from({ length: 10 }, (_, i) => rec(queue, `ok-${i}`)),
            rec('forbidden', 'refused-1'),
            ...Array.from({ length: 10 }, (_, i) => rec(queue, `ok-${10 + i}`)),
          ];
          const outcomes = await publisher.publish(records, anySignal());
          records.forEach((r, i) => {
            const outcome = outcomes[i];
            if (r.topic !== 'forbidden') {
              expect(outcome).toEqual({ ok: true });
              return;
            }
            const error = outcome !== undefined && !outcome.ok ? outcome.error : undefined;
            expect(error).toBeInstanceOf(RabbitMqAccessRefusedError);
            expect(error).toMatchObject({ refusal: 'permission', user: WRITER, replyCode: 403 });
          });
          await waitFor('the other messages at the consumer', () =>
            records
              .filter((r) => r.topic !== 'forbidden')
              .every((r) => received.some((m) => m.messageId === r.messageId)),
          );
          expect(
            logged().some(
              (m) => m.includes(`exchange '${forbidden}'`) && m.includes('permissions'),
            ),
          ).toBe(true);
        } finally {
          await publisher.close();
        }
      },
      60_000,
    );
  },
);
