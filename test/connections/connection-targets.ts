import {
  Kysely,
  MysqlDialect,
  PostgresDialect,
  SqliteDialect,
  sql,
  type PostgresPool,
  type SqliteDatabase,
  type Transaction,
} from 'kysely';
import { createPool as createMysql2Pool } from 'mysql2';
import type { PoolConnection as Mysql2PoolConnection } from 'mysql2/promise';
import { DataSource, type EntityManager } from 'typeorm';
import type { EntityManager as MikroEntityManager } from '@mikro-orm/core';
import { betterSqlite3Outbox } from '../../lib/connections/better-sqlite3';
import { drizzleOutbox, type DrizzleDatabase } from '../../lib/connections/drizzle';
import { kyselyOutbox } from '../../lib/connections/kysely';
import { mikroOrmOutbox } from '../../lib/connections/mikro-orm';
import { mysql2Outbox } from '../../lib/connections/mysql2';
import { pgOutbox, type PgPoolClient } from '../../lib/connections/pg';
import { prismaOutbox, type PrismaTransactionClient } from '../../lib/connections/prisma';
import { typeormConnection } from '../../lib/typeorm/typeorm.connection';
import type { OutboxConnection } from '../../lib/testing';
import type { ConnectionConformanceTarget } from '../../lib/testing';
import { serverConnection, serverOptions } from '../support/databases';
import { serverConnectionsSince } from '../support/server-connections';
import { mariadbPool, pgPool, sqliteFile } from './driver-targets';
import { drizzleOnLibsql, drizzleOnMariadb, drizzleOnPostgres } from './drizzle-targets';
import { openMikroOrm } from './mikro-orm-targets';
import { openPrisma } from './prisma-targets';

// The connection conformance suite's targets: each library's connection on each database it runs
// on here, with the handles an app of that library holds (its transaction, its root handle, a
// transaction of another pool, a nested one) and a way to end its server connections.

export type ServerDatabase = 'postgres' | 'mariadb';
export type AnyDatabase = ServerDatabase | 'sqlite';

const EMBEDDED = 'SQLite is a file the process opens, with no server that could end the connection';

/** Rolls a callback transaction back by throwing this, then answers what `work` answered. */
class Rollback<T> extends Error {
  constructor(readonly value: T) {
    super('rollback');
  }
}

/** A library transaction of the callback kind (`db.transaction(fn)`), rolled back on request. */
async function callback<Tx, T>(
  begin: (fn: (tx: Tx) => Promise<T>) => Promise<T>,
  work: (tx: Tx) => Promise<T>,
  rollback = false,
): Promise<T> {
  try {
    return await begin(async (tx) => {
      const value = await work(tx);
      if (rollback) throw new Rollback(value);
      return value;
    });
  } catch (error) {
    if (error instanceof Rollback) return error.value as T;
    throw error;
  }
}

