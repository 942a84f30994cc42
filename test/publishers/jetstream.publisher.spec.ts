import { inspect } from 'node:util';
import { Logger } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OutboxInvalidMessageError,
  PermanentPublishError,
  PublisherUnavailableError,
  type OutboxRecord,
} from '../../lib';
import { Inbox, ensureInboxTable, messageIdFromJetStream } from '../../lib/inbox';
import { OutboxHealthIndicator } from '../../lib/integrations/terminus';
import { JetStreamPublisher, type JetStreamPublisherOptions } from '../../lib/publishers/jetstream';
import { testDatabase, uniqueTable } from '../support/databases';
import {
  allSettled,
  dispatchUntil,
  openOutbox,
  openOutboxHarness,
  type HarnessOverrides,
  type OutboxHarness,
} from '../support/outbox-harness';
import { CapturingLogger } from '../support/capturing-logger';
import { describeWith, SERVICES } from '../support/services';
import { FaultProxy } from '../../lib/testing';
import {
  consumeStream,
  jetStreamAdmin,
  JETSTREAM_URL,
  PrivateNatsServer,
  type JetStreamReceived,
  type TestStream,
} from '../support/transports/jetstream';
import { freePort, startTcpRelay } from '../support/transports/net';
import { sleep, waitFor } from '../support/wait-for';

// PostgreSQL → JetStreamPublisher → a real NATS server with JetStream (the shared one on 4222, or
// a private nats-server for the tests that stop it) → an ordered JetStream consumer reading the
// test's own stream. Every test asserts what the stream holds and what the outbox table says.

const db = testDatabase('postgres');
type Harness = OutboxHarness<JetStreamPublisher>;
type Admin = Awaited<ReturnType<typeof jetStreamAdmin>>;

/** A record as the dispatcher hands it over, for tests that drive publish() directly. */
function record(subject: string, n: number, overrides: Partial<OutboxRecord> = {}): OutboxRecord {
  return {
    id: String(n),
    messageId: `${subject}-m-${n}`,
    topic: subject,
    key: `key-${n}`,
    type: 'direct',
    payload: `{"n":${n}}`,
    headers: {},
    attempts: 1,
    createdAt: new Date(),
    ...overrides,
  } as OutboxRecord;
}

const live = (): AbortSignal => new AbortController().signal;

/** The message ids a consumer got, in arrival order. */
const idsOf = (received: readonly JetStreamReceived[]): string[] =>
  received.map((r) => r.messageId);

