import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import {
  ClientRMQ,
  ClientTCP,
  KafkaContext,
  MqttContext,
  NatsContext,
  RedisContext,
  RmqContext,
  TcpContext,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import * as amqp from 'amqplib';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import * as nats from 'nats';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OutboxError,
  OutboxOptionsError,
  type OutboxMessage,
  type OutboxPublisher,
} from 'nestjs-outbox';
import {
  createInboxMigration,
  ensureInboxTable,
  Inbox,
  InboxModule,
  InboxService,
  InvalidInboxEntryError,
  isPermanentInboxError,
  MessageIdMissingError,
  messageIdFromAmqp,
  messageIdFromKafka,
  messageIdFromRpcContext,
  type InboxOutcome,
} from 'nestjs-outbox/inbox';
import { KafkaPublisher } from 'nestjs-outbox/kafka';
import { ClientProxyPublisher, type OutboxEnvelope } from 'nestjs-outbox/microservices';
import { RabbitMqPublisher } from 'nestjs-outbox/rabbitmq';
import { DataSource, type EntityManager } from 'typeorm';
import { TEST_DATABASES, type TestDatabase, testDatabase, uniqueTable } from '../support/databases';
import {
  createBusinessTable,
  DuplicatingPublisher,
  dropTables,
  Gate,
  readEffects,
  readInbox,
  track,
  type Tracked,
  writeEffect,
  waitUntilBlocked,
  type Effect,
} from '../support/inbox-fixtures';
import { sleep, waitFor } from '../support/wait-for';
import { startNestInboxConsumer } from '../support/inbox-nest-consumer';
import { openOutbox, type OutboxApp } from '../support/outbox-harness';
import { describeWith, SERVICES, type ServiceName } from '../support/services';
import { freePort } from '../support/transports/net';

// The inbox on real PostgreSQL, MariaDB and SQLite: duplicates, failures, concurrent duplicates,
// consumers, the caller's transaction, purge and the migration; then end to end from the outbox
// through real RabbitMQ and Kafka brokers (amqplib and kafkajs consumers) and through Nest
// microservice handlers (RMQ and TCP). Every test asserts the business table and the inbox table.

const RABBITMQ_URL =
  process.env.RABBITMQ_URL ??
  `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const KAFKA_BROKERS = [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`];
const CONSUMER = 'billing';

let counter = 0;
const uniqueName = (what: string): string => `inbox-it-${what}-${process.pid}-${++counter}`;

