import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { Test, type TestingModule } from '@nestjs/testing';
import { connect, type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  PublisherUnavailableError,
  type OutboxMessage,
  type OutboxModuleOptions,
} from '../../lib';
import { RabbitMqPublisher, type RabbitMqPublisherOptions } from '../../lib/rabbitmq';
import { ensureOutboxTable } from '../../lib/store/outbox-dialect';
import {
  readOutbox,
  TEST_DATABASES,
  uniqueTable,
  type OutboxRow,
  type TestDatabase,
} from '../support/databases';
import { describeWith, SERVICES } from '../support/services';

// {PostgreSQL, MariaDB} → RabbitMqPublisher → a real RabbitMQ → an amqplib consumer. Every test
// asserts what the consumer received and what the outbox table says.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const KEY_HEADER = 'x-outbox-key';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const run = promisify(execFile);

/**
 * The broker-control tests need rabbitmqctl on this machine (and the relative memory watermark to
 * restore). Decided at load time so that a test that cannot run is skipped with the reason in its
 * name, and under CI=true fails the run instead of passing without checking anything.
 */
function probeRabbitmqctl(): { watermark: string } | { reason: string } {
  let reason = 'rabbitmqctl is not available to this user';
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
    const watermark = /Memory high watermark setting: ([\d.]+) of available memory/.exec(
      status,
    )?.[1];
    if (watermark !== undefined) return { watermark };
    reason = 'the memory watermark is not relative';
  }
  return { reason };
}
const RABBITMQCTL = probeRabbitmqctl();
if ('reason' in RABBITMQCTL && process.env.CI === 'true') {
  throw new Error(
    `CI=true but the RabbitMQ broker-control tests cannot run: ${RABBITMQCTL.reason}`,
  );
}
const brokerControlTest = (name: string, fn: () => Promise<void>, timeout?: number): void =>
  'reason' in RABBITMQCTL
    ? it.skip(`${name} [skipped: ${RABBITMQCTL.reason}]`, fn)
    : it(name, fn, timeout);

interface Delivered {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly body: string;
  readonly headers: Record<string, unknown>;
  readonly message: ConsumeMessage;
}

interface Harness {
  readonly table: string;
  readonly queue: string;
  readonly outbox: OutboxService;
  readonly dispatcher: OutboxDispatcher;
  readonly publisher: RabbitMqPublisher;
  readonly outages: unknown[];
  rows(): Promise<OutboxRow[]>;
  enqueue(messages: OutboxMessage | OutboxMessage[]): Promise<string[]>;
  close(): Promise<void>;
}

let counter = 0;
const uniqueName = (what: string): string => `outbox-it-${what}-${process.pid}-${++counter}`;

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
  everyMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline)
      throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

function quoted(ds: DataSource, name: string): string {
  return ds.options.type === 'postgres' ? `"${name}"` : `\`${name}\``;
}

/** One DataSource per database, a table and a queue per test, one amqplib consumer connection. */
function rabbitSuite(db: TestDatabase) {
  let ds: DataSource;
  let consumerConnection: ChannelModel | undefined;
  const baseTable = uniqueTable('outbox_rmq');
  const tables: string[] = [];
  const queues: string[] = [];
  const harnesses: Harness[] = [];

  async function consumerChannel(): Promise<Channel> {
    if (consumerConnection === undefined) {
      const opened = await connect(RABBITMQ_URL);
      opened.on('error', () => undefined);
      opened.on('close', () => {
        if (consumerConnection === opened) consumerConnection = undefined;
      });
      consumerConnection = opened;
    }
    const channel = await consumerConnection.createChannel();
    channel.on('error', () => undefined);
    return channel;
  }

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });

  afterEach(async () => {
    await Promise.all(harnesses.splice(0).map((h) => h.close()));
  });

  afterAll(async () => {
    if (queues.length > 0) {
      const channel = await consumerChannel().catch(() => undefined);
      for (const queue of queues) await channel?.deleteQueue(queue).catch(() => undefined);
    }
    await consumerConnection?.close().catch(() => undefined);
    for (const table of tables) {
      if (ds?.options.type !== 'postgres')
        await ds?.query(`DROP TABLE IF EXISTS ${quoted(ds, `${table}_key_lock`)}`);
      await ds?.query(`DROP TABLE IF EXISTS ${quoted(ds, table)}`);
    }
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  async function openOutbox(
    publisherOptions: Partial<RabbitMqPublisherOptions> = {},
    overrides: Partial<OutboxModuleOptions> = {},
  ): Promise<Harness> {
    const table = uniqueTable('outbox_rmq');
    tables.push(table);
    await ensureOutboxTable(ds, { tableName: table });
    const queue = uniqueName('q');
    queues.push(queue);
    const outages: unknown[] = [];
    const publisher = new RabbitMqPublisher({
      url: RABBITMQ_URL,
      assertTopology: async (channel) => {
        await channel.assertQueue(queue, { durable: true });
      },
      reconnect: { initialDelayMs: 100, maxDelayMs: 1_000 },
      ...publisherOptions,
    });
    const moduleRef: TestingModule = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({
          dataSource: ds,
          tableName: table,
          publisher,
          autoStart: false,
          observer: { onOutage: (error) => outages.push(error) },
          ...overrides,
          dispatcher: {
            pollIntervalMs: 50,
            maxOutagePauseMs: 1_000,
            listen: false,
            ...overrides.dispatcher,
          },
        }),
      ],
    }).compile();
    await moduleRef.init();
    const outbox = moduleRef.get(OutboxService);
    const harness: Harness = {
      table,
      queue,
      outbox,
      publisher,
      dispatcher: moduleRef.get(OutboxDispatcher),
      outages,
      rows: () => readOutbox(ds, table),
      enqueue: (messages) =>
        ds.transaction((m) => outbox.enqueue(Array.isArray(messages) ? messages : [messages], m)),
      close: () => moduleRef.close(),
    };
    harnesses.push(harness);
    return harness;
  }

  /** Consumes `queue` (declared durable) into an array, acknowledging each message. */
  async function consume(queue: string): Promise<Delivered[]> {
    const channel = await consumerChannel();
    await channel.assertQueue(queue, { durable: true });
    await channel.prefetch(500);
    const received: Delivered[] = [];
    await channel.consume(queue, (message) => {
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
      channel.ack(message);
    });
    return received;
  }

  async function dispatchUntil(
    h: Harness,
    what: string,
    done: () => boolean | Promise<boolean>,
    timeoutMs = 30_000,
  ): Promise<void> {
    await waitFor(
      what,
      async () => {
        await h.dispatcher.drain();
        return done();
      },
      timeoutMs,
      20,
    );
  }

  const allSettled = (h: Harness) => async () =>
    (await h.rows()).every((r) => r.status !== 'pending');

  return { ds: () => ds, openOutbox, consume, dispatchUntil, allSettled, consumerChannel };
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
        await waitFor('20 messages at the consumer', () => received.length >= 20);
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
        expect(rows.every((r) => r.status === 'delivered' && r.attempts === 0)).toBe(true);
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
        await waitFor(
          '5000 messages at the consumer',
          () => received.length >= KEYS * PER_KEY,
          30_000,
        );
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

