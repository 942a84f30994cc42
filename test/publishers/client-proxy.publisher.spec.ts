import { Logger } from '@nestjs/common';
import {
  ClientKafka,
  ClientMqtt,
  ClientNats,
  ClientRedis,
  ClientRMQ,
  ClientTCP,
  RmqRecord,
  RpcException,
  Transport,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { logLevel, Partitioners } from 'kafkajs';
import type { MqttClient } from 'mqtt';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OutboxDispatcher,
  PublisherUnavailableError,
  PublishTimeoutError,
  type OutboxMessage,
  type OutboxPublisher,
  type OutboxRecord,
} from '../../lib';
import {
  ClientProxyPublisher,
  type OutboxClientProxy,
  type OutboxEnvelope,
} from '../../lib/publishers/microservices';
import { testDatabase, uniqueTable } from '../support/databases';
import {
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import {
  describeWith,
  describeWithPackages,
  SERVICES,
  type ServiceName,
} from '../support/services';
import {
  KAFKA_BROKERS,
  MQTT_URL,
  NATS_URL,
  RABBITMQ_URL,
  consumeKafka,
  consumeMqtt,
  consumeNats,
  consumeRabbitMq,
  consumeRedis,
} from '../support/transports/native-consumers';
import { startNestConsumer, type NestConsumer } from '../support/transports/nest-consumer';
import { freePort, startBlackholeMqttBroker } from '../support/transports/net';
import { sleep } from '../support/wait-for';

// End-to-end proofs of ClientProxyPublisher: real PostgreSQL outbox table, real Nest clients, and
// a real consumer on each transport (Nest TCP microservice; amqplib, nats, ioredis, mqtt and
// kafkajs consumers for the brokers).

const db = testDatabase('postgres');
const KEYS = ['k-a', 'k-b', 'k-c', 'k-d'];
const TYPE = 'test.event';
const HEADERS = { 'x-tenant': 't1' };
const POLL_MS = 50;

interface Expected {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly payload: { n: number; key: string; text: string };
  readonly headers: Record<string, string>;
}

/** What a consumer saw of one message, in arrival order. Fields a transport cannot carry are left out. */
interface Seen {
  readonly messageId: string;
  readonly type: string;
  readonly payload: unknown;
  readonly key?: string | null;
  readonly headers?: Record<string, string>;
}

type Harness = OutboxHarness;

// One DataSource for the file; a table of its own for every test.
let ds: DataSource | undefined;
const baseTable = uniqueTable('outbox_cpp');
const openHarnesses: Harness[] = [];
const clients: OutboxClientProxy[] = [];
const closers: (() => Promise<unknown>)[] = [];

async function dataSource(): Promise<DataSource> {
  ds ??= await db.open(baseTable);
  return ds;
}

async function openOutbox(
  publisher: OutboxPublisher,
  overrides: HarnessOverrides = {},
): Promise<Harness> {
  const harness = await openOutboxHarness(
    await dataSource(),
    publisher,
    {
      isGlobal: false,
      retry: { initialDelayMs: 60_000 },
      ...overrides,
      dispatcher: {
        pollIntervalMs: POLL_MS,
        maxOutagePauseMs: 200,
        leaseMs: 10_000,
        publishTimeoutMs: 5_000,
        listen: false,
        shutdownTimeoutMs: 1_000,
        ...overrides.dispatcher,
      },
    },
    'outbox_cpp',
  );
  openHarnesses.push(harness);
  return harness;
}

function track<T extends OutboxClientProxy>(client: T): T {
  clients.push(client);
  return client;
}

afterEach(async () => {
  for (const h of openHarnesses.splice(0)) await h.close();
  for (const client of clients.splice(0))
    await Promise.resolve(client.close()).catch(() => undefined);
  for (const close of closers.splice(0)) await close().catch(() => undefined);
});

afterAll(async () => {
  if (ds !== undefined) await db.close(ds, baseTable);
});

beforeAll(() => {
  // The Nest clients log every (expected) connection failure; the assertions below say what matters.
  Logger.overrideLogger(['fatal']);
});

/** Enqueues the messages in one committed transaction; resolves to their ids. */
function commit(h: Harness, messages: readonly OutboxMessage[]): Promise<string[]> {
  return h.enqueue(messages);
}

/**
 * 20 messages over 4 keys in 5 committed transactions, and one more in a transaction that rolls
 * back (its id is returned as the ghost: it must never arrive).
 */
async function enqueueScenario(
  h: Harness,
  topic: string,
): Promise<{ expected: Expected[]; ghostId: string }> {
  const source = await dataSource();
  const expected: Expected[] = [];
  for (let tx = 0; tx < 5; tx++) {
    const messages = KEYS.map((key, k) => ({
      topic,
      key,
      type: TYPE,
      payload: { n: tx * KEYS.length + k, key, text: 'é✓' },
      headers: HEADERS,
    }));
    const ids = await commit(h, messages);
    messages.forEach((msg, i) =>
      expected.push({
        messageId: ids[i] as string,
        type: TYPE,
        key: msg.key,
        payload: msg.payload,
        headers: HEADERS,
      }),
    );
  }
  let ghostId = '';
  await expect(
    source.transaction(async (m) => {
      ghostId = await h.outbox.enqueue(
        { topic, key: 'k-a', type: 'test.ghost', payload: { ghost: true }, headers: HEADERS },
        m,
      );
      throw new Error('rolled back on purpose');
    }),
  ).rejects.toThrow('rolled back on purpose');
  expect(ghostId).not.toBe('');
  return { expected, ghostId };
}

/**
 * Drives the dispatcher until a drain publishes nothing. (One `drain()` stops after a batch smaller
 * than batchSize, and with per-key ordering a batch holds one message per key.)
 */
async function drainAll(dispatcher: OutboxDispatcher): Promise<number> {
  let total = 0;
  for (let i = 0; i < 100; i++) {
    const published = await dispatcher.drain();
    total += published;
    if (published === 0) break;
  }
  return total;
}

/** Every committed message exactly once, with its content; never the ghost; per-key commit order. */
function expectExactlyOnce(
  seen: readonly Seen[],
  expected: readonly Expected[],
  ghostId: string,
): void {
  const ids = seen.map((s) => s.messageId);
  expect(ids).not.toContain(ghostId);
  expect(new Set(ids).size).toBe(ids.length); // no duplicate
  expect(seen).toHaveLength(expected.length);
  const byId = new Map(seen.map((s) => [s.messageId, s]));
  for (const e of expected) {
    const s = byId.get(e.messageId);
    expect(s).toBeDefined();
    expect(s?.type).toBe(e.type);
    expect(s?.payload).toEqual(e.payload);
    if (s?.key !== undefined) expect(s.key).toBe(e.key);
    if (s?.headers !== undefined)
      expect(s.headers).toMatchObject({
        ...e.headers,
        [OUTBOX_HEADER_MESSAGE_ID]: e.messageId,
        [OUTBOX_HEADER_TYPE]: e.type,
      });
  }
  for (const key of KEYS) {
    const arrived = seen
      .filter((s) => (s.payload as { key?: string }).key === key)
      .map((s) => (s.payload as { n: number }).n);
    expect(arrived).toEqual([...arrived].sort((a, b) => a - b));
  }
}

async function expectAllDelivered(h: Harness, count: number): Promise<void> {
  const rows = await h.rows();
  expect(rows).toHaveLength(count); // the ghost was never written
  for (const row of rows)
    expect(row).toMatchObject({
      status: 'delivered',
      attempts: 1, // the claim that delivered it
      lockedBy: null,
    });
}

function fromEnvelope(envelope: OutboxEnvelope, headers?: Record<string, string>): Seen {
  return {
    messageId: envelope.messageId,
    type: envelope.type,
    key: envelope.key,
    payload: envelope.payload,
    headers: headers ?? {
      ...envelope.headers,
      [OUTBOX_HEADER_MESSAGE_ID]: envelope.messageId,
      [OUTBOX_HEADER_TYPE]: envelope.type,
    },
  };
}

const topicFor = (transport: string): string => `outbox.${transport}.${process.pid}.${Date.now()}`;

function record(n: number, topic = 'direct'): OutboxRecord {
  return {
    id: String(n),
    messageId: `m-${n}`,
    topic,
    key: null,
    type: 'direct',
    payload: JSON.stringify({ n }),
    headers: {},
    attempts: 0,
    createdAt: new Date(),
  };
}

// ---------------------------------------------------------------------------------------------
// TCP: a real Nest TCP microservice consumes.

describeWith(['postgres'], 'ClientProxyPublisher over TCP (Nest TCP microservice)', () => {
  const host = '127.0.0.1';

  async function consumer(
    port: number,
    patterns: string[],
    kind: 'event' | 'message' = 'event',
  ): Promise<NestConsumer> {
    const c = await startNestConsumer(
      { transport: Transport.TCP, options: { host, port } },
      patterns,
      kind,
    );
    closers.push(() => c.close());
    return c;
  }

  it('delivers every committed message exactly once with its envelope, never the rolled-back one', async () => {
    const port = await freePort();
    const topic = topicFor('tcp');
    const { received } = await consumer(port, [topic]);
    const h = await openOutbox(new ClientProxyPublisher(track(new ClientTCP({ host, port }))));
    const { expected, ghostId } = await enqueueScenario(h, topic);

    expect(await drainAll(h.dispatcher)).toBe(20);
    const items = await received.settle(20);
    expect(items.every((i) => i.pattern === topic)).toBe(true);
    expectExactlyOnce(
      items.map((i) => fromEnvelope(i.data as OutboxEnvelope)),
      expected,
      ghostId,
    );
    await expectAllDelivered(h, 20);
  });

  it("mode 'send': the consumer's answer is the acknowledgement; a pattern nobody handles is retried", async () => {
    const port = await freePort();
    const handled = topicFor('tcp-send');
    const { received } = await consumer(port, [handled], 'message');
    const h = await openOutbox(
      new ClientProxyPublisher(track(new ClientTCP({ host, port })), {
        mode: 'send',
        timeoutMs: 2_000,
      }),
    );
    const ids = await commit(h, [
      ...KEYS.map((key, n) => ({ topic: handled, key, type: TYPE, payload: { n, key } })),
      { topic: `${handled}.unhandled`, key: 'k-x', type: TYPE, payload: { n: 99 } },
    ]);

    expect(await drainAll(h.dispatcher)).toBe(4);
    expect(
      (await received.settle(4)).map((i) => (i.data as OutboxEnvelope).messageId).sort(),
    ).toEqual(ids.slice(0, 4).sort());
    const rows = await h.rows();
    expect(
      rows
        .filter((r) => r.status === 'delivered')
        .map((r) => r.messageId)
        .sort(),
    ).toEqual(ids.slice(0, 4).sort());
    const unhandled = rows.find((r) => r.messageId === ids[4]);
    expect(unhandled).toMatchObject({ status: 'pending', attempts: 1, lockedBy: null });
    expect(unhandled?.lastError).toMatch(/no matching message handler/i);
  });

  it('treats a port where nothing listens as an outage (released, attempts given back, the cause on record), then delivers once a server listens', async () => {
    const port = await freePort();
    const topic = topicFor('tcp-down');
    const h = await openOutbox(
      new ClientProxyPublisher(track(new ClientTCP({ host, port })), { timeoutMs: 2_000 }),
    );
    const ids = await commit(
      h,
      KEYS.slice(0, 3).flatMap((key) =>
        [1, 2].map((n) => ({ topic, key, type: TYPE, payload: { n, key } })),
      ),
    );

    // Each key's run of two: the whole backlog, none of it sent.
    expect(await h.dispatcher.runOnce()).toMatchObject({
      claimed: 6,
      published: 0,
      released: 6,
      retried: 0,
      deadLettered: 0,
    });
    expect(h.outages).toHaveLength(1);
    expect(h.outages[0]).toBeInstanceOf(PublisherUnavailableError);
    expect(String(((h.outages[0] as Error).cause as Error | undefined)?.message)).toMatch(
      /ECONNREFUSED/,
    );
    // The runs were released with the outage on record.
    const rows = await h.rows();
    expect(rows.every((r) => r.attempts === 0 && r.lockedBy === null)).toBe(true);
    expect(rows.filter((r) => r.status === 'pending')).toHaveLength(6);
    for (const row of rows)
      expect(row.lastError).toEqual(expect.stringContaining('PublisherUnavailableError'));

    const { received } = await consumer(port, [topic]);
    await sleep(250); // past the outage pause (maxOutagePauseMs 200)
    expect(await drainAll(h.dispatcher)).toBe(6);
    const items = await received.settle(6);
    expect(items.map((i) => (i.data as OutboxEnvelope).messageId).sort()).toEqual([...ids].sort());
    await expectAllDelivered(h, 6);
  });

  it('a TCP server that goes away: the sends it dropped and the next batch are an outage (PublisherUnavailableError), then delivery resumes', async () => {
    const port = await freePort();
    const pattern = topicFor('tcp-gone');
    // A handler that never answers, so the sends are in flight when the server stops.
    const first = await startNestConsumer(
      { transport: Transport.TCP, options: { host, port } },
      [pattern],
      'message',
      () => new Promise<never>(() => undefined),
    );
    closers.push(() => first.close());
    const publisher = new ClientProxyPublisher(track(new ClientTCP({ host, port })), {
      mode: 'send',
      timeoutMs: 5_000,
    });
    const signal = new AbortController().signal;

    const inFlight = publisher.publish(
      [1, 2, 3].map((n) => record(n, pattern)),
      signal,
    );
    await first.received.waitFor(3);
    await first.close(); // closes the server and its open sockets
    const outcomes = await inFlight;
    expect(outcomes).toHaveLength(3);
    for (const outcome of outcomes) {
      expect(outcome.ok).toBe(false);
      expect(!outcome.ok && outcome.error).toBeInstanceOf(PublisherUnavailableError);
    }

    // Nothing listens now: the next batch cannot connect.
    await expect(publisher.publish([record(4, pattern)], signal)).rejects.toBeInstanceOf(
      PublisherUnavailableError,
    );

    const second = await consumer(port, [pattern], 'message');
    // ClientTCP holds on to a refused attempt until its socket's close callback, a later turn of
    // the event loop; the dispatcher's outage pause is far longer than this.
    await sleep(100);
    expect(await publisher.publish([record(4, pattern)], signal)).toEqual([{ ok: true }]);
    expect(second.received.items.map((i) => (i.data as OutboxEnvelope).messageId)).toEqual(['m-4']);
  });

  it('fails only the message whose toData throws (retried with an attempt); the others are delivered', async () => {
    const port = await freePort();
    const topic = topicFor('tcp-poison');
    const { received } = await consumer(port, [topic]);
    const toData = (r: OutboxRecord): OutboxEnvelope => {
      const payload = JSON.parse(String(r.payload)) as { poison?: boolean };
      if (payload.poison === true) throw new Error('cannot serialise this one');
      return { messageId: r.messageId, type: r.type, key: r.key, headers: r.headers, payload };
    };
    const h = await openOutbox(
      new ClientProxyPublisher(track(new ClientTCP({ host, port })), { toData }),
    );
    const ids = await commit(h, [
      ...KEYS.map((key, n) => ({ topic, key, type: TYPE, payload: { n, key } })),
      { topic, key: 'k-poison', type: TYPE, payload: { poison: true } },
    ]);

    expect(await drainAll(h.dispatcher)).toBe(4);
    expect(
      (await received.settle(4)).map((i) => (i.data as OutboxEnvelope).messageId).sort(),
    ).toEqual(ids.slice(0, 4).sort());
    const rows = await h.rows();
    expect(rows.filter((r) => r.status === 'delivered')).toHaveLength(4);
    const poison = rows.find((r) => r.messageId === ids[4]);
    expect(poison).toMatchObject({ status: 'pending', attempts: 1, lockedBy: null });
    expect(poison?.lastError).toContain('cannot serialise this one');
    expect(h.outages).toHaveLength(0);
  });
});

// ---------------------------------------------------------------------------------------------
// A transport that accepts the connection and never acknowledges (an MQTT broker that sends
// CONNACK and never PUBACK): the publisher's timeout and the dispatcher's abort.

describeWith(['postgres'], 'ClientProxyPublisher when the transport never acknowledges', () => {
  async function blackhole(): Promise<{ client: ClientMqtt; published: () => number }> {
    const broker = await startBlackholeMqttBroker();
    const client = new ClientMqtt({ url: `mqtt://127.0.0.1:${broker.port}`, reconnectPeriod: 0 });
    // Connected before the test: the publisher's timeoutMs bounds its connect too, and a connect
    // slower than the tests' short timeouts on a loaded machine is an outage (no attempt), not
    // the emit's timeout these tests are about.
    // Not track(): ClientMqtt.close() waits for the PUBACKs this broker never sends. Force it.
    closers.push(async () => {
      await new Promise<void>((resolve) => {
        try {
          client.unwrap<MqttClient>().end(true, {}, () => resolve());
        } catch {
          resolve();
        }
      });
      await broker.close();
    });
    await client.connect();
    return { client, published: broker.published };
  }

  async function enqueueThree(h: Harness): Promise<void> {
    const source = await dataSource();
    await source.transaction((m) =>
      h.outbox.enqueue(
        KEYS.slice(0, 3).map((key, n) => ({
          topic: 'never-acked',
          key,
          type: TYPE,
          payload: { n },
        })),
        m,
      ),
    );
  }

  it('times out each emit (PublishTimeoutError): nothing is marked delivered, each counts an attempt, claims pause', async () => {
    const { client, published } = await blackhole();
    const h = await openOutbox(new ClientProxyPublisher(client, { timeoutMs: 300 }), {
      dispatcher: { publishTimeoutMs: 3_000 },
    });
    await enqueueThree(h);

    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 3, published: 0, retried: 3 });
    expect(published()).toBeGreaterThan(0); // the publishes did reach the "broker"
    expect(h.outages).toHaveLength(1);
    expect(h.outages[0]).toBeInstanceOf(PublishTimeoutError);
    // The emit's own timeout, not the dispatcher's publish deadline (3 000 ms).
    expect((h.outages[0] as PublishTimeoutError).timeoutMs).toBe(300);
    // The broker may have them: an attempt each, so one that always times out ends dead.
    for (const row of await h.rows())
      expect(row).toMatchObject({
        status: 'pending',
        attempts: 1,
        lockedBy: null,
        lastError: expect.stringContaining('PublishTimeoutError'),
      });
  });

  it("stops waiting when the dispatcher's publish deadline aborts the batch", async () => {
    const { client } = await blackhole();
    const h = await openOutbox(new ClientProxyPublisher(client, { timeoutMs: 60_000 }), {
      dispatcher: { publishTimeoutMs: 400 },
    });
    await enqueueThree(h);

    const started = Date.now();
    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 3, published: 0, retried: 3 });
    // A failure bound, not a timing claim: far below the publisher's own 60 s.
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(h.outages[0]).toBeInstanceOf(PublishTimeoutError);
    expect((h.outages[0] as PublishTimeoutError).timeoutMs).toBe(400);
    for (const row of await h.rows())
      expect(row).toMatchObject({ status: 'pending', attempts: 1, lockedBy: null });
  });

  it('resolves publish() promptly with the abort reason for every message once the signal aborts', async () => {
    const { client } = await blackhole();
    const publisher = new ClientProxyPublisher(client, { timeoutMs: 60_000 });
    const controller = new AbortController();
    const reason = new PublishTimeoutError(100);
    setTimeout(() => controller.abort(reason), 100);
    const started = Date.now();
    const outcomes = await publisher.publish([record(1), record(2), record(3)], controller.signal);
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(outcomes).toEqual([1, 2, 3].map(() => ({ ok: false, error: reason })));
  });
});

