import { Test, type TestingModule } from '@nestjs/testing';
import {
  OutboxAdmin,
  OutboxError,
  OutboxModule,
  OutboxService,
  OutboxTableMissingError,
  OutboxTransactionRequiredError,
} from '../../lib';
import { type OutboxConnection, type SqlPort } from '../../lib/testing';
import { createOutboxTable } from '../../lib/schema';
import { outboxTableDropDdl, type OutboxDialect } from '../../lib/store/schema/outbox-table-ddl';
import { storedId, uniqueTable } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith, type ServiceName } from '../support/services';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { expectDeliveredToRabbitMq } from './rabbitmq-delivery';

// The module's `connection` on one library, end to end: OutboxModule boots on it, the real
// dispatcher delivers what the app's committed transaction enqueued and nothing of a rolled-back
// one, and enqueue refuses what would not commit with the app's writes. Each library's spec
// gives the fixture: how its app opens its pool, runs a transaction and writes a business row.

/** The app's database handle as one library has it: a pool, a Database, a Kysely instance. */
export interface AppDatabase<Tx> {
  readonly connection: OutboxConnection<Tx>;
  /** Runs `work` in a transaction the way an app of the library does; rolled back when asked. */
  inTransaction<T>(work: (tx: Tx) => Promise<T>, rollback?: boolean): Promise<T>;
  /** Runs `work` with a handle of this pool that is not inside a transaction. */
  outsideTransaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** Inserts a business row with the app's transaction handle. */
  insertOrder(tx: Tx, table: string, id: string): Promise<void>;
  /** A statement on the app's pool, proving it still works. */
  ping(): Promise<void>;
  /** Ends the app's pool (the test's, after the module closed). */
  end(): Promise<void>;
}

export interface ConnectionModuleFixture<Tx> {
  readonly name: string;
  readonly services: readonly ServiceName[];
  readonly dialect: OutboxDialect;
  /** `?` or `$1`: the placeholder of the dialect. */
  readonly placeholder: string;
  /** Opens what the whole suite shares: the admin's own port, for the tables and reads. */
  setUp(): Promise<{ admin: SqlPort; tearDown(): Promise<void> }>;
  /** A fresh app pool (or Database, or Kysely instance) on the suite's database. */
  openDatabase(): Promise<AppDatabase<Tx>>;
  /** Runs `work` inside a transaction of another pool on the same database. */
  inForeignTransaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** The message the foreign transaction's refusal carries. */
  readonly foreignMessage: RegExp;
  /** More refusals the library can tell (a failed or finished transaction…). */
  readonly moreRefusals?: (context: {
    database: AppDatabase<Tx>;
    outbox: OutboxService<Tx>;
    /** Enqueues the message the test checks is never written. */
    enqueue: (tx: Tx) => Promise<unknown>;
    /** How many of these messages are in the table. */
    countRows: (messageIds: readonly string[]) => Promise<number>;
    removeRows: (messageIds: readonly string[]) => Promise<void>;
  }) => Promise<void>;
}

