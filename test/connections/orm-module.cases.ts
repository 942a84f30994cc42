import { Test, type TestingModule } from '@nestjs/testing';
import { OutboxModule, OutboxService, OutboxTransactionRequiredError } from '../../lib';
import {
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
} from '../../lib/store/schema/outbox-table-ddl';
import type { OutboxConnection } from '../../lib/store/ports/outbox-connection';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { storedId, uniqueTable } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { expectDeliveredToRabbitMq } from './rabbitmq-delivery';
import { messageIdText } from '../../lib/store/rows/message-id-codec';

// What every ORM connection must do inside a real app: OutboxModule booted on the connection,
// messages enqueued in the ORM's own transactions next to a business row, delivered by the real
// dispatcher to a recording publisher, and end to end to a real RabbitMQ queue. One list of
// cases, run by each ORM's module spec on each database.

/** An app's use of one ORM on one database, as its module spec builds it. */
export interface OrmApp<Tx> {
  readonly connection: OutboxConnection<Tx>;
  /** Runs `work` in the ORM's transaction: committed when it resolves, unless `rollback`. */
  inTransaction<T>(work: (tx: Tx) => Promise<T>, rollback?: boolean): Promise<T>;
  /** The business write, through the ORM, in `tx`. */
  insertOrder(tx: Tx, id: string): Promise<void>;
  /** What a careless caller passes instead of a transaction (the ORM's database or manager). */
  readonly notATransaction: Tx;
  close(): Promise<void>;
}

export interface OrmModuleTarget<Tx> {
  readonly name: string;
  readonly services: Parameters<typeof describeWith>[0];
  /** The ORM on its database; `orders` is a table (id text/varchar primary key) to write to. */
  open(orders: string): Promise<OrmApp<Tx>>;
  /** Creates the business table `orders` through `sql`. */
  ordersDdl(orders: string): string;
  /** The business table's name, where the ORM's schema fixes it; a fresh name otherwise. */
  readonly ordersTable?: string;
}