describe('message id extractors', () => {
  const id = randomUUID();

  it('amqplib: the x-outbox-message-id header first, then the messageId property', () => {
    expect(
      messageIdFromAmqp({
        properties: { messageId: 'from-property', headers: { [OUTBOX_HEADER_MESSAGE_ID]: id } },
      }),
    ).toBe(id);
    expect(messageIdFromAmqp({ properties: { messageId: id, headers: {} } })).toBe(id);
    expect(
      messageIdFromAmqp({
        properties: { headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(id) } },
      }),
    ).toBe(id);
    const missing = (() => {
      try {
        return messageIdFromAmqp({ properties: { messageId: '', headers: {} } });
      } catch (error) {
        return error;
      }
    })();
    expect(missing).toBeInstanceOf(MessageIdMissingError);
    expect(missing).toMatchObject({ source: 'amqp', name: 'MessageIdMissingError' });
  });

  it('binary ids are kept lossless: bytes that are not UTF-8 never collide, text ids are as before', () => {
    const header = (bytes: number[]) =>
      messageIdFromAmqp({
        properties: { headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(bytes) } },
      });
    expect(header([0xff])).not.toBe(header([0xfe]));
    expect(header([0xff])).toBe('bin:ff');
    expect(
      messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from([0xfe, 0x41]) } }),
    ).toBe('bin:fe41');
    expect(header([...Buffer.from('é✓-id')])).toBe('é✓-id');
  });

  it('kafkajs: the header of a KafkaMessage or of an eachMessage payload, Buffer or string', () => {
    expect(messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(id) } })).toBe(
      id,
    );
    expect(messageIdFromKafka({ message: { headers: { [OUTBOX_HEADER_MESSAGE_ID]: id } } })).toBe(
      id,
    );
    expect(messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: [Buffer.from(id)] } })).toBe(
      id,
    );
    expect(() => messageIdFromKafka({ headers: {} })).toThrow(MessageIdMissingError);
    expect(() => messageIdFromKafka({ message: { headers: undefined } })).toThrow(
      /kafka message carries no message id/,
    );
  });

  it('Nest contexts: RMQ message, Kafka and NATS headers, MQTT 5 user properties, else the envelope', () => {
    const envelope = { messageId: id, type: 't', key: null, headers: {}, payload: { n: 1 } };
    const amqpMessage = { properties: { messageId: id, headers: {} } };
    expect(messageIdFromRpcContext(new RmqContext([amqpMessage, {}, 'p']), { n: 1 })).toBe(id);
    expect(
      messageIdFromRpcContext(
        new KafkaContext([
          { headers: { [OUTBOX_HEADER_MESSAGE_ID]: id } } as never,
          0,
          'topic',
          {} as never,
          () => Promise.resolve(),
          {} as never,
        ]),
        { n: 1 },
      ),
    ).toBe(id);
    const natsHeaders = nats.headers();
    natsHeaders.set(OUTBOX_HEADER_MESSAGE_ID, id);
    expect(messageIdFromRpcContext(new NatsContext(['subject', natsHeaders]), {})).toBe(id);
    expect(
      messageIdFromRpcContext(
        new MqttContext([
          'topic',
          { properties: { userProperties: { [OUTBOX_HEADER_MESSAGE_ID]: id } } },
        ]),
        {},
      ),
    ).toBe(id);
    // MQTT 3.1.1, NATS without headers, TCP and Redis: the envelope that is the data.
    expect(messageIdFromRpcContext(new MqttContext(['topic', {}]), envelope)).toBe(id);
    expect(messageIdFromRpcContext(new NatsContext(['subject', undefined]), envelope)).toBe(id);
    expect(messageIdFromRpcContext(new TcpContext([{} as never, 'p']), envelope)).toBe(id);
    expect(messageIdFromRpcContext(new RedisContext(['channel']), envelope)).toBe(id);
    // A business payload that merely has a messageId field is not an envelope.
    expect(() =>
      messageIdFromRpcContext(new TcpContext([{} as never, 'p']), { messageId: 'not-ours' }),
    ).toThrow(MessageIdMissingError);
    expect(() => messageIdFromRpcContext(new RmqContext([{ properties: {} }, {}, 'p']))).toThrow(
      MessageIdMissingError,
    );
  });
});