/** `BEGIN … COMMIT|ROLLBACK` on a client or connection checked out of a pool. */
async function explicit<C extends { query(text: string): Promise<unknown> }, T>(
  checkout: () => Promise<C & { release(): void }>,
  work: (client: C) => Promise<T>,
  rollback = false,
): Promise<T> {
  const client = await checkout();
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

/** `SAVEPOINT` inside a transaction, for the libraries without nested transactions of their own. */
async function savepoint<T>(
  run: (statement: string) => Promise<unknown>,
  work: () => Promise<T>,
): Promise<T> {
  await run('SAVEPOINT outbox_conformance');
  const value = await work();
  await run('RELEASE SAVEPOINT outbox_conformance');
  return value;
}

async function watch(database: AnyDatabase) {
  return database === 'sqlite' ? undefined : serverConnectionsSince(database);
}

/** A plain driver's pool: what the app checks a transaction's connection out of. */
interface DriverPool<C> {
  checkout(): Promise<C & { release(): void }>;
  end(): Promise<void>;
}

/**
 * A plain driver's connection on its server: the app's transactions are `BEGIN … COMMIT` on a
 * checked-out connection, a foreign one is of a second pool, a nested one a savepoint.
 */
function driverTarget<P, C extends { query(text: string): Promise<unknown> }>(
  name: string,
  database: ServerDatabase,
  open: (own: boolean) => { pool: P; driver: DriverPool<C> },
  outbox: (pool: P) => OutboxConnection<C>,
): ConnectionConformanceTarget<C> {
  return {
    name,
    async setUp() {
      const server = await serverConnectionsSince(database);
      const own = open(true);
      const other = open(false);
      const checkout = () => own.driver.checkout();
      return {
        connection: outbox(own.pool),
        rootHandle: own.pool,
        inTransaction: (work, rollback) => explicit(checkout, work, rollback),
        inForeignTransaction: (work, rollback) =>
          explicit(() => other.driver.checkout(), work, rollback),
        inNestedTransaction: (work, rollbackOuter) =>
          explicit(
            checkout,
            (c) =>
              savepoint(
                (s) => c.query(s),
                () => work(c),
              ),
            rollbackOuter,
          ),
        killConnections: () => server.killNew().then(() => undefined),
        async tearDown() {
          await own.driver.end();
          await other.driver.end();
          await server.close();
        },
      };
    },
  };
}

export function pgTarget(): ConnectionConformanceTarget<PgPoolClient> {
  return driverTarget(
    'pg',
    'postgres',
    (own) => {
      // The pool handed to the outbox has no 'error' listener of the app's, as
      // docs/without-typeorm.md makes it: the killed-connections case then proves that the
      // library's own handling keeps the process up. The foreign pool is the app's, never shown
      // to the outbox, and the app listens on it.
      const pool = pgPool(10, { appListener: !own });
      return { pool, driver: { checkout: () => pool.connect(), end: () => pool.end() } };
    },
    pgOutbox,
  );
}

export function mysql2Target(): ConnectionConformanceTarget<Mysql2PoolConnection> {
  return driverTarget<ReturnType<typeof mariadbPool>, Mysql2PoolConnection>(
    'mysql2',
    'mariadb',
    () => {
      const pool = mariadbPool();
      return { pool, driver: { checkout: () => pool.getConnection(), end: () => pool.end() } };
    },
    mysql2Outbox,
  );
}

export function betterSqlite3Target(): ConnectionConformanceTarget<unknown> {
  return {
    name: 'better-sqlite3',
    without: { killedConnections: EMBEDDED },
    setUp() {
      const file = sqliteFile();
      const other = sqliteFile();
      const connection = betterSqlite3Outbox(file.db);
      type Db = typeof file.db;
      // better-sqlite3's own db.transaction(fn) must be synchronous: apps BEGIN themselves.
      const begin = async <T>(db: Db, work: (tx: unknown) => Promise<T>, rollback = false) => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const value = await work(db);
          db.exec(rollback ? 'ROLLBACK' : 'COMMIT');
          return value;
        } catch (error) {
          db.exec('ROLLBACK');
          throw error;
        }
      };
      return Promise.resolve({
        connection: connection,
        rootHandle: file.db,
        inTransaction: (work, rollback) => begin(file.db, work, rollback),
        inForeignTransaction: (work, rollback) => begin(other.db, work, rollback),
        inNestedTransaction: (work, rollbackOuter) =>
          begin(
            file.db,
            () =>
              savepoint(
                (s) => Promise.resolve(file.db.exec(s)),
                () => work(file.db),
              ),
            rollbackOuter,
          ),
        tearDown() {
          file.remove();
          other.remove();
          return Promise.resolve();
        },
      });
    },
  };
}

function kyselyOn(database: AnyDatabase): Kysely<unknown> & { file?: string; remove?: () => void } {
  if (database === 'postgres') {
    const pool = pgPool();
    // Kysely hands the pool's clients out without an 'error' listener, and does not show them to
    // the outbox: the app gives each client one, as docs/without-typeorm.md#kysely shows.
    pool.on('connect', (client) => client.on('error', () => undefined));
    return new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: pool as unknown as PostgresPool }),
    });
  }
  if (database === 'mariadb') {
    const c = serverConnection('mariadb');
    return new Kysely<unknown>({
      dialect: new MysqlDialect({
        pool: createMysql2Pool({
          host: c.host,
          port: c.port,
          user: c.username,
          password: c.password,
          database: c.database,
          connectionLimit: 10,
        }),
      }),
    });
  }
  const file = sqliteFile();
  const db = new Kysely<unknown>({
    dialect: new SqliteDialect({ database: file.db as unknown as SqliteDatabase }),
  });
  // Kysely closes the Database on destroy(); remove() then only deletes the directory.
  return Object.assign(db, { file: file.file, remove: () => file.remove() });
}