describeWith(['postgres', 'nats'], 'JetStreamPublisher (PostgreSQL → NATS JetStream)', () => {
  let ds: DataSource;
  let admin: Admin;
  const baseTable = uniqueTable('outbox_js');
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
    admin = await jetStreamAdmin();
  });

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  afterAll(async () => {
    await admin?.close();
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  function publisher(options: Partial<JetStreamPublisherOptions> = {}): JetStreamPublisher {
    const p = new JetStreamPublisher({ servers: JETSTREAM_URL, ...options });
    cleanups.push(() => p.close());
    return p;
  }

  async function stream(config: Parameters<Admin['createStream']>[0] = {}): Promise<TestStream> {
    const s = await admin.createStream(config);
    cleanups.push(() => s.delete());
    return s;
  }

  async function consume(name: string, nc = admin.nc) {
    const consumer = await consumeStream(nc, name);
    cleanups.push(() => consumer.close());
    return consumer.received;
  }

  async function openHarness(
    p: JetStreamPublisher,
    overrides: HarnessOverrides = {},
  ): Promise<Harness> {
    const h = await openOutboxHarness(ds, p, overrides, 'outbox_js');
    cleanups.push(() => h.close());
    return h;
  }

  it('delivers committed messages with Nats-Msg-Id, id, type, key and headers, JSON as text and bytes as bytes, each message to its subject; rolled-back ones never arrive', async () => {
    const s = await stream();
    const topic = `${s.name}.orders`;
    const h = await openHarness(publisher());
    const received = await consume(s.name);
    const ids = await h.enqueue([
      ...Array.from({ length: 20 }, (_, i) => ({
        topic,
        key: i === 19 ? null : `order-${i % 7}`,
        type: 'order.created',
        payload: { n: i, text: 'é✓ "quoted"' },
        headers: { 'x-tenant': 't1' },
      })),
      {
        topic,
        key: 'bytes',
        type: 'order.image',
        payload: Buffer.from([0, 1, 2, 0xfe, 0xff]),
        contentType: 'application/octet-stream',
      },
      {
        topic,
        key: 'elsewhere',
        type: 'order.audit',
        payload: { audit: true },
        attributes: { jetstream: { subject: `${s.name}.audit.eu` } },
      },
    ]);
    await expect(
      ds.transaction(async (m) => {
        await h.outbox.enqueue({ topic, key: 'ghost', payload: { ghost: true } }, m);
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');

    await dispatchUntil(h, 'the outbox to drain', allSettled(h));
    await received.settle(22, 300, 30_000);

    expect(idsOf(received.items).sort()).toEqual([...ids].sort());
    const byId = new Map(received.items.map((r) => [r.messageId, r]));
    ids.slice(0, 20).forEach((id, i) => {
      const r = byId.get(id) as JetStreamReceived;
      expect(r.subject).toBe(topic);
      expect(JSON.parse(r.data.toString('utf8'))).toEqual({ n: i, text: 'é✓ "quoted"' });
      expect(r.headers).toEqual({
        'x-tenant': 't1',
        'Nats-Msg-Id': id,
        [OUTBOX_HEADER_MESSAGE_ID]: id,
        [OUTBOX_HEADER_TYPE]: 'order.created',
        ...(i === 19 ? {} : { [OUTBOX_HEADER_KEY]: `order-${i % 7}` }),
      });
    });
    const bytes = byId.get(ids[20] as string) as JetStreamReceived;
    expect([...bytes.data]).toEqual([0, 1, 2, 0xfe, 0xff]);
    expect(bytes.headers[OUTBOX_HEADER_CONTENT_TYPE]).toBe('application/octet-stream');
    expect(byId.get(ids[21] as string)?.subject).toBe(`${s.name}.audit.eu`);
    // Per key, arrival order is enqueue order.
    for (const key of ['order-0', 'order-3', 'order-6']) {
      expect(
        received.items.filter((r) => r.headers[OUTBOX_HEADER_KEY] === key).map((r) => r.messageId),
      ).toEqual(ids.filter((id) => byId.get(id)?.headers[OUTBOX_HEADER_KEY] === key));
    }
    expect(received.items.some((r) => r.data.toString().includes('ghost'))).toBe(false);
    const rows = await h.rows();
    expect(rows.every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
  });

  it('through the running OutboxModule, 50 keys × 40 messages enqueued in separate transactions reach a JetStream consumer in per-key order, once each', async () => {
    const s = await stream();
    const topic = `${s.name}.seq`;
    const received = await consume(s.name);
    const h = await openHarness(publisher(), { autoStart: true });
    const KEYS = 50;
    const PER_KEY = 40;
    const WORKERS = 10;
    await Promise.all(
      Array.from({ length: WORKERS }, async (_, w) => {
        for (let n = 0; n < PER_KEY; n++) {
          for (let k = w; k < KEYS; k += WORKERS)
            await h.enqueue({ topic, key: `key-${k}`, type: 'seq', payload: { k, n } });
        }
      }),
    );
    await received.settle(KEYS * PER_KEY, 300, 60_000);

    expect(received.items).toHaveLength(KEYS * PER_KEY);
    expect(new Set(idsOf(received.items)).size).toBe(KEYS * PER_KEY);
    const perKey = new Map<string, number[]>();
    for (const r of received.items) {
      const { k, n } = JSON.parse(r.data.toString()) as { k: number; n: number };
      perKey.set(`key-${k}`, [...(perKey.get(`key-${k}`) ?? []), n]);
    }
    expect(perKey.size).toBe(KEYS);
    const inOrder = Array.from({ length: PER_KEY }, (_, n) => n);
    for (const [, ns] of perKey) expect(ns).toEqual(inOrder);
    await waitFor('every row delivered', allSettled(h));
  });

  it("one message over the stream's max_msg_size is dead-lettered at its first attempt; its neighbours are delivered once and not published again", async () => {
    const s = await stream({ max_msg_size: 2_048 });
    const topic = `${s.name}.limits`;
    const h = await openHarness(publisher(), {
      retry: { maxAttempts: 5, initialDelayMs: 20, maxDelayMs: 50 },
    });
    const received = await consume(s.name);
    const small = (i: number) => ({ topic, key: `small-${i}`, payload: { i } });
    // One transaction, so one claim: the oversize message shares its batch with the others.
    const ids = await h.enqueue([
      ...Array.from({ length: 15 }, (_, i) => small(i)),
      { topic, key: 'big', payload: { blob: 'x'.repeat(4_000) } },
      ...Array.from({ length: 15 }, (_, i) => small(i + 15)),
    ]);
    const bigId = ids[15] as string;

    expect(await h.dispatcher.runOnce()).toMatchObject({
      claimed: 31,
      published: 30,
      deadLettered: 1,
      retried: 0,
      released: 0,
    });
    await dispatchUntil(h, 'the outbox to settle', allSettled(h));
    await received.settle(30, 500, 30_000);

    const rows = await h.rows();
    const big = rows.find((r) => r.messageId === bigId);
    expect(big).toMatchObject({ status: 'dead', attempts: 1 });
    expect(big?.lastError).toMatch(
      /PermanentPublishError: JetStream refused the message for subject ".*\.limits": JetStreamApiError: message size exceeds maximum allowed/,
    );
    // Published once each: one attempt, one copy in the stream.
    expect(
      rows.filter((r) => r !== big).every((r) => r.status === 'delivered' && r.attempts === 1),
    ).toBe(true);
    expect(idsOf(received.items)).toEqual(ids.filter((id) => id !== bigId));
    expect(await s.count()).toBe(30);
  });

  it('a subject no stream captures is dead-lettered at once (no responders, and no stream matches it); the rest of the batch is delivered', async () => {
    const s = await stream();
    const topic = `${s.name}.ok`;
    const nowhere = `${s.name}-nowhere.orders`; // outside the stream's subjects
    const h = await openHarness(publisher());
    const received = await consume(s.name);
    const ids = await h.enqueue([
      { topic, key: 'a', payload: { n: 1 } },
      { topic: nowhere, key: 'b', payload: { n: 2 } },
      { topic, key: 'c', payload: { n: 3 } },
    ]);
    expect(await h.dispatcher.runOnce()).toMatchObject({
      claimed: 3,
      published: 2,
      deadLettered: 1,
    });
    await received.settle(2, 300, 10_000);
    expect(idsOf(received.items)).toEqual([ids[0], ids[2]]);
    const dead = (await h.rows()).find((r) => r.messageId === ids[1]);
    expect(dead).toMatchObject({ status: 'dead', attempts: 1 });
    expect(dead?.lastError).toContain(`No JetStream stream captures subject "${nowhere}"`);
  });

  it('refuses at enqueue a jetstream.subject that is not a subject to publish to; unknown JetStream attributes too', async () => {
    const h = await openHarness(publisher());
    for (const subject of [
      'orders.*',
      'orders.>',
      'a..b',
      '.a',
      'has space',
      '$JS.API.STREAM.DELETE.X',
      '',
    ]) {
      await expect(
        h.enqueue({ topic: 'orders', payload: {}, attributes: { jetstream: { subject } } }),
      ).rejects.toMatchObject({
        constructor: OutboxInvalidMessageError,
        reason: 'invalid-attributes',
      });
    }
    await expect(
      h.enqueue({
        topic: 'orders',
        payload: {},
        attributes: { jetstream: { subjekt: 'orders.eu' } } as never,
      }),
    ).rejects.toThrow(/"subjekt" is not an attribute here; the known ones are "subject"/);
    expect(await h.rows()).toEqual([]);
  });

  it('a message landing in another stream than expectedStream, an unsendable header and a Nats-* header fail for good; the others of the batch are published', async () => {
    const s = await stream();
    const p = publisher({
      expectedStream: (r) => (r.type === 'elsewhere' ? 'NOT_THIS_STREAM' : undefined),
    });
    const subject = `${s.name}.direct`;
    const outcomes = await p.publish(
      [
        record(subject, 1),
        record(subject, 2, { type: 'elsewhere' }),
        record(subject, 3, { headers: { 'bad name': 'v' } }),
        record(subject, 4, { headers: { 'Nats-Rollup': 'all' } }),
        record(subject, 5),
      ],
      live(),
    );
    expect(outcomes.map((o) => o.ok)).toEqual([true, false, false, false, true]);
    for (const failed of outcomes.slice(1, 4)) {
      expect((failed as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    }
    expect(String((outcomes[1] as { error: unknown }).error)).toMatch(
      /expected stream does not match/,
    );
    expect(String((outcomes[3] as { error: unknown }).error)).toMatch(
      /"Nats-Rollup" would be read by JetStream/,
    );
    expect(await s.count()).toBe(2);
  });

  it('within one call, the next message of a key is published only after the one before it was acknowledged: a refused message stops its key there', async () => {
    const s = await stream({ max_msg_size: 2_048 });
    const subject = `${s.name}.runs`;
    const p = publisher();
    const received = await consume(s.name);
    const a = (n: number, payload = `{"n":${n}}`) =>
      record(subject, n, { key: 'A', messageId: `a-${n}`, payload });
    const b = (n: number) => record(subject, n, { key: 'B', messageId: `b-${n}` });
    const outcomes = await p.publish(
      [a(1), b(1), a(2, `"${'x'.repeat(4_000)}"`), b(2), a(3), b(3)],
      live(),
    );
    expect(outcomes.map((o) => o.ok)).toEqual([true, true, false, true, false, true]);
    expect((outcomes[2] as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    // a-3 was never written: no attempt is counted for it.
    expect(outcomes[4]).toMatchObject({ ok: false, sent: false });
    await received.settle(4, 300, 10_000);
    expect(idsOf(received.items).filter((id) => id.startsWith('a-'))).toEqual(['a-1']);
    expect(idsOf(received.items).filter((id) => id.startsWith('b-'))).toEqual([
      'b-1',
      'b-2',
      'b-3',
    ]);
  });

  it('a PubAck that never comes (the replies held back) fails the publish with a timeout and counts an attempt; the retry is answered as a duplicate by the stream, which holds the message once', async () => {
    const s = await stream();
    const topic = `${s.name}.timeout`;
    const relay = await startTcpRelay(SERVICES.nats.host, SERVICES.nats.port);
    cleanups.push(() => relay.close());
    const h = await openHarness(
      publisher({ servers: `nats://127.0.0.1:${relay.port}`, publishTimeoutMs: 300 }),
      { retry: { maxAttempts: 5, initialDelayMs: 20, maxDelayMs: 50 } },
    );
    const received = await consume(s.name);
    await h.enqueue({ topic, key: 'warm-up', payload: {} });
    await dispatchUntil(h, 'the warm-up message', allSettled(h)); // connected

    const [id] = await h.enqueue({ topic, key: 'unknown', payload: { n: 1 } });
    relay.holdReplies();
    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 1, published: 0, retried: 1 });
    const afterTimeout = await h.row(id as string);
    expect(afterTimeout).toMatchObject({ status: 'pending', attempts: 1 });
    expect(afterTimeout.lastError).toMatch(/PublishTimeoutError/);
    // The stream stored it although the publisher never heard so.
    await received.waitFor(2, 10_000);
    expect(idsOf(received.items)).toEqual([expect.any(String), id]);

    relay.release();
    await dispatchUntil(h, 'the retry', allSettled(h));
    expect(await h.row(id as string)).toMatchObject({ status: 'delivered', attempts: 2 });
    await sleep(300);
    expect(idsOf(received.items).filter((x) => x === id)).toHaveLength(1);
    expect(await s.count()).toBe(2);
  });

  it('the outbox headers, with the inbox, let a JetStream consumer handle a redelivered message once', async () => {
    const s = await stream();
    const topic = `${s.name}.inbox`;
    const h = await openHarness(publisher());
    const received = await consume(s.name);
    const [id] = await h.enqueue({ topic, key: 'k', payload: { orderId: 'o-1' } });
    await dispatchUntil(h, 'delivery', allSettled(h));
    const [message] = await received.waitFor(1);
    const inboxTable = uniqueTable('inbox_js');
    await ensureInboxTable(ds, { tableName: inboxTable });
    cleanups.push(() => ds.query(`DROP TABLE IF EXISTS "${inboxTable}"`));
    const inbox = new Inbox(ds, { tableName: inboxTable });
    let handled = 0;
    const handle = () =>
      inbox.handleOnce(
        ds,
        {
          messageId: messageIdFromJetStream((message as JetStreamReceived).message),
          consumer: 'billing',
        },
        () => {
          handled++;
          return Promise.resolve();
        },
      );
    await handle();
    await handle(); // the same message delivered again (an ack that was lost)
    expect(messageIdFromJetStream((message as JetStreamReceived).message)).toBe(id);
    expect(handled).toBe(1);
  });

  it('ping() resolves while JetStream answers and rejects with PublisherUnavailableError where nothing listens; connect() fails the same way', async () => {
    const up = publisher();
    const down = publisher({
      servers: `nats://127.0.0.1:${await freePort()}`,
      reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
    });
    await expect(up.ping(AbortSignal.timeout(10_000))).resolves.toBeUndefined();
    await expect(down.ping(AbortSignal.timeout(10_000))).rejects.toBeInstanceOf(
      PublisherUnavailableError,
    );
    await expect(down.connect()).rejects.toThrow(
      /Could not connect to NATS at nats:\/\/127\.0\.0\.1:\d+/,
    );
  });

  it('never logs or shows the credentials of a server URL: connected, lost, refused', async () => {
    const logger = new CapturingLogger();
    Logger.overrideLogger(logger);
    cleanups.push(() => Promise.resolve(Logger.overrideLogger(['error', 'fatal'])));
    const proxy = await FaultProxy.start(SERVICES.nats, { lifetimeMs: 60_000 });
    cleanups.push(() => proxy.close());
    const secret = 's3cret-pass';
    const p = publisher({
      // This server asks for no credentials; the client sends them all the same.
      servers: `nats://outbox:${secret}@127.0.0.1:${proxy.port}`,
      reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
    });
    await p.connect();
    proxy.cut('reset');
    await waitFor('the loss to be logged', () =>
      logger.lines.some((l) => l.level === 'warn' && /NATS connection .* lost/.test(l.message)),
    );
    const refused = await p.connect().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(PublisherUnavailableError);
    expect(logger.lines.map((l) => l.message)).toEqual(
      expect.arrayContaining([`Connected to NATS at nats://127.0.0.1:${proxy.port}`]),
    );
    for (const shown of [
      ...logger.lines.map((l) => l.message),
      String(refused),
      JSON.stringify(p),
      inspect(p, { depth: 5 }),
    ]) {
      expect(shown).not.toContain(secret);
    }
  });

  it('checks its options at construction', () => {
    expect(() => new JetStreamPublisher({} as JetStreamPublisherOptions)).toThrow(
      /JetStreamPublisher option "servers".*Pass e\.g\. 'nats:\/\/127\.0\.0\.1:4222'/s,
    );
    expect(() => new JetStreamPublisher({ servers: JETSTREAM_URL, publishTimeoutMs: 0 })).toThrow(
      /publishTimeoutMs/,
    );
    expect(
      () =>
        new JetStreamPublisher({
          servers: JETSTREAM_URL,
          subjct: () => 'x',
        } as JetStreamPublisherOptions),
    ).toThrow(/subjct.*subject/);
    expect(() => new JetStreamPublisher({ servers: JETSTREAM_URL, user: 'u' })).toThrow(
      /user and pass go together/,
    );
    expect(() => new JetStreamPublisher({ servers: JETSTREAM_URL, expectedStream: 'a.b' })).toThrow(
      /expectedStream/,
    );
  });
});

describeWith(['postgres'], 'JetStreamPublisher with its server stopped and started again', () => {
  let ds: DataSource;
  let server: PrivateNatsServer;
  let admin: Admin;
  const baseTable = uniqueTable('outbox_js_down');
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
    server = await PrivateNatsServer.start();
  });

  beforeEach(async () => {
    if (!server.running) await server.start();
    admin = await jetStreamAdmin(server.url);
  });

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
    await admin?.close().catch(() => undefined);
  });

  afterAll(async () => {
    await server?.dispose();
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  it('stopped during a drain and started again: nothing lost or dead, no message published twice into the stream, no attempt spent on the outage, delivery back before the outage pause ends', async () => {
    // File storage, so the stream and its duplicate window survive the restart.
    const s = await admin.createStream({}, 'restart');
    const topic = `${s.name}.orders`;
    const h = await openOutboxHarness(
      ds,
      new JetStreamPublisher({
        servers: server.url,
        publishTimeoutMs: 2_000,
        reconnect: { initialDelayMs: 50, maxDelayMs: 200 },
      }),
      // A long poll interval makes the first outage pause long: delivery must come back through
      // the publisher's ping() (the dispatcher's probe), not by waiting the pause out.
      {
        autoStart: true,
        dispatcher: { batchSize: 20, pollIntervalMs: 20_000, maxOutagePauseMs: 60_000 },
      },
      'outbox_js_down',
    );
    cleanups.push(() => h.close());
    const KEYS = 20;
    const ROUNDS = 30;
    const round = (n: number) =>
      Array.from({ length: KEYS }, (_, k) => ({ topic, key: `key-${k}`, payload: { k, n } }));
    const ids: string[] = [];
    for (let n = 0; n < ROUNDS; n++) ids.push(...(await h.enqueue(round(n))));

    await waitFor(
      'a tenth delivered',
      async () =>
        (await h.rows()).filter((r) => r.status === 'delivered').length >= ids.length / 10,
      { timeoutMs: 30_000, intervalMs: 5 },
    );
    const outagesBefore = h.outages.length;
    await server.stop();
    ids.push(...(await h.enqueue(round(ROUNDS)))); // work for the dispatcher during the outage
    await waitFor(
      'the dispatcher to see the outage',
      () => h.dispatcher.status().pausedUntil !== null,
      {
        timeoutMs: 30_000,
      },
    );
    expect(h.outages.length).toBeGreaterThan(outagesBefore);
    const during = await h.rows();
    expect(during.some((r) => r.status === 'pending')).toBe(true);
    // A batch cut off with none of it acknowledged is an outage: no attempt. A batch cut in
    // half counts one attempt for the messages that were in flight (the stream may have them).
    expect(during.every((r) => r.attempts <= 1 && r.status !== 'dead')).toBe(true);
    const pausedUntil = h.dispatcher.status().pausedUntil?.getTime() ?? 0;

    await server.start();
    await waitFor('every row delivered after the restart', allSettled(h), { timeoutMs: 60_000 });
    expect(Date.now()).toBeLessThan(pausedUntil);

    const rows = await h.rows();
    expect(rows.every((r) => r.status === 'delivered' && r.attempts >= 1 && r.attempts <= 2)).toBe(
      true,
    );
    // Nothing lost, and nothing twice in the stream: a message published again after the
    // restart (its PubAck lost with the server) was dropped by the duplicate window.
    const consumerAdmin = await jetStreamAdmin(server.url);
    cleanups.push(() => consumerAdmin.close());
    const consumer = await consumeStream(consumerAdmin.nc, s.name);
    cleanups.push(() => consumer.close());
    await consumer.received.settle(ids.length, 500, 30_000);
    expect(idsOf(consumer.received.items).sort()).toEqual([...ids].sort());
    // Per key, in order.
    const perKey = new Map<number, number[]>();
    for (const r of consumer.received.items) {
      const { k, n } = JSON.parse(r.data.toString()) as { k: number; n: number };
      perKey.set(k, [...(perKey.get(k) ?? []), n]);
    }
    for (const [, ns] of perKey)
      expect(ns).toEqual(Array.from({ length: ROUNDS + 1 }, (_, n) => n));
  }, 120_000);

  it('the Terminus health check reports the broker unreachable while the server is down and reachable once it is back', async () => {
    const h = await openOutbox(ds, {
      publisher: new JetStreamPublisher({
        servers: server.url,
        reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
      }),
      tablePrefix: 'outbox_js_health',
      imports: [TerminusModule.forRoot({ logger: false })],
      providers: [OutboxHealthIndicator],
    });
    cleanups.push(() => h.close());
    const indicator = h.moduleRef.get(OutboxHealthIndicator);
    const check = async () =>
      (await indicator.isHealthy('outbox', { requireDispatcher: false })).outbox;

    expect(await check()).toMatchObject({ status: 'up', publisher: 'reachable' });
    await server.stop();
    const down = await check();
    expect(down).toMatchObject({ status: 'down', publisher: 'unreachable' });
    expect(JSON.stringify(down)).toMatch(/the publisher's broker is unreachable: .*NATS/);
    await server.start();
    expect(await check()).toMatchObject({ status: 'up', publisher: 'reachable' });
  });

  it('a publish whose server is gone throws PublisherUnavailableError (the batch goes back whole) and connects again once it is back', async () => {
    const s = await admin.createStream({}, 'gone');
    const p = new JetStreamPublisher({
      servers: server.url,
      reconnect: { initialDelayMs: 10, maxDelayMs: 20 },
    });
    cleanups.push(() => p.close());
    const subject = `${s.name}.x`;
    expect(await p.publish([record(subject, 1)], live())).toEqual([{ ok: true }]);
    await server.stop();
    await expect(p.publish([record(subject, 2)], live())).rejects.toBeInstanceOf(
      PublisherUnavailableError,
    );
    await server.start();
    await waitFor(
      'a publish to go through again',
      async () => (await p.publish([record(subject, 3)], live()))[0]?.ok === true,
      { timeoutMs: 10_000, intervalMs: 50 },
    );
  });
});