function inboxSuite(db: TestDatabase): void {
  const services: ServiceName[] = db.service === null ? [] : [db.service];
  let ds: DataSource;
  const baseTable = uniqueTable('inbox_ob');
  const created: string[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });

  afterEach(async () => {
    await dropTables(ds, created.splice(0));
  });

  afterAll(async () => {
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  interface Fixture {
    readonly inbox: Inbox;
    readonly inboxTable: string;
    readonly business: string;
    /** Handler runs, by message id, in order. */
    readonly runs: string[];
    /** One delivery of `messageId` to `consumer`: the handler writes one business row. */
    deliver(
      messageId: string,
      consumer?: string,
      target?: DataSource | EntityManager,
    ): Promise<InboxOutcome<string>>;
    effects(): Promise<Effect[]>;
    rows(): Promise<{ consumer: string; messageId: string }[]>;
  }

  async function fixture(): Promise<Fixture> {
    const inboxTable = uniqueTable('inbox_t');
    const business = uniqueTable('inbox_biz');
    created.push(inboxTable, business);
    await ensureInboxTable(ds, { tableName: inboxTable });
    await createBusinessTable(ds, business);
    const inbox = new Inbox(ds, { tableName: inboxTable });
    const runs: string[] = [];
    return {
      inbox,
      inboxTable,
      business,
      runs,
      deliver: (messageId, consumer = CONSUMER, target = ds) =>
        inbox.handleOnce(target, { messageId, consumer }, async (manager) => {
          runs.push(messageId);
          await writeEffect(manager, business, consumer, messageId);
          return `handled ${messageId}`;
        }),
      effects: () => readEffects(ds, business),
      rows: () => readInbox(ds, inboxTable),
    };
  }

  it('a message delivered three times runs its handler once', async () => {
    const f = await fixture();
    const id = randomUUID();
    const outcomes = [await f.deliver(id), await f.deliver(id), await f.deliver(id)];
    expect(outcomes).toEqual([
      { handled: true, result: `handled ${id}` },
      { handled: false },
      { handled: false },
    ]);
    expect(f.runs).toEqual([id]);
    expect(await f.effects()).toEqual([{ consumer: CONSUMER, messageId: id, note: null }]);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: id }]);
  });

  it('a handler that throws records nothing; the redelivery runs it', async () => {
    const f = await fixture();
    const id = randomUUID();
    const failure = new Error('payment service down');
    await expect(
      f.inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, async (manager) => {
        await writeEffect(manager, f.business, CONSUMER, id, 'first attempt');
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await f.effects()).toEqual([]);
    expect(await f.rows()).toEqual([]);

    await expect(f.deliver(id)).resolves.toEqual({ handled: true, result: `handled ${id}` });
    expect(await f.effects()).toEqual([{ consumer: CONSUMER, messageId: id, note: null }]);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: id }]);
  });

  it('two consumer names each handle the message once', async () => {
    const f = await fixture();
    const id = randomUUID();
    expect((await f.deliver(id, 'billing')).handled).toBe(true);
    expect((await f.deliver(id, 'shipping')).handled).toBe(true);
    expect((await f.deliver(id, 'billing')).handled).toBe(false);
    expect((await f.deliver(id, 'shipping')).handled).toBe(false);
    expect(await f.effects()).toEqual([
      { consumer: 'billing', messageId: id, note: null },
      { consumer: 'shipping', messageId: id, note: null },
    ]);
    expect(await f.rows()).toEqual([
      { consumer: 'billing', messageId: id },
      { consumer: 'shipping', messageId: id },
    ]);
  });

  it('ids are compared exactly: trailing spaces and case make different messages', async () => {
    const f = await fixture();
    const base = `Order-${randomUUID()}`;
    for (const id of [base, `${base} `, base.toLowerCase()]) {
      expect((await f.deliver(id)).handled).toBe(true);
    }
    expect((await f.deliver(base)).handled).toBe(false);
    expect(await f.effects()).toHaveLength(3);
  });

  it('a message re-sent across a Debezium cut-over (32 hex digits, then UUID text) is handled once', async () => {
    const f = await fixture();
    const id = randomUUID();
    // Debezium's router on a MySQL/MariaDB table (message_id BINARY(16)), then KafkaPublisher.
    const fromDebezium = messageIdFromKafka({
      headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(id.replace(/-/g, '')) },
    });
    const fromPublisher = messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: id } });
    const fromRabbitMq = messageIdFromAmqp({ properties: { messageId: id.toUpperCase() } });
    expect((await f.deliver(fromDebezium)).handled).toBe(true);
    expect((await f.deliver(fromPublisher)).handled).toBe(false);
    expect((await f.deliver(fromRabbitMq)).handled).toBe(false);
    expect(await f.effects()).toEqual([{ consumer: CONSUMER, messageId: id, note: null }]);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: id }]);
  });

  /** Starts a delivery whose handler writes, then waits for `gate`; resolves once it is inside. */
  async function heldDelivery(
    f: Fixture,
    id: string,
    gate: Gate,
  ): Promise<Tracked<InboxOutcome<string>>> {
    const entered = new Gate();
    const held = track(
      f.inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, async (manager) => {
        f.runs.push(id);
        await writeEffect(manager, f.business, CONSUMER, id, 'first');
        entered.open();
        await gate.promise;
        return 'first';
      }),
    );
    await Promise.race([entered.promise, held.promise]);
    return held;
  }

  /** Starts the concurrent duplicate and returns once it is provably waiting for the first. */
  async function waitingDuplicate(f: Fixture, id: string): Promise<Tracked<InboxOutcome<string>>> {
    const second = track(
      f.inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, async (manager) => {
        f.runs.push(id);
        await writeEffect(manager, f.business, CONSUMER, id, 'second');
        return 'second';
      }),
    );
    if (db.name === 'sqlite') {
      // The inbox queues its SQLite transactions; nothing of the second may run meanwhile.
      await sleep(300);
    } else {
      await waitUntilBlocked(ds, f.inboxTable);
    }
    expect(second.settled()).toBe(false);
    expect(f.runs).toHaveLength(1);
    return second;
  }

  it('a concurrent duplicate waits for the first delivery, then is skipped when it commits', async () => {
    const f = await fixture();
    const id = randomUUID();
    const gate = new Gate();
    const first = await heldDelivery(f, id, gate);
    // Whatever happens, end the held transaction: an open one would block the table's DROP.
    const second = await waitingDuplicate(f, id).finally(() => gate.open());
    await expect(first.promise).resolves.toEqual({ handled: true, result: 'first' });
    await expect(second.promise).resolves.toEqual({ handled: false });
    expect(f.runs).toEqual([id]);
    expect(await f.effects()).toEqual([{ consumer: CONSUMER, messageId: id, note: 'first' }]);
  });

  it('a concurrent duplicate runs the handler when the first delivery rolls back', async () => {
    const f = await fixture();
    const id = randomUUID();
    const gate = new Gate();
    const first = await heldDelivery(f, id, gate);
    const second = await waitingDuplicate(f, id).finally(() =>
      gate.fail(new Error('first delivery failed')),
    );
    await expect(first.promise).rejects.toThrow('first delivery failed');
    await expect(second.promise).resolves.toEqual({ handled: true, result: 'second' });
    expect(f.runs).toEqual([id, id]);
    expect(await f.effects()).toEqual([{ consumer: CONSUMER, messageId: id, note: 'second' }]);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: id }]);
  });

  it('eight simultaneous deliveries of one id run the handler exactly once', async () => {
    const f = await fixture();
    const id = randomUUID();
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, () =>
        f.inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, async (manager) => {
          f.runs.push(id);
          await writeEffect(manager, f.business, CONSUMER, id);
          await sleep(50); // hold the row lock while the others arrive
          return 'ran';
        }),
      ),
    );
    expect(outcomes.filter((o) => o.handled)).toHaveLength(1);
    expect(f.runs).toEqual([id]);
    expect(await f.effects()).toHaveLength(1);
  });

  it("joins the caller's transaction: an outer rollback leaves neither the effect nor the id", async () => {
    const f = await fixture();
    const id = randomUUID();
    await expect(
      ds.transaction(async (manager) => {
        expect((await f.deliver(id, CONSUMER, manager)).handled).toBe(true);
        throw new Error('the caller rolls back');
      }),
    ).rejects.toThrow('the caller rolls back');
    expect(await f.effects()).toEqual([]);
    expect(await f.rows()).toEqual([]);
    expect((await f.deliver(id)).handled).toBe(true);
    expect(await f.effects()).toHaveLength(1);
  });

  it('a throwing handler is rolled back to its savepoint even when the caller catches and commits', async () => {
    const f = await fixture();
    const id = randomUUID();
    await ds.transaction(async (manager) => {
      await writeEffect(manager, f.business, 'caller', 'own-row');
      await expect(
        f.inbox.handleOnce(manager, { messageId: id, consumer: CONSUMER }, async (tx) => {
          await writeEffect(tx, f.business, CONSUMER, id);
          throw new Error('handler failed');
        }),
      ).rejects.toThrow('handler failed');
    });
    expect(await f.effects()).toEqual([{ consumer: 'caller', messageId: 'own-row', note: null }]);
    expect(await f.rows()).toEqual([]);
  });

  it('purge() deletes ids older than the given age (database clock) in batches; a purged id is new again', async () => {
    const f = await fixture();
    const old = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of old) await f.deliver(id);
    await sleep(1_200);
    const fresh = randomUUID();
    await f.deliver(fresh);

    expect(await f.inbox.purge(600, { batchSize: 2 })).toBe(3);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: fresh }]);
    expect(await f.inbox.purge(60_000)).toBe(0);
    // The trade-off of purging: a redelivery after the horizon runs the handler again.
    expect((await f.deliver(old[0] as string)).handled).toBe(true);
    await expect(f.inbox.purge(-1)).rejects.toBeInstanceOf(OutboxOptionsError);
  });

  it('refuses unsafe table names, unusable ids and foreign managers before writing anything', async () => {
    const f = await fixture();
    expect(() => new Inbox(ds, { tableName: 'inbox; DROP TABLE users' })).toThrow(
      OutboxOptionsError,
    );
    expect(() => new Inbox(ds, { tableName: 'a'.repeat(49) })).toThrow(/at most 48 characters/);
    expect(() => new Inbox(ds, { schema: 'bad-schema' })).toThrow(/Invalid Inbox option "schema"/);

    const cases: [string, string, string][] = [
      ['', CONSUMER, 'messageId'],
      ['x'.repeat(256), CONSUMER, 'messageId'],
      ['é'.repeat(128), CONSUMER, 'messageId'], // 256 UTF-8 bytes
      ['nul\u0000id', CONSUMER, 'messageId'],
      [randomUUID(), '', 'consumer'],
      [randomUUID(), 'c'.repeat(129), 'consumer'],
    ];
    for (const [messageId, consumer, field] of cases) {
      await expect(f.deliver(messageId, consumer)).rejects.toMatchObject({
        name: 'InvalidInboxEntryError',
        field,
      });
    }
    await expect(f.deliver('', CONSUMER)).rejects.toBeInstanceOf(InvalidInboxEntryError);

    const other = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
    await expect(f.deliver(randomUUID(), CONSUMER, other)).rejects.toThrow(OutboxError);
    await expect(f.deliver(randomUUID(), CONSUMER, other.manager)).rejects.toThrow(
      /belongs to another DataSource/,
    );
    expect(f.runs).toEqual([]);
    expect(await f.rows()).toEqual([]);

    // The largest accepted id fits the key column on every database.
    const longest = `${'é'.repeat(127)}a`; // 255 bytes
    expect((await f.deliver(longest)).handled).toBe(true);
    expect((await f.deliver(longest)).handled).toBe(false);
    expect(await f.rows()).toEqual([{ consumer: CONSUMER, messageId: longest }]);
  });

  it('createInboxMigration() creates the table (up) and drops it (down)', async () => {
    const table = uniqueTable('inbox_m');
    created.push(table);
    const Migration = createInboxMigration({ tableName: table });
    const runner = ds.createQueryRunner();
    try {
      await new Migration().up(runner);
      const inbox = new Inbox(ds, { tableName: table });
      const id = randomUUID();
      const handler = (): Promise<string> => Promise.resolve('ok');
      expect(await inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, handler)).toEqual({
        handled: true,
        result: 'ok',
      });
      expect(await inbox.handleOnce(ds, { messageId: id, consumer: CONSUMER }, handler)).toEqual({
        handled: false,
      });
      await new Migration().down(runner);
      expect(await runner.hasTable(table)).toBe(false);
    } finally {
      await runner.release();
    }
    expect(() => createInboxMigration({ tableName: 'no spaces' })).toThrow(OutboxOptionsError);
  });

  it('InboxModule: forRoot() injects the default @nestjs/typeorm DataSource; forRootAsync() takes one from its factory', async () => {
    const f = await fixture();
    const id = randomUUID();
    const withTypeOrm = await Test.createTestingModule({
      imports: [
        // A DataSource of its own to the same database, registered the usual way.
        TypeOrmModule.forRoot({ ...ds.options, entities: [], synchronize: false }),
        InboxModule.forRoot({ tableName: f.inboxTable, isGlobal: false }),
      ],
    }).compile();
    await withTypeOrm.init();
    try {
      const service = withTypeOrm.get(InboxService);
      expect(service.dataSource).not.toBe(ds);
      expect(service.dataSource.isInitialized).toBe(true);
      const outcome = await service.handleOnce(
        service.dataSource,
        { messageId: id, consumer: CONSUMER },
        (manager) => writeEffect(manager, f.business, CONSUMER, id, 'via InboxModule.forRoot'),
      );
      expect(outcome).toEqual({ handled: true, result: undefined });
    } finally {
      await withTypeOrm.close();
    }

    const withFactory = await Test.createTestingModule({
      imports: [
        InboxModule.forRootAsync({
          isGlobal: false,
          useFactory: () => ({ dataSource: ds, tableName: f.inboxTable }),
        }),
      ],
    }).compile();
    const service = withFactory.get(InboxService);
    expect(service.dataSource).toBe(ds);
    // The same table: the message handled through the first module is a duplicate here.
    const again = await service.handleOnce(ds, { messageId: id, consumer: CONSUMER }, () =>
      Promise.reject(new Error('a duplicate must not run the handler')),
    );
    expect(again).toEqual({ handled: false });
    expect(await f.effects()).toEqual([
      { consumer: CONSUMER, messageId: id, note: 'via InboxModule.forRoot' },
    ]);
    await withFactory.close();
    expect(() => InboxModule.forRoot({ dataSource: ' ' })).toThrow(OutboxOptionsError);
  });

  // ---- End to end: the outbox publishes, a real broker delivers, the inbox deduplicates ----

  interface DeliveringOutbox extends OutboxApp<OutboxPublisher> {
    /** Dispatches until no message of the table is pending. */
    drain(): Promise<void>;
  }

  /** An outbox on a fresh table of its own, driven by hand; `close()` drops the table. */
  async function startOutbox(publisher: OutboxPublisher): Promise<DeliveringOutbox> {
    const app = await openOutbox(ds, {
      publisher,
      tablePrefix: 'inbox_obx',
      options: {
        isGlobal: false,
        dispatcher: { listen: false, pollIntervalMs: 50, publishTimeoutMs: 5_000 },
      },
    });
    return Object.assign(app, {
      drain: async (): Promise<void> => {
        await waitFor(
          'the outbox to deliver everything',
          async () => {
            await app.dispatcher.drain();
            const stats = await app.outbox.stats();
            return stats.pending === 0 && stats.leased === 0;
          },
          { timeoutMs: 30_000, intervalMs: 20 },
        );
      },
    });
  }

  const orders = (topic: string, count: number): OutboxMessage[] =>
    Array.from({ length: count }, (_, n) => ({
      topic,
      key: `order-${n}`,
      type: 'order.created',
      payload: { orderId: `order-${n}`, total: 10 + n },
    }));

  const sorted = (ids: readonly string[]): string[] => [...ids].sort();

  describeWith(
    [...services, 'rabbitmq'],
    'end to end: RabbitMqPublisher → RabbitMQ → amqplib',
    () => {
      it('a message RabbitMQ redelivers after a lost ack, and one the outbox publishes twice, take effect once', async () => {
        const f = await fixture();
        const queue = uniqueName('q');
        // Two of the five messages reach the broker twice (a publish retried after a lost confirm).
        const twice = new Set(['order-0', 'order-1']);
        const h = await startOutbox(
          new DuplicatingPublisher(
            new RabbitMqPublisher({
              url: RABBITMQ_URL,
              assertTopology: async (channel) => {
                await channel.assertQueue(queue, { durable: true });
              },
            }),
            (record) => twice.has(record.key ?? ''),
          ),
        );
        const connection = await amqp.connect(RABBITMQ_URL);
        try {
          const ids = await h.enqueue(orders(queue, 5));
          await h.drain();

          const channel = await connection.createChannel();
          await channel.prefetch(10);
          const deliveries: { messageId: string; redelivered: boolean; handled: boolean }[] = [];
          const errors: unknown[] = [];
          const onMessage = async (msg: amqp.ConsumeMessage): Promise<void> => {
            const messageId = messageIdFromAmqp(msg);
            const outcome = await f.inbox.handleOnce(
              ds,
              { messageId, consumer: CONSUMER },
              (manager) =>
                writeEffect(manager, f.business, CONSUMER, messageId, msg.content.toString()),
            );
            deliveries.push({
              messageId,
              redelivered: msg.fields.redelivered,
              handled: outcome.handled,
            });
            // On a first delivery the work commits but the ack is "lost" (nack + requeue, as when
            // a consumer dies before acking): RabbitMQ delivers the message again.
            if (msg.fields.redelivered) channel.ack(msg);
            else channel.nack(msg, false, true);
          };
          await channel.consume(queue, (msg) => {
            if (msg !== null) onMessage(msg).catch((error: unknown) => errors.push(error));
          });
          // 7 copies on the broker (5 + 2 duplicates), each delivered twice.
          await waitFor('14 deliveries', () => deliveries.length >= 14, { timeoutMs: 20_000 });
          await sleep(300);

          expect(errors).toEqual([]);
          expect(deliveries).toHaveLength(14);
          expect(
            deliveries
              .filter((d) => d.handled)
              .map((d) => d.messageId)
              .sort(),
          ).toEqual(sorted(ids));
          expect(deliveries.filter((d) => d.redelivered).every((d) => !d.handled)).toBe(true);
          const effects = await f.effects();
          expect(effects.map((e) => e.messageId)).toEqual(sorted(ids));
          expect(effects.map((e) => JSON.parse(e.note ?? 'null') as unknown)).toEqual(
            expect.arrayContaining([{ orderId: 'order-0', total: 10 }]),
          );
          expect(await f.rows()).toHaveLength(5);
          await channel.deleteQueue(queue);
        } finally {
          await connection.close().catch(() => undefined);
          await h.close();
        }
      });
    },
  );

  describeWith([...services, 'kafka'], 'end to end: KafkaPublisher → Kafka → kafkajs', () => {
    it('a consumer that restarts before committing offsets re-reads every record; each takes effect once', async () => {
      const f = await fixture();
      const topic = uniqueName('topic');
      const kafka = new Kafka({
        brokers: KAFKA_BROKERS,
        clientId: 'inbox-it',
        logLevel: logLevel.NOTHING,
      });
      const admin = kafka.admin();
      await admin.connect();
      const consumers: Consumer[] = [];
      // One of the five messages reaches Kafka twice (a publish retried after a lost answer).
      const h = await startOutbox(
        new DuplicatingPublisher(
          new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'inbox-it' }),
          (record) => record.key === 'order-0',
        ),
      );
      try {
        await admin.createTopics({
          topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
          waitForLeaders: true,
        });
        const ids = await h.enqueue(orders(topic, 5));
        await h.drain();

        const groupId = uniqueName('group');
        const seen: { run: number; messageId: string; handled: boolean }[] = [];
        const errors: unknown[] = [];
        const startConsumer = async (run: number): Promise<Consumer> => {
          const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100 });
          consumers.push(consumer);
          await consumer.connect();
          await consumer.subscribe({ topic, fromBeginning: true });
          await consumer.run({
            // Offsets are never committed: the next consumer of the group starts over, as
            // after a crash between processing and committing.
            autoCommit: false,
            eachMessage: async (payload) => {
              try {
                const messageId = messageIdFromKafka(payload);
                const outcome = await f.inbox.handleOnce(
                  ds,
                  { messageId, consumer: CONSUMER },
                  (manager) =>
                    writeEffect(
                      manager,
                      f.business,
                      CONSUMER,
                      messageId,
                      payload.message.value?.toString() ?? null,
                    ),
                );
                seen.push({ run, messageId, handled: outcome.handled });
              } catch (error) {
                errors.push(error);
                throw error;
              }
            },
          });
          return consumer;
        };

        const first = await startConsumer(1);
        await waitFor('six records at the first consumer', () => seen.length >= 6, {
          timeoutMs: 60_000,
        });
        await first.disconnect();
        await startConsumer(2);
        await waitFor(
          'six records again at the restarted consumer',
          () => seen.filter((s) => s.run === 2).length >= 6,
          { timeoutMs: 60_000 },
        );
        await sleep(300);

        expect(errors).toEqual([]);
        const run1 = seen.filter((s) => s.run === 1);
        const run2 = seen.filter((s) => s.run === 2);
        expect(run1).toHaveLength(6);
        expect(
          run1
            .filter((s) => s.handled)
            .map((s) => s.messageId)
            .sort(),
        ).toEqual(sorted(ids));
        expect(run2).toHaveLength(6);
        expect(run2.every((s) => !s.handled)).toBe(true);
        expect((await f.effects()).map((e) => e.messageId)).toEqual(sorted(ids));
        expect(await f.rows()).toHaveLength(5);
      } finally {
        await Promise.all(consumers.map((c) => c.disconnect().catch(() => undefined)));
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.disconnect();
        await h.close();
      }
    });
  });

  describe('end to end: ClientProxyPublisher → a Nest microservice handler with InboxModule', () => {
    beforeAll(() => {
      // Nest clients log expected connection chatter; the assertions say what matters.
      Logger.overrideLogger(['fatal']);
    });

    async function nestScenario(
      transport: Parameters<typeof startNestInboxConsumer>[0]['transport'],
      client: ClientRMQ | ClientTCP,
      topic: string,
      expectedContext: string,
      /** The business payload within what the handler got as `@Payload()`. */
      payloadOf: (data: unknown) => unknown,
    ): Promise<void> {
      const f = await fixture();
      const consumer = await startNestInboxConsumer({
        transport,
        pattern: topic,
        dataSource: ds,
        inboxTable: f.inboxTable,
        businessTable: f.business,
        consumer: 'nest-billing',
      });
      // Every message reaches the consumer twice, with the same id.
      const h = await startOutbox(
        new DuplicatingPublisher(new ClientProxyPublisher(client, { timeoutMs: 5_000 })),
      );
      try {
        const ids = await h.enqueue(orders(topic, 3));
        await h.drain();
        const seen = await consumer.seen.settle(6, 300, 20_000);

        expect(consumer.errors).toEqual([]);
        expect(seen).toHaveLength(6);
        expect(seen.every((s) => s.context === expectedContext)).toBe(true);
        expect(
          seen
            .filter((s) => s.handled)
            .map((s) => s.messageId)
            .sort(),
        ).toEqual(sorted(ids));
        const effects = await f.effects();
        expect(effects.map((e) => e.messageId)).toEqual(sorted(ids));
        expect(effects.every((e) => e.consumer === 'nest-billing')).toBe(true);
        expect(effects.map((e) => payloadOf(JSON.parse(e.note ?? 'null')))).toEqual(
          expect.arrayContaining([{ orderId: 'order-2', total: 12 }]),
        );
      } finally {
        await h.close();
        await Promise.resolve(client.close()).catch(() => undefined);
        await consumer.close();
      }
    }

    describeWith([...services, 'rabbitmq'], 'RMQ transport (RmqContext)', () => {
      it('a message published twice is handled once; the id comes from the AMQP message', async () => {
        const queue = uniqueName('nest-q');
        const options = { urls: [RABBITMQ_URL], queue, queueOptions: { durable: true } };
        try {
          await nestScenario(
            { transport: Transport.RMQ, options: { ...options, noAck: false } },
            new ClientRMQ(options),
            queue,
            'RmqContext',
            (data) => data, // RMQ: the payload itself; the id travels as an AMQP property
          );
        } finally {
          const connection = await amqp.connect(RABBITMQ_URL);
          const channel = await connection.createChannel();
          await channel.deleteQueue(queue).catch(() => undefined);
          await connection.close().catch(() => undefined);
        }
      });
    });

    describeWith(services, 'TCP transport (TcpContext + envelope)', () => {
      it('a message published twice is handled once; the id comes from the envelope', async () => {
        const port = await freePort();
        await nestScenario(
          { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
          new ClientTCP({ host: '127.0.0.1', port }),
          uniqueName('tcp'),
          'TcpContext',
          (data) => (data as OutboxEnvelope).payload, // TCP: the envelope
        );
      });
    });
  });
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `Inbox on ${db.name}`, () =>
    inboxSuite(db),
  );
}