export function kyselyTarget(
  database: AnyDatabase,
): ConnectionConformanceTarget<Transaction<unknown>> {
  return {
    name: `kysely-${database}`,
    without: database === 'sqlite' ? { killedConnections: EMBEDDED } : undefined,
    async setUp() {
      const server = await watch(database);
      const db = kyselyOn(database);
      const other = kyselyOn(database);
      const connection = kyselyOutbox(
        db,
        db.file === undefined ? {} : { databaseType: 'sqlite', databaseFile: db.file },
      );
      const run = <T>(
        k: Kysely<unknown>,
        work: (trx: Transaction<unknown>) => Promise<T>,
        rollback?: boolean,
      ) => callback<Transaction<unknown>, T>((fn) => k.transaction().execute(fn), work, rollback);
      return {
        connection,
        rootHandle: db,
        inTransaction: (work, rollback) => run(db, work, rollback),
        inForeignTransaction: (work, rollback) => run(other, work, rollback),
        inNestedTransaction: (work, rollbackOuter) =>
          run(
            db,
            (trx) =>
              savepoint(
                (s) => sql.raw(s).execute(trx),
                () => work(trx),
              ),
            rollbackOuter,
          ),
        killConnections:
          server === undefined ? undefined : () => server.killNew().then(() => undefined),
        async tearDown() {
          await db.destroy();
          await other.destroy();
          db.remove?.();
          other.remove?.();
          await server?.close();
        },
      };
    },
  };
}

type DrizzleTx = unknown;

export function drizzleTarget(database: AnyDatabase): ConnectionConformanceTarget<DrizzleTx> {
  const open = (own: boolean): { db: DrizzleDatabase<DrizzleTx>; end: () => Promise<void> } => {
    if (database === 'sqlite') {
      const opened = drizzleOnLibsql();
      return { db: opened.db, end: opened.end };
    }
    if (database === 'postgres') {
      // As for pg: no app listener on the pool the outbox is given, one on the foreign pool.
      const pool = pgPool(10, { appListener: !own });
      return {
        db: drizzleOnPostgres(pool),
        end: () => pool.end(),
      };
    }
    const pool = mariadbPool();
    return {
      db: drizzleOnMariadb(pool),
      end: () => pool.end(),
    };
  };
  return {
    name: `drizzle-${database}`,
    without: database === 'sqlite' ? { killedConnections: EMBEDDED } : undefined,
    async setUp() {
      const server = await watch(database);
      const main = open(true);
      const other = open(false);
      const connection = drizzleOutbox(main.db);
      const run = <T>(
        db: DrizzleDatabase<DrizzleTx>,
        work: (tx: DrizzleTx) => Promise<T>,
        rollback?: boolean,
      ) => callback<DrizzleTx, T>((fn) => db.transaction(fn), work, rollback);
      return {
        connection,
        rootHandle: main.db,
        inTransaction: (work, rollback) => run(main.db, work, rollback),
        inForeignTransaction: (work, rollback) => run(other.db, work, rollback),
        // Drizzle nests with a savepoint: tx.transaction(fn).
        inNestedTransaction: (work, rollbackOuter) =>
          run(
            main.db,
            (tx) => (tx as DrizzleDatabase<DrizzleTx>).transaction((inner) => work(inner)),
            rollbackOuter,
          ),
        killConnections:
          server === undefined ? undefined : () => server.killNew().then(() => undefined),
        async tearDown() {
          await main.end();
          await other.end();
          await server?.close();
        },
      };
    },
  };
}