// ---------------------------------------------------------------------------------------------
// RabbitMQ through Nest's ClientRMQ, consumed with amqplib.

describeWithPackages(
  ['postgres', 'rabbitmq'],
  ['amqp-connection-manager', 'amqplib'],
  'ClientProxyPublisher over RabbitMQ (ClientRMQ, amqplib consumer)',
  () => {
    function rmqClient(queue: string): ClientRMQ {
      return track(new ClientRMQ({ urls: [RABBITMQ_URL], queue, queueOptions: { durable: true } }));
    }

    it('delivers persistent messages with messageId, type and headers, exactly once, never the rolled-back one', async () => {
      const queue = topicFor('rmq');
      const consumer = await consumeRabbitMq(queue);
      closers.push(() => consumer.close());
      const h = await openOutbox(new ClientProxyPublisher(rmqClient(queue)));
      const { expected, ghostId } = await enqueueScenario(h, 'orders');

      expect(await drainAll(h.dispatcher)).toBe(20);
      const items = await consumer.received.settle(20);
      const now = Math.floor(Date.now() / 1_000);
      for (const { properties, content } of items) {
        expect(properties.deliveryMode).toBe(2); // persistent
        expect(properties.contentType).toBe('application/json');
        expect(properties.headers?.[OUTBOX_HEADER_MESSAGE_ID]).toBe(properties.messageId);
        expect(properties.headers?.[OUTBOX_HEADER_TYPE]).toBe(properties.type);
        expect(Math.abs(Number(properties.timestamp) - now)).toBeLessThan(120); // seconds, as AMQP means it
        expect(content).toMatchObject({ pattern: 'orders' });
      }
      expectExactlyOnce(
        items.map(({ properties, content }) => ({
          messageId: String(properties.messageId),
          type: String(properties.type),
          payload: (content as { data: unknown }).data,
          headers: properties.headers as Record<string, string>,
        })),
        expected,
        ghostId,
      );
      await expectAllDelivered(h, 20);
    });

    it('keeps a custom toData result persistent (plain data is wrapped; an RmqRecord gets persistent: true)', async () => {
      const queue = topicFor('rmq-custom');
      const consumer = await consumeRabbitMq(queue);
      closers.push(() => consumer.close());
      const toData = (r: OutboxRecord): unknown =>
        r.key === 'plain'
          ? { custom: r.payload }
          : new RmqRecord({ custom: r.payload }, { priority: 1 });
      const h = await openOutbox(new ClientProxyPublisher(rmqClient(queue), { toData }));
      const ids = await commit(
        h,
        ['plain', 'record'].map((key) => ({ topic: 'orders', key, type: TYPE, payload: { key } })),
      );

      expect(await drainAll(h.dispatcher)).toBe(2);
      const items = await consumer.received.settle(2);
      for (const { properties } of items) expect(properties.deliveryMode).toBe(2);
      const plain = items.find((i) => i.properties.messageId !== undefined);
      expect(plain?.properties).toMatchObject({ messageId: ids[0], type: TYPE });
      expect(items.find((i) => i.properties.messageId === undefined)?.properties.priority).toBe(1);
    });
  },
);