export function ormModuleCases<Tx>(target: OrmModuleTarget<Tx>): void {
  describeWith(target.services, `OutboxModule on ${target.name}`, () => {
    const table = uniqueTable('outbox_orm');
    const orders = target.ordersTable ?? uniqueTable('orders_orm');
    const cleanups: (() => Promise<unknown>)[] = [];
    let app: OrmApp<Tx>;
    let sql: SqlPort;

    beforeAll(async () => {
      app = await target.open(orders);
      sql = app.connection.sql;
      await createOutboxTable(sql, { tableName: table });
      await sql.query(target.ordersDdl(orders));
    });

    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    });

    afterAll(async () => {
      if (sql !== undefined) {
        for (const statement of outboxTableDropDdl(outboxDialectOf(sql.databaseType), {
          tableName: table,
        })) {
          await sql.query(statement);
        }
        await sql.query(`DROP TABLE IF EXISTS ${orders}`);
      }
      await app?.close();
    });

    const placeholder = (n: number): string => (sql.databaseType === 'postgres' ? `$${n}` : '?');

    async function boot(): Promise<{ outbox: OutboxService<Tx>; publisher: RecordingPublisher }> {
      const publisher = new RecordingPublisher();
      const moduleRef: TestingModule = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            connection: app.connection,
            publisher,
            tableName: table,
            dispatcher: { pollIntervalMs: 100 },
          }),
        ],
      }).compile();
      await moduleRef.init();
      cleanups.push(() => moduleRef.close());
      return { outbox: moduleRef.get<OutboxService<Tx>>(OutboxService), publisher };
    }

    const rowsOf = async (ids: readonly string[]): Promise<string[]> => {
      const list = ids.map((_, i) => placeholder(i + 1)).join(', ');
      const { rows } = await sql.query<{ message_id: unknown }>(
        `SELECT message_id FROM ${table} WHERE message_id IN (${list})`,
        ids.map((id) => storedId(sql.databaseType, id)),
      );
      return rows.map((r) => messageIdText(r.message_id));
    };
    const orderExists = async (id: string): Promise<boolean> =>
      (await sql.query(`SELECT id FROM ${orders} WHERE id = ${placeholder(1)}`, [id])).rows
        .length === 1;

    it('delivers a message enqueued in a committed transaction with a business row', async () => {
      const { outbox, publisher } = await boot();
      const orderId = uniqueTable('order');
      const messageId = await app.inTransaction(async (tx) => {
        await app.insertOrder(tx, orderId);
        return outbox.enqueue({ topic: 'orders', key: orderId, payload: { orderId } }, tx);
      });

      await waitFor('the message published', () => publisher.sentIds.includes(messageId));
      expect(await orderExists(orderId)).toBe(true);
      expect(publisher.sentIds).toEqual([messageId]);
      expect(JSON.parse(String(publisher.sent[0]?.payload ?? 'null'))).toEqual({ orderId });
    });

    it('writes and publishes nothing when the transaction rolls back', async () => {
      const { outbox, publisher } = await boot();
      const orderId = uniqueTable('order');
      const messageId = await app.inTransaction(async (tx) => {
        await app.insertOrder(tx, orderId);
        return outbox.enqueue({ topic: 'orders', payload: { orderId } }, tx);
      }, true);

      expect(await rowsOf([messageId])).toEqual([]);
      expect(await orderExists(orderId)).toBe(false);
      await expectNever('a publish', () => publisher.sentIds.length > 0, 1_000);
    });

    it('refuses an enqueue outside a transaction, writing nothing', async () => {
      const { outbox, publisher } = await boot();
      const messageId = '0190a6b2-0000-7000-8000-0000000000b1';
      await expect(
        outbox.enqueue({ topic: 'orders', payload: {}, messageId }, app.notATransaction),
      ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      await expect(
        outbox.enqueue({ topic: 'orders', payload: {}, messageId }),
      ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      expect(await rowsOf([messageId])).toEqual([]);
      await expectNever('a publish', () => publisher.sentIds.length > 0, 500);
    });

    it('skips the second enqueue of one dedupeKey, in another transaction', async () => {
      const { outbox, publisher } = await boot();
      const dedupeKey = uniqueTable('paid');
      const first = await app.inTransaction((tx) =>
        outbox.enqueueWithReport({ topic: 'orders', payload: { n: 1 }, dedupeKey }, tx),
      );
      const second = await app.inTransaction((tx) =>
        outbox.enqueueWithReport({ topic: 'orders', payload: { n: 2 }, dedupeKey }, tx),
      );
      expect(first.duplicates).toEqual([]);
      expect(second.messageIds).toEqual(first.messageIds);
      expect(second.duplicates).toEqual(first.messageIds);

      await waitFor('the message published', () => publisher.sentIds.length === 1);
      await expectNever('a second publish', () => publisher.sentIds.length > 1, 500);
      expect(JSON.parse(String(publisher.sent[0]?.payload ?? 'null'))).toEqual({ n: 1 });
    });

    it('publishes one key in commit order: the second transaction waits for the first', async () => {
      const { outbox, publisher } = await boot();
      const key = uniqueTable('key');
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let enqueued!: () => void;
      const firstEnqueued = new Promise<void>((resolve) => (enqueued = resolve));
      const first = app.inTransaction(async (tx) => {
        const id = await outbox.enqueue({ topic: 'orders', key, payload: { n: 'a' } }, tx);
        enqueued();
        await gate;
        return id;
      });
      await firstEnqueued;
      let secondDone = false;
      const second = app.inTransaction(async (tx) => {
        const id = await outbox.enqueue({ topic: 'orders', key, payload: { n: 'b' } }, tx);
        secondDone = true;
        return id;
      });
      await sleep(500);
      // The key's lock, taken by the first transaction's enqueue, holds the second one back.
      expect(secondDone).toBe(false);
      release();
      const [a, b] = await Promise.all([first, second]);

      await waitFor('both messages published', () => publisher.sentIds.length === 2);
      expect(publisher.sentForKey(key)).toEqual([a, b]);
    });
  });

  describeWith(
    [...target.services, 'rabbitmq'],
    `OutboxModule on ${target.name}, end to end to RabbitMQ`,
    () => {
      const table = uniqueTable('outbox_orm_mq');
      const orders = target.ordersTable ?? uniqueTable('orders_orm_mq');
      let app: OrmApp<Tx>;
      let sql: SqlPort;

      beforeAll(async () => {
        app = await target.open(orders);
        sql = app.connection.sql;
        await createOutboxTable(sql, { tableName: table });
        await sql.query(target.ordersDdl(orders));
      });

      afterAll(async () => {
        if (sql !== undefined) {
          for (const statement of outboxTableDropDdl(outboxDialectOf(sql.databaseType), {
            tableName: table,
          })) {
            await sql.query(statement);
          }
          await sql.query(`DROP TABLE IF EXISTS ${orders}`);
        }
        await app?.close();
      });

      it('delivers the committed message to a RabbitMQ queue, and nothing of a rolled-back one', () =>
        expectDeliveredToRabbitMq({
          connection: app.connection,
          table,
          admin: sql,
          inTransaction: (work, rollback) => app.inTransaction(work, rollback),
          insertOrder: (tx, id) => app.insertOrder(tx, id),
        }));
    },
  );
}
