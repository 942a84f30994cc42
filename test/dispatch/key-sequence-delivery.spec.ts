import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { connect, type ChannelModel } from 'amqplib';
import type { DataSource } from 'typeorm';
import {
  OUTBOX_HEADER_SEQUENCE,
  OnOutboxMessage,
  OutboxModule,
  OutboxService,
  type OutboxHandlerMessage,
} from '../../lib';
import { pgOutbox, pgSqlPort, type PgPoolClient } from '../../lib/connections/pg';
import { createOutboxTable, outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import { pgPool, type PgPoolForTests } from '../connections/driver-targets';
import { ensureInboxTable, Inbox, inboxTableDropDdl, sequenceOf } from '../../lib/inbox';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { outboxDialectOf } from '../../lib/store/schema/outbox-table-ddl';
import { TEST_DATABASES, testDatabase, uniqueTable } from '../support/databases';
import { allSettled, dispatchUntil, openOutboxHarness } from '../support/outbox-harness';
import { describeWith, SERVICES } from '../support/services';
import { waitFor } from '../support/wait-for';
import { openLocalApp, type LocalApp } from '../local/local-app';

// The sequence number on its way to consumers: through a real RabbitMQ to an amqplib consumer
// whose inbox checks it, and to an in-process handler.

const RABBITMQ_URL = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

for (const db of TEST_DATABASES.filter((d) => d.service !== null)) {
  describeWith(
    [db.service ?? 'postgres', 'rabbitmq'],
    `key sequence over RabbitMQ (${db.name})`,
    () => {
      let ds: DataSource;
      let amqp: ChannelModel | undefined;
      const baseTable = uniqueTable('outbox_seqr');
      const inboxTable = uniqueTable('inbox_seqr');
      const queue = `seq-${randomUUID()}`;

      beforeAll(async () => {
        ds = await db.open(baseTable);
        await ensureInboxTable(ds, { tableName: inboxTable });
      });

      afterAll(async () => {
        if (amqp !== undefined) {
          const ch = await amqp.createChannel();
          await ch.deleteQueue(queue);
          await amqp.close();
        }
        if (ds === undefined) return;
        for (const sql of inboxTableDropDdl(outboxDialectOf(ds.options.type), {
          tableName: inboxTable,
        })) {
          await ds.query(sql);
        }
        await db.close(ds, baseTable);
      });

      it('carries x-outbox-sequence to the consumer, whose inbox finds every key in order with no gap', async () => {
        const publisher = new RabbitMqPublisher({
          url: RABBITMQ_URL,
          assertTopology: async (channel) => {
            await channel.assertQueue(queue, { durable: true });
          },
        });
        const h = await openOutboxHarness(
          ds,
          publisher,
          { ordering: { sequence: true } },
          'outbox_seqr',
        );
        try {
          amqp = await connect(RABBITMQ_URL);
          const ch = await amqp.createChannel();
          await ch.assertQueue(queue, { durable: true });
          const inbox = new Inbox(ds, { tableName: inboxTable });
          const seen: string[] = [];
          const numbers: string[] = [];
          // One message at a time, as a consumer that keeps per-key order would.
          await ch.prefetch(1);
          await ch.consume(queue, (message) => {
            if (message === null) return;
            const headers = (message.properties.headers ?? {}) as Record<string, unknown>;
            const sequence = sequenceOf(headers);
            numbers.push(
              `${sequence?.key ?? '-'}:${sequence === null ? '-' : String(sequence.sequence)}`,
            );
            void inbox
              .handleOnce(
                ds,
                { consumer: 'seq-test', messageId: String(message.properties.messageId), sequence },
                (_tx, context) => Promise.resolve(context.sequence?.status ?? 'none'),
              )
              .then(
                (outcome) => {
                  seen.push(outcome.handled ? outcome.result : 'skipped');
                  ch.ack(message);
                },
                () => ch.nack(message),
              );
          });
          for (let tx = 0; tx < 5; tx++) {
            await h.enqueue([
              { topic: queue, key: 'a', type: 't', payload: { tx } },
              { topic: queue, key: 'b', type: 't', payload: { tx } },
              { topic: queue, key: null, type: 't', payload: { tx } },
            ]);
          }
          await dispatchUntil(h, 'all delivered', allSettled(h));
          await waitFor('15 messages handled', () => seen.length >= 15, { timeoutMs: 20_000 });
          const of = (key: string) => numbers.filter((n) => n.startsWith(`${key}:`));
          expect(of('a')).toEqual(['a:1', 'a:2', 'a:3', 'a:4', 'a:5']);
          expect(of('b')).toEqual(['b:1', 'b:2', 'b:3', 'b:4', 'b:5']);
          expect(of('-')).toEqual(Array.from({ length: 5 }, () => '-:-'));
          expect(seen.filter((s) => s === 'next')).toHaveLength(10);
          expect(seen.filter((s) => s === 'none')).toHaveLength(5);
        } finally {
          await h.close();
        }
      });
    },
  );
}

const received: OutboxHandlerMessage[] = [];

@Injectable()
class SequenceHandler {
  @OnOutboxMessage({ topic: 'seq.local' })
  handle(message: OutboxHandlerMessage): Promise<void> {
    received.push(message);
    return Promise.resolve();
  }
}

describeWith(['postgres'], 'key sequence to an in-process handler (postgres)', () => {
  const db = testDatabase('postgres');
  let ds: DataSource;
  let app: LocalApp | undefined;
  const baseTable = uniqueTable('outbox_seql');

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });
  afterAll(async () => {
    await app?.close();
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  it('hands the handler each keyed message with its number in its headers', async () => {
    app = await openLocalApp(ds, {
      handlers: [SequenceHandler],
      options: { ordering: { sequence: true } },
    });
    await app.commit([
      { topic: 'seq.local', key: 'k', type: 't', payload: {} },
      { topic: 'seq.local', key: 'k', type: 't', payload: {} },
    ]);
    await app.commit([{ topic: 'seq.local', key: 'k', type: 't', payload: {} }]);
    await app.runUntilIdle();
    expect(received.map((m) => [m.key, m.headers[OUTBOX_HEADER_SEQUENCE]])).toEqual([
      ['k', '1'],
      ['k', '2'],
      ['k', '3'],
    ]);
  });
});

// Every connection enqueues through the store's insert, and so numbers: one without TypeORM.
describeWith(['postgres'], 'key sequence on node-postgres (pgOutbox)', () => {
  const table = uniqueTable('outbox_seqpg');
  let pool: PgPoolForTests;

  beforeAll(async () => {
    pool = pgPool(4);
    await createOutboxTable(pgSqlPort(pool), { tableName: table, with: ['sequence'] });
  });
  afterAll(async () => {
    for (const statement of outboxTableDropDdl('postgres', { tableName: table })) {
      await pool.query(statement);
    }
    await pool.end();
  });

  it('numbers keyed messages enqueued with a PoolClient; a rolled-back transaction burns nothing', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({
          connection: pgOutbox(pool),
          tableName: table,
          workers: false,
          ordering: { sequence: true },
        }),
      ],
    }).compile();
    await moduleRef.init();
    try {
      const outbox = moduleRef.get<OutboxService<PgPoolClient>>(OutboxService);
      const inTransaction = async (rollback: boolean): Promise<void> => {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await outbox.enqueue([{ topic: 't', key: 'k', type: 'e', payload: {} }], client);
          await client.query(rollback ? 'ROLLBACK' : 'COMMIT');
        } finally {
          client.release();
        }
      };
      await inTransaction(false);
      await inTransaction(true);
      await inTransaction(false);
      const { rows } = (await pool.query(
        `SELECT key_seq::text, headers FROM "${table}" ORDER BY id`,
      )) as { rows: readonly { key_seq: string; headers: Record<string, string> }[] };
      expect(rows.map((r) => [r.key_seq, r.headers[OUTBOX_HEADER_SEQUENCE]])).toEqual([
        ['1', '1'],
        ['2', '2'],
      ]);
    } finally {
      await moduleRef.close();
    }
  });
});