// ---------------------------------------------------------------------------------------------
// NATS core, consumed with the nats client.

describeWith(
  ['postgres', 'nats'],
  'ClientProxyPublisher over NATS (ClientNats, nats subscriber)',
  () => {
    it('delivers every committed message exactly once with NATS headers, never the rolled-back one', async () => {
      const subject = topicFor('nats');
      const consumer = await consumeNats(subject);
      closers.push(() => consumer.close());
      const h = await openOutbox(
        new ClientProxyPublisher(track(new ClientNats({ servers: [NATS_URL] }))),
      );
      const { expected, ghostId } = await enqueueScenario(h, subject);

      expect(await drainAll(h.dispatcher)).toBe(20);
      const items = await consumer.received.settle(20);
      expect(
        items.every(
          (i) => i.subject === subject && (i.data as { pattern: string }).pattern === subject,
        ),
      ).toBe(true);
      expectExactlyOnce(
        items.map((i) => {
          const envelope = (i.data as { data: OutboxEnvelope }).data;
          expect(envelope.headers).toEqual(HEADERS);
          return fromEnvelope(envelope, i.headers);
        }),
        expected,
        ghostId,
      );
      await expectAllDelivered(h, 20);
    });
  },
);

// ---------------------------------------------------------------------------------------------
// Redis pub/sub, consumed with ioredis.