export function mikroOrmTarget(
  database: AnyDatabase,
): ConnectionConformanceTarget<MikroEntityManager> {
  return {
    name: `mikro-orm-${database}`,
    without: database === 'sqlite' ? { killedConnections: EMBEDDED } : undefined,
    async setUp() {
      const server = await watch(database);
      const orm = await openMikroOrm(database);
      const other = await openMikroOrm(database);
      const connection = mikroOrmOutbox(orm);
      const run = <T>(
        em: MikroEntityManager,
        work: (em: MikroEntityManager) => Promise<T>,
        rollback?: boolean,
      ) => callback<MikroEntityManager, T>((fn) => em.transactional(fn), work, rollback);
      return {
        connection,
        rootHandle: orm.em,
        inTransaction: (work, rollback) => run(orm.em, work, rollback),
        inForeignTransaction: (work, rollback) => run(other.em, work, rollback),
        // em.transactional inside a transaction nests with a savepoint.
        inNestedTransaction: (work, rollbackOuter) =>
          run(orm.em, (em) => em.transactional((inner) => work(inner)), rollbackOuter),
        killConnections:
          server === undefined ? undefined : () => server.killNew().then(() => undefined),
        async tearDown() {
          await orm.close(true);
          await other.close(true);
          await server?.close();
        },
      };
    },
  };
}

export function prismaTarget(
  database: AnyDatabase,
): ConnectionConformanceTarget<PrismaTransactionClient> {
  return {
    name: `prisma-${database}`,
    without: {
      ...(database === 'sqlite' ? { killedConnections: EMBEDDED } : {}),
      nestedTransaction:
        'Prisma has no nested interactive transactions: tx.$transaction is refused inside one',
    },
    async setUp() {
      const server = await watch(database);
      const file = database === 'sqlite' ? sqliteFile() : undefined;
      const otherFile = database === 'sqlite' ? sqliteFile() : undefined;
      const prisma = openPrisma(database, file?.file);
      const other = openPrisma(database, otherFile?.file);
      const connection = prismaOutbox(prisma);
      const run = <T>(
        client: typeof prisma,
        work: (tx: PrismaTransactionClient) => Promise<T>,
        rollback?: boolean,
      ) => callback<PrismaTransactionClient, T>((fn) => client.$transaction<T>(fn), work, rollback);
      return {
        connection,
        rootHandle: prisma,
        inTransaction: (work, rollback) => run(prisma, work, rollback),
        inForeignTransaction: (work, rollback) => run(other, work, rollback),
        killConnections:
          server === undefined ? undefined : () => server.killNew().then(() => undefined),
        async tearDown() {
          await prisma.$disconnect();
          await other.$disconnect();
          file?.remove();
          otherFile?.remove();
          await server?.close();
        },
      };
    },
  };
}

export function typeormTarget(database: AnyDatabase): ConnectionConformanceTarget<EntityManager> {
  const open = async (): Promise<{ ds: DataSource; remove?: () => void }> => {
    if (database === 'sqlite') {
      const file = sqliteFile();
      file.db.close();
      const ds = new DataSource({ type: 'better-sqlite3', database: file.file, enableWAL: true });
      return { ds: await ds.initialize(), remove: () => file.remove() };
    }
    const ds = new DataSource(serverOptions(database, { poolSize: 10 }));
    return { ds: await ds.initialize() };
  };
  return {
    name: `typeorm-${database}`,
    without: database === 'sqlite' ? { killedConnections: EMBEDDED } : undefined,
    async setUp() {
      const server = await watch(database);
      const main = await open();
      const other = await open();
      const connection = typeormConnection(main.ds);
      const run = <T>(ds: DataSource, work: (m: EntityManager) => Promise<T>, rollback?: boolean) =>
        callback<EntityManager, T>((fn) => ds.transaction(fn), work, rollback);
      return {
        connection,
        rootHandle: main.ds.manager,
        inTransaction: (work, rollback) => run(main.ds, work, rollback),
        inForeignTransaction: (work, rollback) => run(other.ds, work, rollback),
        inNestedTransaction: (work, rollbackOuter) =>
          run(main.ds, (m) => m.transaction((inner) => work(inner)), rollbackOuter),
        killConnections:
          server === undefined ? undefined : () => server.killNew().then(() => undefined),
        async tearDown() {
          await main.ds.destroy();
          await other.ds.destroy();
          main.remove?.();
          other.remove?.();
          await server?.close();
        },
      };
    },
  };
}