describeWith(
  ['postgres', 'rabbitmq'],
  "the README's amqplib inbox consumer and a message it can never handle",
  () => {
    it('rejects a message whose id is over 255 bytes once, without requeue, instead of looping', async () => {
      const db = testDatabase('postgres');
      const outboxTable = uniqueTable('outbox_ib');
      const ds = await db.open(outboxTable);
      const inboxTable = uniqueTable('inbox_poison');
      await ensureInboxTable(ds, { tableName: inboxTable });
      const inbox = new Inbox(ds, { tableName: inboxTable });
      const queue = `q-inbox-poison-${randomUUID()}`;
      const connection = await amqp.connect(RABBITMQ_URL);
      try {
        const channel = await connection.createChannel();
        await channel.assertQueue(queue, { durable: false, autoDelete: false });
        let deliveries = 0;
        const rejected: unknown[] = [];
        // The README's handler, as written there (its business write aside).
        const handle = async (message: amqp.ConsumeMessage): Promise<void> => {
          deliveries += 1;
          try {
            JSON.parse(message.content.toString());
            await inbox.handleOnce(
              ds,
              { messageId: messageIdFromAmqp(message), consumer: 'billing.order-created' },
              () => Promise.resolve(),
            );
            channel.ack(message);
          } catch (error) {
            const permanent = isPermanentInboxError(error) || error instanceof SyntaxError;
            if (permanent) rejected.push(error);
            channel.nack(message, false, !permanent);
          }
        };
        await channel.consume(queue, (message) => {
          if (message !== null) void handle(message);
        });
        channel.sendToQueue(queue, Buffer.from('{"orderId":"o-1","total":1}'), {
          headers: { [OUTBOX_HEADER_MESSAGE_ID]: 'x'.repeat(300) },
        });
        await waitFor('the first delivery', () => deliveries > 0, { timeoutMs: 20_000 });
        // A requeued message comes back within milliseconds; give it a second to show up.
        await sleep(1_000);
        expect(deliveries).toBe(1);
        expect(rejected).toHaveLength(1);
        expect(rejected[0]).toBeInstanceOf(InvalidInboxEntryError);
        await channel.deleteQueue(queue);
      } finally {
        await connection.close().catch(() => undefined);
        await ds.query(`DROP TABLE IF EXISTS "${inboxTable}"`);
        await db.close(ds, outboxTable);
      }
    });
  },
);