describeWith(
  ['postgres', 'redis'],
  'ClientProxyPublisher over Redis (ClientRedis, ioredis subscriber)',
  () => {
    it('delivers every committed message exactly once with its envelope, never the rolled-back one', async () => {
      const channel = topicFor('redis');
      const consumer = await consumeRedis(channel);
      closers.push(() => consumer.close());
      const h = await openOutbox(
        new ClientProxyPublisher(
          track(new ClientRedis({ host: SERVICES.redis.host, port: SERVICES.redis.port })),
        ),
      );
      const { expected, ghostId } = await enqueueScenario(h, channel);

      expect(await drainAll(h.dispatcher)).toBe(20);
      const items = await consumer.received.settle(20);
      expect(
        items.every(
          (i) => i.channel === channel && (i.data as { pattern: string }).pattern === channel,
        ),
      ).toBe(true);
      expectExactlyOnce(
        items.map((i) => fromEnvelope((i.data as { data: OutboxEnvelope }).data)),
        expected,
        ghostId,
      );
      await expectAllDelivered(h, 20);
    });
  },
);

// ---------------------------------------------------------------------------------------------
// MQTT (Mosquitto 2 speaks MQTT 5), consumed with mqtt.js.

describeWith(
  ['postgres', 'mqtt'],
  'ClientProxyPublisher over MQTT (ClientMqtt, mqtt.js subscriber)',
  () => {
    it('delivers every committed message exactly once at QoS 1 with MQTT 5 user properties, never the rolled-back one', async () => {
      const topic = topicFor('mqtt');
      const consumer = await consumeMqtt(topic);
      closers.push(() => consumer.close());
      const h = await openOutbox(
        new ClientProxyPublisher(track(new ClientMqtt({ url: MQTT_URL, protocolVersion: 5 }))),
      );
      const { expected, ghostId } = await enqueueScenario(h, topic);

      expect(await drainAll(h.dispatcher)).toBe(20);
      const items = await consumer.received.settle(20);
      expect(items.every((i) => i.topic === topic && i.qos === 1)).toBe(true);
      expectExactlyOnce(
        items.map((i) =>
          fromEnvelope(
            (i.data as { data: OutboxEnvelope }).data,
            i.userProperties as Record<string, string>,
          ),
        ),
        expected,
        ghostId,
      );
      await expectAllDelivered(h, 20);
    });

    it('still delivers over MQTT 3.1.1 (no user properties there; the envelope carries id, type and headers)', async () => {
      const topic = topicFor('mqtt311');
      const consumer = await consumeMqtt(topic);
      closers.push(() => consumer.close());
      const h = await openOutbox(
        new ClientProxyPublisher(track(new ClientMqtt({ url: MQTT_URL }))),
      );
      const ids = await commit(
        h,
        KEYS.map((key, n) => ({ topic, key, type: TYPE, payload: { n, key }, headers: HEADERS })),
      );

      expect(await drainAll(h.dispatcher)).toBe(4);
      const items = await consumer.received.settle(4);
      expect(items.map((i) => i.userProperties)).toEqual([
        undefined,
        undefined,
        undefined,
        undefined,
      ]);
      const envelopes = items.map((i) => (i.data as { data: OutboxEnvelope }).data);
      expect(envelopes.map((e) => e.messageId).sort()).toEqual([...ids].sort());
      expect(envelopes.every((e) => e.type === TYPE && e.headers['x-tenant'] === 't1')).toBe(true);
    });
  },
);

