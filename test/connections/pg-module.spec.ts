import type { EventEmitter } from 'node:events';
import { Test, type TestingModule } from '@nestjs/testing';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import {
  OutboxAdmin,
  OutboxError,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
  OutboxTransactionRequiredError,
  type OutboxModuleExtras,
  type OutboxModuleOptions,
} from '../../lib';
import { createOutboxTable, outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import { pgOutbox, pgSqlPort, type PgPoolClient } from '../../lib/connections/pg';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { uniqueTable } from '../support/databases';
import { describeWith, SERVICES } from '../support/services';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { pgPool, type PgPoolForTests } from './driver-targets';

// An app with no TypeORM: OutboxModule on a plain node-postgres pool (`connection:
// pgOutbox(pool)`), messages enqueued with the PoolClient of the app's own BEGIN … COMMIT, and
// delivered by the real dispatcher to a real RabbitMQ queue.

const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

describeWith(['postgres', 'rabbitmq'], 'OutboxModule on node-postgres (nestjs-outbox/pg)', () => {
  const table = uniqueTable('outbox_pg');
  const orders = uniqueTable('orders_pg');
  let admin: PgPoolForTests;
  let amqp: ChannelModel;
  let channel: Channel;
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    admin = pgPool(2);
    await createOutboxTable(pgSqlPort(admin), { tableName: table });
    await admin.query(`CREATE TABLE ${orders} (id text PRIMARY KEY)`);
    amqp = await connect(RABBITMQ_URL);
    amqp.on('error', () => undefined);
    channel = await amqp.createChannel();
  });

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  afterAll(async () => {
    await channel?.close().catch(() => undefined);
    await amqp?.close().catch(() => undefined);
    for (const statement of outboxTableDropDdl('postgres', { tableName: table })) {
      await admin.query(statement);
    }
    await admin.query(`DROP TABLE IF EXISTS ${orders}`);
    await admin.end();
  });

  /** A queue the test reads: the message ids RabbitMQ delivered to it, in order. */
  async function queue(): Promise<{ name: string; received: string[] }> {
    const name = uniqueTable('outbox_pg_q');
    await channel.assertQueue(name, { durable: false, autoDelete: false });
    const received: string[] = [];
    const { consumerTag } = await channel.consume(
      name,
      (message) => {
        if (message !== null) received.push(String(message.properties.messageId));
      },
      { noAck: true },
    );
    cleanups.push(() => channel.cancel(consumerTag).then(() => channel.deleteQueue(name)));
    return { name, received };
  }

  /** The app: OutboxModule on a fresh pool of its own, publishing to RabbitMQ. */
  async function openApp(options: Partial<OutboxModuleOptions> & OutboxModuleExtras = {}): Promise<{
    pool: PgPoolForTests;
    outbox: OutboxService<PgPoolClient>;
    moduleRef: TestingModule;
  }> {
    const pool = pgPool(6);
    const connection = pgOutbox(pool);
    const publisher = new RabbitMqPublisher({ url: RABBITMQ_URL });
    const moduleRef: TestingModule = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({
          connection,
          publisher,
          tableName: table,
          dispatcher: { pollIntervalMs: 200 },
          ...options,
        }),
      ],
    }).compile();
    await moduleRef.init();
    cleanups.push(async () => {
      await moduleRef.close();
      await publisher.close();
      await pool.end();
    });
    return { pool, outbox: moduleRef.get<OutboxService<PgPoolClient>>(OutboxService), moduleRef };
  }

  /** Runs `work` on a client of `pool` between BEGIN and COMMIT (ROLLBACK when `rollback`). */
  async function inTransaction<T>(
    pool: PgPoolForTests,
    work: (client: PgPoolClient) => Promise<T>,
    rollback = false,
  ): Promise<T> {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const value = await work(client);
      await client.query(rollback ? 'ROLLBACK' : 'COMMIT');
      return value;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }

  const rowsOf = async (ids: readonly string[]): Promise<{ id: string; status: string }[]> => {
    const { rows } = await admin.query(
      `SELECT message_id AS id, status FROM ${table} WHERE message_id = ANY($1::uuid[])`,
      [[...ids]],
    );
    return rows as { id: string; status: string }[];
  };
  const orderExists = async (id: string): Promise<boolean> =>
    (await admin.query(`SELECT 1 FROM ${orders} WHERE id = $1`, [id])).rows.length === 1;

  it('delivers a message committed with a business row in the same BEGIN … COMMIT', async () => {
    const q = await queue();
    const { pool, outbox, moduleRef } = await openApp();
    // OutboxAdmin works on the same connection.
    const admin = moduleRef.get(OutboxAdmin);
    const deliveredBefore = (await admin.stats()).delivered;
    const orderId = uniqueTable('order');
    const messageId = await inTransaction(pool, async (client) => {
      await client.query(`INSERT INTO ${orders} (id) VALUES ($1)`, [orderId]);
      return outbox.enqueue({ topic: q.name, key: orderId, payload: { orderId } }, client);
    });

    await waitFor('the message in RabbitMQ', () => q.received.includes(messageId));
    expect(await orderExists(orderId)).toBe(true);
    await waitFor(
      'the row settled as delivered',
      async () => (await rowsOf([messageId]))[0]?.status === 'delivered',
    );
    expect(q.received).toEqual([messageId]);
    expect((await admin.stats()).delivered).toBe(deliveredBefore + 1);
  });

  it('enqueues in the PoolClient an ambientTransaction supplies, and refuses when it supplies none', async () => {
    const q = await queue();
    let current: PgPoolClient | undefined;
    const { pool, outbox } = await openApp({
      ambientTransaction: { currentManager: () => current },
    });
    const inAmbient = (rollback: boolean) =>
      inTransaction(
        pool,
        async (client) => {
          current = client;
          try {
            return await outbox.enqueue({ topic: q.name, payload: { rollback } });
          } finally {
            current = undefined;
          }
        },
        rollback,
      );
    const committed = await inAmbient(false);
    const rolledBack = await inAmbient(true);

    await waitFor('the committed message in RabbitMQ', () => q.received.includes(committed));
    expect(await rowsOf([rolledBack])).toEqual([]);
    const none: unknown = await outbox
      .enqueue({ topic: q.name, payload: {} })
      .catch((e: unknown) => e);
    expect(none).toBeInstanceOf(OutboxTransactionRequiredError);
    expect((none as Error).message).toMatch(/PoolClient you ran BEGIN on/);
    await sleep(500);
    expect(q.received).toEqual([committed]);
  });

  it('writes and publishes nothing when the transaction rolls back', async () => {
    const q = await queue();
    const { pool, outbox } = await openApp();
    const orderId = uniqueTable('order');
    const messageId = await inTransaction(
      pool,
      async (client) => {
        await client.query(`INSERT INTO ${orders} (id) VALUES ($1)`, [orderId]);
        return outbox.enqueue({ topic: q.name, payload: { orderId } }, client);
      },
      true,
    );

    expect(await rowsOf([messageId])).toEqual([]);
    expect(await orderExists(orderId)).toBe(false);
    await expectNever('a publish', () => q.received.length > 0, 1_500);
  });

  it('refuses a client outside a transaction (idle or failed) and one of another pool, writing nothing', async () => {
    const q = await queue();
    const { pool, outbox } = await openApp({ workers: false, publisher: undefined });
    const messageId = '0190a6b2-0000-7000-8000-0000000000a1';
    const client = await pool.connect();
    try {
      // Idle: the INSERT would commit on its own, without the caller's writes.
      await expect(
        outbox.enqueue({ topic: q.name, payload: {}, messageId }, client),
      ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      // Failed ('E'): the transaction can only roll back.
      await client.query('BEGIN');
      await client.query('SELECT 1/0').catch(() => undefined);
      // node-postgres rejects the statement before the server's ReadyForQuery carries 'E'.
      await waitFor('the failed status', () => client.getTransactionStatus?.() === 'E');
      await expect(
        outbox.enqueue({ topic: q.name, payload: {}, messageId }, client),
      ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }

    // A transaction on another pool would commit apart from the outbox's connection.
    const other = pgPool(1);
    try {
      const error = await inTransaction(other, (foreign) =>
        outbox.enqueue({ topic: q.name, payload: {}, messageId }, foreign).then(
          () => undefined,
          (e: unknown) => e,
        ),
      );
      expect(error).toBeInstanceOf(OutboxError);
      expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
      expect((error as Error).message).toMatch(/another pool/);
    } finally {
      await other.end();
    }
    expect(await rowsOf([messageId])).toEqual([]);
  });

  it('publishes one key in commit order: the second transaction waits for the first one’s key lock', async () => {
    const q = await queue();
    const { pool, outbox } = await openApp();
    const key = uniqueTable('key');
    const first = await pool.connect();
    const second = await pool.connect();
    try {
      await first.query('BEGIN');
      await second.query('BEGIN');
      const a = await outbox.enqueue({ topic: q.name, key, payload: { n: 'a' } }, first);
      // The second writer of the key blocks inside enqueue until the first transaction ends.
      let secondDone = false;
      const b = outbox.enqueue({ topic: q.name, key, payload: { n: 'b' } }, second).then((id) => {
        secondDone = true;
        return id;
      });
      await sleep(500);
      expect(secondDone).toBe(false);
      await first.query('COMMIT');
      const bId = await b;
      await second.query('COMMIT');

      await waitFor('both messages in RabbitMQ', () => q.received.length === 2);
      expect(q.received).toEqual([a, bId]);
    } finally {
      await first.query('ROLLBACK').catch(() => undefined);
      await second.query('ROLLBACK').catch(() => undefined);
      first.release();
      second.release();
    }
  });

  it('wakes on LISTEN/NOTIFY at commit instead of waiting for the poll', async () => {
    const q = await queue();
    // Polls a minute apart: only the NOTIFY the enqueue sends can bring the message out soon.
    const { pool, outbox } = await openApp({ dispatcher: { pollIntervalMs: 60_000 } });
    // The dispatcher LISTENs at start, on a channel named after the table.
    await waitFor('the dispatcher to LISTEN', async () => {
      const { rows } = await admin.query(
        `SELECT 1 FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE $1`,
        [`%${table}%`],
      );
      return rows.length > 0;
    });
    await sleep(200); // the first (empty) poll, also at start
    const messageId = await inTransaction(pool, (client) =>
      outbox.enqueue({ topic: q.name, payload: { woke: true } }, client),
    );
    const started = Date.now();
    await waitFor('the message, woken by NOTIFY', () => q.received.includes(messageId), {
      timeoutMs: 10_000,
    });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('with LISTEN off and the same minute-long poll, the message waits for the poll', async () => {
    // The control of the test above: without the NOTIFY nothing else wakes the dispatcher.
    const q = await queue();
    const { pool, outbox } = await openApp({
      dispatcher: { pollIntervalMs: 60_000, listen: false },
    });
    await sleep(1_000);
    const messageId = await inTransaction(pool, (client) =>
      outbox.enqueue({ topic: q.name, payload: { woke: false } }, client),
    );
    await expectNever(
      'a publish before the next poll',
      () => q.received.includes(messageId),
      3_000,
    );
  });

  describe('options', () => {
    const bootstrap = (options: Partial<OutboxModuleOptions>) =>
      Test.createTestingModule({
        imports: [OutboxModule.forRoot({ workers: false, tableName: table, ...options })],
      }).compile();

    it("hears a pool's lost idle connections with one listener however many outboxes share the pool", () => {
      // Several instances (or ports) on one pool: a listener each ran into Node's
      // MaxListenersExceededWarning at eleven.
      const pool = pgPool(1);
      cleanups.push(() => pool.end());
      const listeners = (): number => (pool as unknown as EventEmitter).listenerCount('error');
      const before = listeners();
      for (let i = 0; i < 12; i++) {
        pgSqlPort(pool);
        pgOutbox(pool);
      }
      expect(listeners()).toBe(before + 1);
    });

    it('fails the bootstrap when both dataSource and connection are given', async () => {
      const pool = pgPool(1);
      try {
        const error: unknown = await bootstrap({
          dataSource: 'default',
          connection: pgOutbox(pool),
        })
          .then(() => undefined)
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxOptionsError);
        expect((error as OutboxOptionsError).message).toMatch(/connection.*not both/s);
      } finally {
        await pool.end();
      }
    });

    it('fails the bootstrap when neither dataSource nor connection is given', async () => {
      const error: unknown = await bootstrap({})
        .then(() => undefined)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect((error as OutboxOptionsError).message).toMatch(/neither dataSource nor connection/);
      expect((error as OutboxOptionsError).message).toMatch(/pgOutbox\(pool\)/);
    });

    it('fails the bootstrap when connection is not an OutboxConnection', async () => {
      const error: unknown = await bootstrap({
        connection: { sql: {} } as unknown as OutboxModuleOptions['connection'],
      })
        .then(() => undefined)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect((error as OutboxOptionsError).message).toMatch(/not an OutboxConnection/);
    });

    it('fails the bootstrap on a pool that was ended, saying so, and on one whose server does not answer', async () => {
      const ended = pgPool(1);
      const connection = pgOutbox(ended);
      await ended.end();
      const closed: unknown = await bootstrap({ connection })
        .then(() => undefined)
        .catch((e: unknown) => e);
      expect(closed).toBeInstanceOf(OutboxError);
      expect((closed as Error).message).toMatch(/connection it was given was ended/);

      // Nothing listens on port 1: not a missing table, a database that does not answer.
      const unreachable = pgPool(1, { port: 1 });
      try {
        const refused: unknown = await bootstrap({ connection: pgOutbox(unreachable) })
          .then(() => undefined)
          .catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(OutboxError);
        expect((refused as Error).message).toMatch(/database does not answer \(.*ECONNREFUSED/);
      } finally {
        await unreachable.end();
      }
    });

    it('names the option meant by a misspelt connection', async () => {
      const pool = pgPool(1);
      try {
        const error: unknown = await bootstrap({
          connectoin: pgOutbox(pool),
        } as Partial<OutboxModuleOptions>)
          .then(() => undefined)
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxOptionsError);
        expect((error as OutboxOptionsError).message).toMatch(/did you mean connection/i);
      } finally {
        await pool.end();
      }
    });
  });
});