export function describeConnectionModule<Tx>(fixture: ConnectionModuleFixture<Tx>): void {
  describeWith(fixture.services, `OutboxModule on ${fixture.name}`, () => {
    const table = uniqueTable('outbox_conn');
    const orders = uniqueTable('orders_conn');
    const p = fixture.placeholder;
    let admin: SqlPort;
    let tearDown: () => Promise<void>;
    const cleanups: (() => Promise<unknown>)[] = [];

    beforeAll(async () => {
      ({ admin, tearDown } = await fixture.setUp());
      await createOutboxTable(admin, { tableName: table });
      await admin.query(`CREATE TABLE ${orders} (id VARCHAR(100) PRIMARY KEY)`);
    });

    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
    });

    afterAll(async () => {
      if (admin === undefined) return;
      for (const statement of outboxTableDropDdl(fixture.dialect, { tableName: table })) {
        await admin.query(statement);
      }
      await admin.query(`DROP TABLE IF EXISTS ${orders}`);
      await tearDown();
    });

    async function openApp(workers = true): Promise<{
      database: AppDatabase<Tx>;
      outbox: OutboxService<Tx>;
      publisher: RecordingPublisher;
      moduleRef: TestingModule;
      close(): Promise<void>;
    }> {
      const database = await fixture.openDatabase();
      const publisher = new RecordingPublisher();
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            connection: database.connection,
            publisher,
            tableName: table,
            workers,
            dispatcher: { pollIntervalMs: 100 },
          }),
        ],
      }).compile();
      await moduleRef.init();
      let closed = false;
      const close = async (): Promise<void> => {
        if (closed) return;
        closed = true;
        await moduleRef.close();
      };
      cleanups.push(async () => {
        await close();
        await database.end();
      });
      return {
        close,
        database,
        outbox: moduleRef.get<OutboxService<Tx>>(OutboxService),
        publisher,
        moduleRef,
      };
    }

    const rowOf = async (id: string): Promise<{ status: string }[]> =>
      (
        await admin.query<{ status: string }>(
          `SELECT status FROM ${table} WHERE message_id = ${p}`,
          [storedId(admin.databaseType, id)],
        )
      ).rows;
    /** Runs `statement` (ending in `IN (…)`) on the ids, in slices under any bind limit. */
    const inSlices = async (statement: string, ids: readonly string[]): Promise<number> => {
      let total = 0;
      for (let start = 0; start < ids.length; start += 1_000) {
        const slice = ids.slice(start, start + 1_000);
        const list = slice.map((_, i) => (p === '?' ? '?' : `$${i + 1}`)).join(', ');
        const { rows, affected } = await admin.query<{ n: number | string }>(
          `${statement} (${list})`,
          slice.map((id) => storedId(admin.databaseType, id)),
        );
        total += rows[0] === undefined ? affected : Number(rows[0].n);
      }
      return total;
    };
    const countRows = (ids: readonly string[]): Promise<number> =>
      inSlices(`SELECT COUNT(*) AS n FROM ${table} WHERE message_id IN`, ids);
    const removeRows = async (ids: readonly string[]): Promise<void> => {
      await inSlices(`DELETE FROM ${table} WHERE message_id IN`, ids);
    };
    const orderExists = async (id: string): Promise<boolean> =>
      (await admin.query(`SELECT 1 AS one FROM ${orders} WHERE id = ${p}`, [id])).rows.length === 1;

    it('delivers a message committed with a business row, and OutboxAdmin counts it', async () => {
      const { database, outbox, publisher, moduleRef } = await openApp();
      const stats = moduleRef.get(OutboxAdmin);
      const deliveredBefore = (await stats.stats()).delivered;
      const orderId = uniqueTable('order');
      const messageId = await database.inTransaction(async (tx) => {
        await database.insertOrder(tx, orders, orderId);
        return outbox.enqueue({ topic: 'orders', key: orderId, payload: { orderId } }, tx);
      });

      await waitFor('the message published', () => publisher.messageIds.includes(messageId));
      expect(await orderExists(orderId)).toBe(true);
      await waitFor(
        'the row settled as delivered',
        async () => (await rowOf(messageId))[0]?.status === 'delivered',
      );
      expect(publisher.messageIds).toEqual([messageId]);
      expect(publisher.payloads()).toEqual([{ orderId }]);
      expect((await stats.stats()).delivered).toBe(deliveredBefore + 1);
    });

    it('publishes nothing while the transaction is open, then delivers once after the commit', async () => {
      const { database, outbox, publisher } = await openApp();
      const messageId = await database.inTransaction(async (tx) => {
        const id = await outbox.enqueue({ topic: 'orders', payload: { held: true } }, tx);
        // Several polls while the transaction holds its rows (on SQLite, the write lock too:
        // the dispatcher's own connection must step back, not fail or wait inside SQLite).
        await sleep(600);
        expect(publisher.messageIds).toEqual([]);
        return id;
      });
      await waitFor('the message published', () => publisher.messageIds.includes(messageId));
      await sleep(300);
      expect(publisher.messageIds).toEqual([messageId]);
    });

    it('writes and publishes nothing when the transaction rolls back', async () => {
      const { database, outbox, publisher } = await openApp();
      const orderId = uniqueTable('order');
      const messageId = await database.inTransaction(async (tx) => {
        await database.insertOrder(tx, orders, orderId);
        return outbox.enqueue({ topic: 'orders', payload: { orderId } }, tx);
      }, true);

      expect(await rowOf(messageId)).toEqual([]);
      expect(await orderExists(orderId)).toBe(false);
      await expectNever('a publish', () => publisher.messageIds.length > 0, 1_000);
    });

    it('refuses a handle outside a transaction, and one of another pool, writing nothing', async () => {
      const { database, outbox } = await openApp(false);
      const messageId = '0190a6b2-0000-7000-8000-0000000000c1';
      const enqueue = (tx: Tx) => outbox.enqueue({ topic: 'orders', payload: {}, messageId }, tx);

      const outside = await database.outsideTransaction((tx) =>
        enqueue(tx).catch((e: unknown) => e),
      );
      expect(outside).toBeInstanceOf(OutboxTransactionRequiredError);

      const foreign = await fixture.inForeignTransaction((tx) =>
        enqueue(tx).then(
          () => undefined,
          (e: unknown) => e,
        ),
      );
      expect(foreign).toBeInstanceOf(OutboxError);
      expect(foreign).not.toBeInstanceOf(OutboxTransactionRequiredError);
      expect((foreign as Error).message).toMatch(fixture.foreignMessage);

      await fixture.moreRefusals?.({ database, outbox, enqueue, countRows, removeRows });
      expect(await rowOf(messageId)).toEqual([]);
    });

    describeWith(['rabbitmq'], 'end to end to RabbitMQ', () => {
      it('delivers the committed message to a RabbitMQ queue, and nothing of a rolled-back one', async () => {
        const database = await fixture.openDatabase();
        try {
          await expectDeliveredToRabbitMq({
            connection: database.connection,
            table,
            admin,
            inTransaction: (work, rollback) => database.inTransaction(work, rollback),
            insertOrder: (tx, id) => database.insertOrder(tx, orders, id),
          });
        } finally {
          await database.end();
        }
      });
    });

    it('refuses to start on a pool that was ended, saying the database does not answer rather than that the table is missing', async () => {
      const database = await fixture.openDatabase();
      // Used, then ended, as an app's shutdown leaves it (Kysely ends nothing it has not opened).
      await database.ping();
      await database.end();
      const start = async (): Promise<void> => {
        const moduleRef = await Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              connection: database.connection,
              publisher: new RecordingPublisher(),
              tableName: table,
            }),
          ],
        }).compile();
        cleanups.push(() => moduleRef.close());
      };
      const refusal = await start().then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refusal).toBeInstanceOf(OutboxError);
      expect(refusal).not.toBeInstanceOf(OutboxTableMissingError);
      expect(String((refusal as Error).message)).toMatch(
        /database does not answer|connection it was given was ended/,
      );
    });

    it('refuses to start on a table that does not exist, naming the ways to make it', async () => {
      const { connection, end } = await fixture.openDatabase();
      cleanups.push(end);
      const missing = uniqueTable('outbox_absent');
      await expect(
        Test.createTestingModule({
          imports: [
            OutboxModule.forRoot({
              connection,
              publisher: new RecordingPublisher(),
              tableName: missing,
            }),
          ],
        }).compile(),
      ).rejects.toThrow(OutboxTableMissingError);
    });

    it('leaves the app’s pool open at shutdown', async () => {
      const { database, close } = await openApp();
      await close();
      await expect(database.ping()).resolves.toBeUndefined();
    });
  });
}