// ---------------------------------------------------------------------------------------------
// Kafka through Nest's ClientKafka (producer only), consumed with kafkajs.

describeWith(
  ['postgres', 'kafka'],
  'ClientProxyPublisher over Kafka (ClientKafka, kafkajs consumer)',
  () => {
    it('delivers every committed message exactly once with key and x-outbox headers, never the rolled-back one', async () => {
      const topic = topicFor('kafka');
      const consumer = await consumeKafka(topic);
      closers.push(() => consumer.close());
      const client = track(
        new ClientKafka({
          client: {
            clientId: 'outbox-test-producer',
            brokers: KAFKA_BROKERS,
            logLevel: logLevel.NOTHING,
          },
          producerOnlyMode: true,
          producer: {
            createPartitioner: Partitioners.DefaultPartitioner,
            idempotent: true,
            maxInFlightRequests: 1,
          },
        }),
      );
      const h = await openOutbox(new ClientProxyPublisher(client, { timeoutMs: 10_000 }), {
        dispatcher: { publishTimeoutMs: 15_000, leaseMs: 30_000 },
      });
      const { expected, ghostId } = await enqueueScenario(h, topic);

      expect(await drainAll(h.dispatcher)).toBe(20);
      const items = await consumer.received.settle(20, 500, 30_000);
      expectExactlyOnce(
        items.map((i) => ({
          messageId: String(i.headers[OUTBOX_HEADER_MESSAGE_ID]),
          type: String(i.headers[OUTBOX_HEADER_TYPE]),
          key: i.key,
          payload: i.value,
          headers: i.headers,
        })),
        expected,
        ghostId,
      );
      // One key, one partition.
      for (const key of KEYS)
        expect(new Set(items.filter((i) => i.key === key).map((i) => i.partition)).size).toBe(1);
      await expectAllDelivered(h, 20);
    });
  },
);

