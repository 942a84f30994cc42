import { Test } from '@nestjs/testing';
import { createClient } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleBetterSqlite3 } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzleLibsql } from 'drizzle-orm/libsql';
import { mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { pgTable, text } from 'drizzle-orm/pg-core';
import { sqliteTable, text as sqliteText } from 'drizzle-orm/sqlite-core';
import {
  OutboxError,
  OutboxModule,
  OutboxService,
  OutboxTransactionRequiredError,
} from '../../lib';
import { createOutboxTable } from '../../lib/schema';
import {
  betterSqlite3Outbox,
  type BetterSqlite3Database,
} from '../../lib/connections/better-sqlite3';
import { drizzleOutbox } from '../../lib/connections/drizzle';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { pgPool, sqliteFile } from './driver-targets';
import { drizzleOnLibsql, drizzleOnMariadb, drizzleOnPostgres, mysqlPool } from './drizzle-targets';
import { ormModuleCases } from './orm-module.cases';

// An app on Drizzle: OutboxModule on drizzleOutbox(db), the business row written with Drizzle's
// query builder and the message enqueued with the tx of db.transaction(async (tx) => …).

type PgDb = ReturnType<typeof drizzleOnPostgres>;
type PgTx = Parameters<Parameters<PgDb['transaction']>[0]>[0];
type MysqlDb = ReturnType<typeof drizzleOnMariadb>;
type MysqlTx = Parameters<Parameters<MysqlDb['transaction']>[0]>[0];
type LibsqlDb = ReturnType<typeof drizzleOnLibsql>['db'];
type LibsqlTx = Parameters<Parameters<LibsqlDb['transaction']>[0]>[0];

/** Rolls back by throwing out of the callback, the way a Drizzle app does (or tx.rollback()). */
class Rollback extends Error {}

async function drizzleTransaction<Tx, T>(
  transaction: (work: (tx: Tx) => Promise<T>) => Promise<T>,
  work: (tx: Tx) => Promise<T>,
  rollback: boolean,
): Promise<T> {
  let value: T | undefined;
  try {
    return await transaction(async (tx) => {
      value = await work(tx);
      if (rollback) throw new Rollback();
      return value;
    });
  } catch (error) {
    if (error instanceof Rollback) return value as T;
    throw error;
  }
}

ormModuleCases<PgTx>({
  name: 'Drizzle on node-postgres (nestjs-outbox/drizzle)',
  services: ['postgres'],
  ordersDdl: (orders) => `CREATE TABLE ${orders} (id text PRIMARY KEY)`,
  open(orders) {
    const pool = pgPool(8);
    const db = drizzleOnPostgres(pool);
    const ordersTable = pgTable(orders, { id: text('id').primaryKey() });
    return Promise.resolve({
      connection: drizzleOutbox(db),
      inTransaction: (work, rollback = false) =>
        drizzleTransaction((w) => db.transaction(w), work, rollback),
      insertOrder: async (tx, id) => {
        await tx.insert(ordersTable).values({ id });
      },
      notATransaction: db as unknown as PgTx,
      close: () => pool.end(),
    });
  },
});

ormModuleCases<MysqlTx>({
  name: 'Drizzle on mysql2, MariaDB (nestjs-outbox/drizzle)',
  services: ['mariadb'],
  ordersDdl: (orders) => `CREATE TABLE ${orders} (id varchar(64) PRIMARY KEY)`,
  open(orders) {
    const pool = mysqlPool(8);
    const db = drizzleOnMariadb(pool);
    const ordersTable = mysqlTable(orders, { id: varchar('id', { length: 64 }).primaryKey() });
    return Promise.resolve({
      connection: drizzleOutbox(db),
      inTransaction: (work, rollback = false) =>
        drizzleTransaction((w) => db.transaction(w), work, rollback),
      insertOrder: async (tx, id) => {
        await tx.insert(ordersTable).values({ id });
      },
      notATransaction: db as unknown as MysqlTx,
      close: () => pool.end(),
    });
  },
});

ormModuleCases<LibsqlTx>({
  name: 'Drizzle on libSQL, SQLite (nestjs-outbox/drizzle)',
  services: [],
  ordersDdl: (orders) => `CREATE TABLE ${orders} (id text PRIMARY KEY)`,
  open(orders) {
    const { db, end } = drizzleOnLibsql();
    const ordersTable = sqliteTable(orders, { id: sqliteText('id').primaryKey() });
    // libSQL fails a second write transaction at once (SQLITE_BUSY) instead of queueing it
    // while the first is open, so an app on it runs its write transactions one at a time.
    let tail: Promise<unknown> = Promise.resolve();
    return Promise.resolve({
      connection: drizzleOutbox(db),
      inTransaction: <T>(work: (tx: LibsqlTx) => Promise<T>, rollback = false) => {
        const turn = tail.then(() =>
          drizzleTransaction<LibsqlTx, T>((w) => db.transaction(w), work, rollback),
        );
        tail = turn.catch(() => undefined);
        return turn;
      },
      insertOrder: async (tx, id) => {
        await tx.insert(ordersTable).values({ id });
      },
      notATransaction: db as unknown as LibsqlTx,
      close: end,
    });
  },
});

describe('drizzleOutbox on SQLite: which databases and transactions it takes', () => {
  it('refuses drizzle-orm/better-sqlite3, whose transactions are synchronous, saying what to use', () => {
    const sqlite = sqliteFile();
    try {
      const db = drizzleBetterSqlite3(sqlite.db as never);
      let error: unknown;
      try {
        drizzleOutbox(db);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutboxError);
      expect((error as Error).message).toMatch(/synchronously/);
      expect((error as Error).message).toMatch(/betterSqlite3Outbox\(db\.\$client\)/);
      // What the refusal is about: better-sqlite3 refuses an async transaction callback.
      expect(() => db.transaction(async () => Promise.resolve())).toThrow(/promise/);
    } finally {
      sqlite.remove();
    }
  });

  it("on drizzle-orm/better-sqlite3, betterSqlite3Outbox(db.$client) enqueues in the app's BEGIN IMMEDIATE … COMMIT", async () => {
    const sqlite = sqliteFile();
    const db = drizzleBetterSqlite3(sqlite.db as never);
    const client = db.$client as unknown as BetterSqlite3Database;
    const orders = sqliteTable('orders', { id: sqliteText('id').primaryKey() });
    client.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
    const connection = betterSqlite3Outbox(client);
    await createOutboxTable(connection.sql, { tableName: 'outbox' });
    const moduleRef = await Test.createTestingModule({
      imports: [
        OutboxModule.forRoot({ connection, publisher: new RecordingPublisher(), workers: false }),
      ],
    }).compile();
    await moduleRef.init();
    try {
      const outbox = moduleRef.get<OutboxService<BetterSqlite3Database>>(OutboxService);
      const write = async (id: string, end: 'COMMIT' | 'ROLLBACK'): Promise<string> => {
        client.exec('BEGIN IMMEDIATE');
        db.insert(orders).values({ id }).run();
        const messageId = await outbox.enqueue({ topic: 'orders', payload: { id } }, client);
        client.exec(end);
        return messageId;
      };
      const kept = await write('a', 'COMMIT');
      const gone = await write('b', 'ROLLBACK');
      const ids = (sql: string): unknown[] =>
        sqlite.db
          .prepare(sql)
          .all()
          .map((r): unknown => Object.values(r as Record<string, unknown>)[0]);
      expect(ids('SELECT id FROM orders')).toEqual(['a']);
      expect(ids('SELECT message_id FROM outbox')).toEqual([kept]);
      expect(gone).not.toBe(kept);
    } finally {
      await moduleRef.close();
      sqlite.remove();
    }
  });

  it('refuses a libSQL server (no local file), the database itself, and a tx of another client', async () => {
    expect(() => drizzleOutbox(drizzleLibsql(createClient({ url: 'http://127.0.0.1:9' })))).toThrow(
      /libSQL server \(http:\)/,
    );
    const own = drizzleOnLibsql();
    const other = drizzleOnLibsql();
    try {
      const connection = drizzleOutbox(own.db);
      expect(() => connection.join(own.db as unknown as LibsqlTx)).toThrow(
        OutboxTransactionRequiredError,
      );
      const error = await other.db.transaction((tx) =>
        Promise.resolve().then(() => {
          try {
            connection.join(tx);
            return undefined;
          } catch (e) {
            return e;
          }
        }),
      );
      expect(error).toBeInstanceOf(OutboxError);
      expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
      expect((error as Error).message).toMatch(/another client/);

      // A tx kept after its callback: refused before any statement (libSQL's transaction says
      // it is closed), so nothing commits on its own.
      await own.db.run(sql`CREATE TABLE kept (n INTEGER)`);
      const kept = await own.db.transaction((tx) => Promise.resolve(tx));
      const refused = await Promise.resolve()
        .then(() => connection.join(kept).query('INSERT INTO kept (n) VALUES (?)', [1]))
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OutboxTransactionRequiredError);
      expect((refused as Error).message).toMatch(/has ended/);
      expect(await own.db.all(sql`SELECT n FROM kept`)).toEqual([]);
    } finally {
      await own.end();
      await other.end();
    }
  });
});

