import {
  CamelCasePlugin,
  Kysely,
  MysqlDialect,
  PostgresDialect,
  SqliteDialect,
  sql,
  type PostgresPool,
  type SqliteDatabase,
  type Transaction,
} from 'kysely';
import { createPool } from 'mysql2';
import { OutboxTransactionRequiredError } from '../../lib';
import {
  kyselyOutbox,
  kyselySqlPort,
  type KyselyInstance,
  type KyselyTransaction,
} from '../../lib/connections/kysely';
import { serverConnection } from '../support/databases';
import type { ServiceName } from '../support/services';
import {
  describeConnectionModule,
  type AppDatabase,
  type ConnectionModuleFixture,
} from './connection-module.suite';
import { openSqliteFile, pgPool, sqliteFile } from './driver-targets';

// An app on Kysely: OutboxModule on the app's Kysely instance (`connection: kyselyOutbox(db)`),
// the database read from its dialect's adapter, enqueuing with the Transaction of
// db.transaction().execute(async (trx) => …). On PostgreSQL, MariaDB and SQLite.

type Database = 'postgres' | 'mariadb' | 'sqlite';

function mysqlPool(connectionLimit: number) {
  const c = serverConnection('mariadb');
  return createPool({
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
    connectionLimit,
  });
}

/**
 * A Kysely instance on the database, with the dialect an app on it uses, and a plugin that
 * renames every column it answers: the outbox must read its rows without it.
 */
function openKysely(database: Database, file: string): Kysely<unknown> {
  const plugins = [new CamelCasePlugin()];
  if (database === 'postgres') {
    return new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: pgPool(4) as unknown as PostgresPool }),
      plugins,
    });
  }
  if (database === 'mariadb') {
    return new Kysely<unknown>({ dialect: new MysqlDialect({ pool: mysqlPool(4) }), plugins });
  }
  return new Kysely<unknown>({
    dialect: new SqliteDialect({ database: openSqliteFile(file) as unknown as SqliteDatabase }),
    plugins,
  });
}

/** Runs `work` in a Kysely transaction; rolled back (by throwing) when asked. */
async function inTransaction<T>(
  db: Kysely<unknown>,
  work: (trx: KyselyTransaction) => Promise<T>,
  rollback = false,
): Promise<T> {
  const rolledBack = new Error('rolled back by the test');
  let value: T | undefined;
  try {
    return await db.transaction().execute(async (trx) => {
      value = await work(trx);
      if (rollback) throw rolledBack;
      return value;
    });
  } catch (error) {
    if (error !== rolledBack) throw error;
    return value as T;
  }
}

function fixture(database: Database): ConnectionModuleFixture<KyselyTransaction> {
  const services: ServiceName[] = database === 'sqlite' ? [] : [database];
  let file = '';
  return {
    name: `Kysely on ${database} (nestjs-outbox/kysely)`,
    services,
    dialect: database === 'mariadb' ? 'mysql' : database,
    placeholder: database === 'postgres' ? '$1' : '?',
    setUp() {
      let remove: (() => void) | undefined;
      if (database === 'sqlite') {
        const suite = sqliteFile();
        file = suite.file;
        remove = () => suite.remove();
      }
      const admin = openKysely(database, file);
      return Promise.resolve({
        admin: kyselyOutbox(admin, { databaseFile: file }).sql,
        tearDown: async () => {
          await admin.destroy();
          remove?.();
        },
      });
    },
    openDatabase(): Promise<AppDatabase<KyselyTransaction>> {
      const db = openKysely(database, file);
      return Promise.resolve({
        // The database comes from the adapter; only SQLite's file must be named.
        connection: kyselyOutbox(db, database === 'sqlite' ? { databaseFile: file } : {}),
        inTransaction: (work, rollback) => inTransaction(db, work, rollback),
        // The Kysely instance itself: each statement on it commits alone.
        outsideTransaction: (work) => work(db),
        insertOrder: async (trx, table, id) => {
          await sql`INSERT INTO ${sql.table(table)} (id) VALUES (${id})`.execute(
            trx as Kysely<unknown>,
          );
        },
        ping: async () => {
          await sql`SELECT 1`.execute(db);
        },
        end: () => db.destroy(),
      });
    },
    async inForeignTransaction(work) {
      const other = openKysely(database, file);
      try {
        return await inTransaction(other, work, true);
      } finally {
        await other.destroy();
      }
    },
    foreignMessage: /another Kysely instance/,
    async moreRefusals({ database: app, enqueue, outbox, countRows, removeRows }) {
      // A transaction of the same instance with a plugin more is the same instance's: accepted.
      const accepted = await app.inTransaction((trx) =>
        outbox.enqueue(
          { topic: 'plugins', payload: {} },
          (trx as Transaction<unknown>).withPlugin(new CamelCasePlugin()),
        ),
      );
      expect(await countRows([accepted])).toBe(1);
      await removeRows([accepted]);
      // A controlled transaction once committed is over.
      await app.outsideTransaction(async (db) => {
        const trx = await (db as Kysely<unknown>).startTransaction().execute();
        await trx.commit().execute();
        await expect(enqueue(trx)).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      });
    },
  };
}

describeConnectionModule(fixture('postgres'));
describeConnectionModule(fixture('mariadb'));
describeConnectionModule(fixture('sqlite'));

describe('kyselyOutbox: the database from the dialect', () => {
  it('reads PostgreSQL, MySQL and SQLite from Kysely’s adapters, and asks when it cannot', () => {
    const dbs = [
      new Kysely<unknown>({
        dialect: new PostgresDialect({ pool: {} as unknown as PostgresPool }),
      }),
      new Kysely<unknown>({
        dialect: new MysqlDialect({ pool: {} as unknown as ReturnType<typeof mysqlPool> }),
      }),
      new Kysely<unknown>({ dialect: new SqliteDialect({ database: {} as SqliteDatabase }) }),
    ];
    expect(dbs.map((db) => kyselyOutbox(db).sql.databaseType)).toEqual([
      'postgres',
      'mysql',
      'sqlite',
    ]);
    // An adapter of a dialect the outbox does not know: named by the app, or refused.
    const unknown: KyselyInstance = {
      getExecutor: () => ({ adapter: new (class CustomAdapter {})() }),
      withoutPlugins: () => unknown,
      executeQuery: () => Promise.reject(new Error('not used')),
      transaction: () => {
        throw new Error('not used');
      },
    };
    expect(() => kyselyOutbox(unknown)).toThrow(/cannot tell the database.*CustomAdapter/);
    expect(kyselyOutbox(unknown, { databaseType: 'postgres' }).sql.databaseType).toBe('postgres');
    // kyselySqlPort stays for apps that build the connection themselves.
    expect(
      kyselySqlPort(dbs[0] as Kysely<unknown>, { databaseType: 'postgres' }).databaseType,
    ).toBe('postgres');
  });
});