// ---------------------------------------------------------------------------------------------
// mode 'send': whatever a consumer's error answer says (even "disconnected", "connection refused"
// or an ECONNRESET code), it is that message's own failure, never an outage. Real Nest servers
// on every transport that has request-response.

/** Error answers by message number; the others are answered 'ack'. */
const ERROR_ANSWERS = new Map<number, string | Record<string, string>>([
  [1, 'The inventory service disconnected'],
  [2, 'connect ECONNREFUSED 10.0.0.7:5432 (connection refused)'],
  [3, { message: 'Connection is closed.', code: 'ECONNRESET' }],
]);

/** The number a consumer got: envelope transports carry it in `payload`, RMQ as the data itself. */
function numberIn(data: unknown): number {
  const d = data as { n?: number; payload?: { n?: number } };
  return d.payload?.n ?? d.n ?? -1;
}

interface SendTransport {
  readonly name: string;
  readonly services: readonly ServiceName[];
  readonly packages: readonly string[];
  /** The Nest server's options and a client that reaches it. */
  setup(pattern: string): Promise<{ server: MicroserviceOptions; client: () => OutboxClientProxy }>;
}

const SEND_TRANSPORTS: readonly SendTransport[] = [
  {
    name: 'TCP',
    services: [],
    packages: [],
    async setup() {
      const port = await freePort();
      return {
        server: { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
        client: () => new ClientTCP({ host: '127.0.0.1', port }),
      };
    },
  },
  {
    name: 'Redis',
    services: ['redis'],
    packages: ['ioredis'],
    setup() {
      const options = { host: SERVICES.redis.host, port: SERVICES.redis.port };
      return Promise.resolve({
        server: { transport: Transport.REDIS, options },
        client: () => new ClientRedis(options),
      });
    },
  },
  {
    name: 'NATS',
    services: ['nats'],
    packages: ['nats'],
    setup() {
      return Promise.resolve({
        server: { transport: Transport.NATS, options: { servers: [NATS_URL] } },
        client: () => new ClientNats({ servers: [NATS_URL] }),
      });
    },
  },
  {
    name: 'MQTT',
    services: ['mqtt'],
    packages: ['mqtt'],
    setup() {
      return Promise.resolve({
        server: { transport: Transport.MQTT, options: { url: MQTT_URL } },
        client: () => new ClientMqtt({ url: MQTT_URL }),
      });
    },
  },
  {
    name: 'RabbitMQ',
    services: ['rabbitmq'],
    packages: ['amqp-connection-manager', 'amqplib'],
    setup(pattern) {
      // A queue of this test's own, gone once its consumer (the server) disconnects.
      const options = {
        urls: [RABBITMQ_URL],
        queue: pattern,
        queueOptions: { durable: false, autoDelete: true },
      };
      return Promise.resolve({
        server: { transport: Transport.RMQ, options },
        client: () => new ClientRMQ(options),
      });
    },
  },
];

for (const transport of SEND_TRANSPORTS) {
  describeWithPackages(
    transport.services,
    transport.packages,
    `ClientProxyPublisher mode 'send' over ${transport.name}: a consumer's error answer`,
    () => {
      it("is that message's own failure, even when it speaks of disconnection or refused connections", async () => {
        const pattern = topicFor(`${transport.name.toLowerCase()}-answers`);
        const { server, client } = await transport.setup(pattern);
        const consumer = await startNestConsumer(server, [pattern], 'message', (_p, data) => {
          const answer = ERROR_ANSWERS.get(numberIn(data));
          if (answer === undefined) return 'ack';
          throw new RpcException(answer);
        });
        closers.push(() => consumer.close());
        const publisher = new ClientProxyPublisher(track(client()), {
          mode: 'send',
          timeoutMs: 5_000,
        });

        const outcomes = await publisher.publish(
          [0, 1, 2, 3].map((n) => record(n, pattern)),
          new AbortController().signal,
        );

        expect(outcomes[0]).toEqual({ ok: true });
        for (const [n, answer] of ERROR_ANSWERS) {
          const outcome = outcomes[n];
          expect(outcome?.ok).toBe(false);
          const error = outcome !== undefined && !outcome.ok ? outcome.error : undefined;
          expect(error).not.toBeInstanceOf(PublisherUnavailableError);
          // The consumer's answer itself, as Nest's RPC exception filter sent it.
          expect(error).toMatchObject(
            typeof answer === 'string' ? { status: 'error', message: answer } : answer,
          );
        }
        expect((await consumer.received.settle(4)).map((i) => numberIn(i.data)).sort()).toEqual([
          0, 1, 2, 3,
        ]);
      });
    },
  );
}