const postgres = TEST_DATABASES[0] as TestDatabase;

describeWith(['postgres', 'rabbitmq'], 'RabbitMqPublisher failures (PostgreSQL → RabbitMQ)', () => {
  const suite = rabbitSuite(postgres);
  const retry = { maxAttempts: 3, initialDelayMs: 20, maxDelayMs: 50 };

  it('retries an unroutable message (returned, though confirmed) and dead-letters it; it is never delivered', async () => {
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
      { retry },
    );
    queue = h.queue;
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
      rows.filter((r) => r !== bad).every((r) => r.status === 'delivered' && r.attempts === 0),
    ).toBe(true);
    expect(received.map((r) => r.messageId)).toEqual(ids.filter((id) => id !== ids[5]));
    const channel = await suite.consumerChannel();
    await channel.deleteExchange(noBinding);
    await channel.close();
  });

  it('a publish to a missing exchange (404 closes the channel) fails alone; the rest of the batch is delivered', async () => {
    const missing = uniqueName('missing-exchange');
    let queue = '';
    const h = await suite.openOutbox(
      { exchange: (r) => (r.topic === 'missing' ? missing : ''), routingKey: () => queue },
      { retry },
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
    );
    await sleep(300);

    const rows = await h.rows();
    expect(rows.find((r) => r.messageId === badId)).toMatchObject({ status: 'dead', attempts: 3 });
    expect(
      rows
        .filter((r) => r.messageId !== badId)
        .every((r) => r.status === 'delivered' && r.attempts === 0),
    ).toBe(true);
    // Nothing lost. Messages whose confirm the closed channel swallowed were published again, so a
    // copy is allowed (at least once), but every one arrived.
    const expected = [...ids.filter((id) => id !== badId), ...later].sort();
    expect([...new Set(received.map((r) => r.messageId))].sort()).toEqual(expected);
  });

  it('publishes a batch larger than maxOutstandingConfirms by waiting for confirms to free slots', async () => {
    const h = await suite.openOutbox({ maxOutstandingConfirms: 3 });
    const received = await suite.consume(h.queue);
    const ids = await h.enqueue(
      Array.from({ length: 150 }, (_, i) => ({ topic: h.queue, key: `k-${i}`, payload: { i } })),
    );
    expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 150, published: 150 });
    await waitFor('150 messages', () => received.length >= 150);
    expect(received.map((r) => r.messageId)).toEqual(ids);
  });

  brokerControlTest(
    'fails fast while RabbitMQ blocks publishers (memory alarm) without burning attempts, then resumes',
    async () => {
      const watermark = 'watermark' in RABBITMQCTL ? RABBITMQCTL.watermark : '0.4';
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
          10_000,
          20,
        );
        expect(Date.now() - started).toBeLessThan(5_000); // not the publish timeout: the blocked notice
        expect(
          h.outages.some(
            (e) => e instanceof PublisherUnavailableError && /blocking publishers/.test(e.message),
          ),
        ).toBe(true);
        const rows = await h.rows();
        expect(rows.every((r) => r.attempts === 0 && r.status !== 'dead')).toBe(true);
      } finally {
        await run('rabbitmqctl', ['set_vm_memory_high_watermark', watermark]);
      }
      await suite.dispatchUntil(h, 'delivery after the alarm cleared', suite.allSettled(h));
      await waitFor('the 10 messages', () =>
        ids.every((id) => received.some((r) => r.messageId === id)),
      );
      expect((await h.rows()).every((r) => r.status === 'delivered' && r.attempts === 0)).toBe(
        true,
      );
    },
  );

  brokerControlTest(
    'survives a broker stop mid-run (rabbitmqctl STOP_APP / START_APP): nothing lost, no attempt burnt, reconnects',
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
          30_000,
        );
        const duringOutage = await h.rows();
        expect(duringOutage.some((r) => r.status === 'pending')).toBe(true);
        expect(duringOutage.every((r) => r.attempts === 0 && r.status !== 'dead')).toBe(true);

        await run('rabbitmqctl', ['start_app'], { timeout: 60_000 });
        stopped = false;
        await waitFor('every row delivered after the restart', suite.allSettled(h), 60_000);
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
        30_000,
      );
      const rows = await h.rows();
      expect(rows.every((r) => r.status === 'delivered' && r.attempts === 0)).toBe(true);
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