describeWith(['postgres', 'mariadb'], 'drizzleOutbox: which transactions it joins', () => {
  const pgPools = [pgPool(2), pgPool(2)] as const;
  const mysql = mysqlPool(2);
  afterAll(async () => {
    await Promise.all([...pgPools.map((p) => p.end()), mysql.end()]);
  });
  const [own, other] = pgPools.map((pool) => drizzleOnPostgres(pool)) as [PgDb, PgDb];
  // Made before either pool connected: the pool's clients can all be seen.
  const connection = drizzleOutbox(own);

  it('joins a transaction of its database', async () => {
    const { rows } = await own.transaction((tx) =>
      connection.join(tx).query<{ one: number }>('SELECT $1::int AS one', [1]),
    );
    expect(rows).toEqual([{ one: 1 }]);
  });

  it('refuses a tx kept after its callback ended: its connection is back in the pool', async () => {
    const kept = await own.transaction((tx) => Promise.resolve(tx));
    expect(() => connection.join(kept)).toThrow(OutboxTransactionRequiredError);
  });

  it('refuses a transaction of another pool, and one of a MySQL database, as foreign', async () => {
    const error = await other.transaction((tx) =>
      Promise.resolve().then(() => {
        try {
          connection.join(tx);
          return undefined;
        } catch (e) {
          return e;
        }
      }),
    );
    expect(error).toBeInstanceOf(OutboxError);
    expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
    expect((error as Error).message).toMatch(/another pool/);

    const mysqlDb = drizzleOnMariadb(mysql);
    const mysqlError = await mysqlDb.transaction((tx) =>
      Promise.resolve().then(() => {
        try {
          connection.join(tx as unknown as PgTx);
          return undefined;
        } catch (e) {
          return e;
        }
      }),
    );
    expect(mysqlError).toBeInstanceOf(OutboxError);
    expect(mysqlError).not.toBeInstanceOf(OutboxTransactionRequiredError);
    expect((mysqlError as Error).message).toMatch(/another database/);
  });

  it('refuses a Drizzle database made on a single pg.Client', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { Client } = require('pg') as { Client: new () => object };
    const single = drizzleOnPostgres(new Client() as never);
    expect(() => drizzleOutbox(single)).toThrow(/single pg\.Client/);
  });
});
