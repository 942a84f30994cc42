import { createClient } from '@libsql/client';
import { drizzle as drizzleLibsql } from 'drizzle-orm/libsql';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { createPool } from 'mysql2/promise';
import type { Pool as PgDriverPool } from 'pg';
import {
  drizzleOutbox,
  drizzleStatement,
  type DrizzleDatabase,
} from '../../lib/connections/drizzle';
import { mysql2SqlRunner } from '../../lib/connections/mysql2';
import { pgSqlRunner, type PgQueryResult } from '../../lib/connections/pg';
import type { StoreConformanceTarget } from '../../lib/testing';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { serverConnection } from '../support/databases';
import { pgPool, sqliteFile, type PgPoolForTests } from './driver-targets';

// Drizzle on each test database, the way an app makes it: drizzle(pool) of
// drizzle-orm/node-postgres and drizzle-orm/mysql2, drizzle(client) of drizzle-orm/libsql on a
// local file.

export function drizzleOnPostgres(pool: PgPoolForTests = pgPool()) {
  return drizzlePg({ client: pool as unknown as PgDriverPool });
}

export function mysqlPool(connectionLimit = 10) {
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

export function drizzleOnMariadb(pool = mysqlPool()) {
  return drizzleMysql(pool);
}

/**
 * Drizzle on libSQL, on a fresh file in WAL mode (what the dispatcher's connection expects);
 * `end()` closes the client and removes the file.
 */
export function drizzleOnLibsql() {
  const sqlite = sqliteFile();
  const client = createClient({ url: `file:${sqlite.file}` });
  return {
    db: drizzleLibsql(client),
    file: sqlite.file,
    end: () => {
      client.close();
      sqlite.remove();
      return Promise.resolve();
    },
  };
}

type ServerDb = ReturnType<typeof drizzleOnPostgres> | ReturnType<typeof drizzleOnMariadb>;
type DrizzleDb = ServerDb | ReturnType<typeof drizzleOnLibsql>['db'];

/**
 * `drizzleOutbox(db)` on `database`: its port (on the pool), and the app's transactions as
 * `db.transaction(async (tx) => …)` joined by the connection.
 */
export function drizzleTarget(database: 'postgres' | 'mariadb' | 'sqlite'): StoreConformanceTarget {
  return {
    name: `drizzle-${database}`,
    setUp() {
      const { db, end } = open(database);
      const connection = drizzleOutbox(db as DrizzleDatabase<unknown>);
      return Promise.resolve({
        sql: connection.sql,
        inTransaction: (work) =>
          (db.transaction as (w: (tx: unknown) => Promise<unknown>) => Promise<unknown>)((tx) =>
            work(connection.join(tx)),
          ) as Promise<never>,
        tearDown: end,
      });
    },
  };
}

/**
 * Every statement of the store through Drizzle's `execute` and `transaction` rather than the
 * pool: the claim, settle and admin statements (which use `$1` more than once on PostgreSQL)
 * built by `drizzleStatement`, not only the enqueue's.
 */
export function drizzleExecuteTarget(database: 'postgres' | 'mariadb'): StoreConformanceTarget {
  return {
    name: `drizzle-execute-${database}`,
    setUp() {
      const { db, end } = open(database) as { db: ServerDb; end: () => Promise<void> };
      const connection = drizzleOutbox(db as DrizzleDatabase<unknown>);
      const transaction = db.transaction.bind(db) as (
        work: (tx: unknown) => Promise<unknown>,
        config: { isolationLevel: 'read committed' },
      ) => Promise<unknown>;
      const execute = db.execute.bind(db) as (query: unknown) => Promise<unknown>;
      // The ports' own result mapping, fed by Drizzle's answers.
      const runner =
        database === 'postgres'
          ? pgSqlRunner({
              query: async (text, values) =>
                (await execute(drizzleStatement(text, values, 'numbered'))) as PgQueryResult,
            })
          : mysql2SqlRunner({
              query: async (text, values) =>
                (await execute(drizzleStatement(text, values, 'question'))) as [unknown, unknown],
            });
      const sql: SqlPort = {
        databaseType: connection.sql.databaseType,
        isConnected: true,
        query: (text, params) => runner.query(text, params),
        transaction: (work) =>
          transaction((tx) => work(connection.join(tx)), {
            isolationLevel: 'read committed',
          }) as Promise<never>,
      };
      return Promise.resolve({
        sql,
        inTransaction: (work) =>
          transaction((tx) => work(connection.join(tx)), {
            isolationLevel: 'read committed',
          }) as Promise<never>,
        tearDown: end,
      });
    },
  };
}

function open(database: 'postgres' | 'mariadb' | 'sqlite'): {
  db: DrizzleDb;
  end: () => Promise<void>;
} {
  if (database === 'sqlite') return drizzleOnLibsql();
  if (database === 'postgres') {
    const pool = pgPool();
    return { db: drizzleOnPostgres(pool), end: () => pool.end() };
  }
  const pool = mysqlPool();
  return { db: drizzleOnMariadb(pool), end: () => pool.end() };
}
