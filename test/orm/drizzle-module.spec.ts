import { mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { pgTable, text } from 'drizzle-orm/pg-core';
import { OutboxError, OutboxTransactionRequiredError } from '../../lib';
import { drizzleOutbox } from '../../lib/orm/drizzle';
import { describeWith } from '../support/services';
import { pgPool } from './driver-targets';
import { drizzleOnMariadb, drizzleOnPostgres, mysqlPool } from './drizzle-targets';
import { ormModuleCases } from './orm-module.cases';

// An app on Drizzle: OutboxModule on drizzleOutbox(db), the business row written with Drizzle's
// query builder and the message enqueued with the tx of db.transaction(async (tx) => …).

type PgDb = ReturnType<typeof drizzleOnPostgres>;
type PgTx = Parameters<Parameters<PgDb['transaction']>[0]>[0];
type MysqlDb = ReturnType<typeof drizzleOnMariadb>;
type MysqlTx = Parameters<Parameters<MysqlDb['transaction']>[0]>[0];

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
