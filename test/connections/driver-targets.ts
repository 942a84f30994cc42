import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  Kysely,
  MysqlDialect,
  PostgresDialect,
  SqliteDialect,
  type PostgresPool,
  type SqliteDatabase,
} from 'kysely';
import { createPool as createMysql2Pool } from 'mysql2';
import {
  createPool as createMysql2PromisePool,
  type Pool as Mysql2PromisePool,
} from 'mysql2/promise';
import {
  betterSqlite3SqlPort,
  betterSqlite3SqlRunner,
  type BetterSqlite3Database,
} from '../../lib/connections/better-sqlite3';
import { kyselySqlPort, kyselySqlRunner } from '../../lib/connections/kysely';
import { mysql2SqlPort, mysql2SqlRunner } from '../../lib/connections/mysql2';
import { pgSqlPort, pgSqlRunner, type PgPool, type PgPoolClient } from '../../lib/connections/pg';
import type { StoreConformanceTarget } from '../../lib/testing';
import { serverConnection } from '../support/databases';

// The local driver types cover what the ports use, not all that Kysely's dialects call: the
// real pool and Database are what the dialects get, hence the casts below.

// The store conformance targets of the plain-driver and Kysely ports. Each case gets a fresh
// pool or file and a caller's transaction written the way an app of that library writes it.

/** node-postgres, typed locally: the project has no @types/pg. */
interface PgConfig {
  host: string;
  port: number;
  user: string;
  password?: string;
  database: string;
  max?: number;
}
export interface PgPoolForTests extends PgPool {
  end(): Promise<void>;
  readonly idleCount: number;
  readonly totalCount: number;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'connect', listener: (client: PgPoolClient) => void): unknown;
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as { Pool: new (config: PgConfig) => PgPoolForTests };

/** better-sqlite3, typed locally: the project has no @types/better-sqlite3. */
export interface SqliteDatabaseForTests extends BetterSqlite3Database {
  pragma(source: string): unknown;
  close(): unknown;
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const BetterSqlite3 = require('better-sqlite3') as new (file: string) => SqliteDatabaseForTests;

/**
 * A node-postgres pool on the test server. `appListener: false` leaves out the app's pool 'error'
 * listener, for a pool handed to the outbox whose own handling a test must prove.
 */
export function pgPool(
  max = 10,
  at: { port?: number; appListener?: boolean; database?: string } = {},
): PgPoolForTests {
  const c = serverConnection('postgres');
  const pool = new pg.Pool({
    host: c.host,
    port: at.port ?? c.port,
    user: c.username,
    password: c.password,
    database: at.database ?? c.database,
    max,
  });
  // An idle client whose server connection dies is reported here; unheard, it would crash jest.
  if (at.appListener !== false) pool.on('error', () => undefined);
  return pool;
}

function mysqlConfig(database?: string) {
  const c = serverConnection('mariadb');
  return {
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: database ?? c.database,
    connectionLimit: 10,
  };
}

/** A mysql2 promise pool on the test MariaDB, as an app without an ORM opens one. */
export function mariadbPool(connectionLimit = 10): Mysql2PromisePool {
  return createMysql2PromisePool({ ...mysqlConfig(), connectionLimit });
}

/** Another connection (Database) to an existing SQLite file. */
export function openSqliteFile(file: string): SqliteDatabaseForTests {
  return new BetterSqlite3(file);
}

/** A SQLite file in a directory of its own, in WAL mode as the dispatcher expects it. */
export function sqliteFile(): { db: SqliteDatabaseForTests; file: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-orm-sqlite-'));
  const file = join(dir, 'test.sqlite');
  const db = new BetterSqlite3(file);
  db.pragma('journal_mode = WAL');
  return {
    db,
    file,
    remove: () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const pgTarget: StoreConformanceTarget = {
  name: 'pg',
  setUp() {
    const pool = pgPool();
    return Promise.resolve({
      sql: pgSqlPort(pool),
      async inTransaction(work) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const value = await work(pgSqlRunner(client));
          await client.query('COMMIT');
          return value;
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        } finally {
          client.release();
        }
      },
      tearDown: () => pool.end(),
    });
  },
};

export const mysql2Target: StoreConformanceTarget = {
  name: 'mysql2-mariadb',
  setUp() {
    const pool = createMysql2PromisePool(mysqlConfig());
    return Promise.resolve({
      sql: mysql2SqlPort(pool),
      async inTransaction(work) {
        const connection = await pool.getConnection();
        try {
          await connection.beginTransaction();
          const value = await work(mysql2SqlRunner(connection));
          await connection.commit();
          return value;
        } catch (error) {
          await connection.rollback();
          throw error;
        } finally {
          connection.release();
        }
      },
      tearDown: () => pool.end(),
    });
  },
};

export const betterSqlite3Target: StoreConformanceTarget = {
  name: 'better-sqlite3',
  setUp() {
    const { db, remove } = sqliteFile();
    return Promise.resolve({
      sql: betterSqlite3SqlPort(db),
      async inTransaction(work) {
        db.exec('BEGIN IMMEDIATE');
        try {
          const value = await work(betterSqlite3SqlRunner(db));
          db.exec('COMMIT');
          return value;
        } catch (error) {
          db.exec('ROLLBACK');
          throw error;
        }
      },
      tearDown: () => Promise.resolve(remove()),
    });
  },
};

/** Kysely on each test database, with the dialect an app on that database uses. */
export function kyselyTarget(database: 'postgres' | 'mariadb' | 'sqlite'): StoreConformanceTarget {
  return {
    name: `kysely-${database}`,
    setUp() {
      const { db, sql, remove } = openKysely(database);
      return Promise.resolve({
        sql,
        inTransaction: (work) => db.transaction().execute((trx) => work(kyselySqlRunner(trx))),
        tearDown: async () => {
          await db.destroy();
          remove?.();
        },
      });
    },
  };
}

/**
 * Kysely on a test database; `on` names another database of the same server than the suites'
 * (PostgreSQL, MariaDB), which must exist.
 */
export function openKysely(database: 'postgres' | 'mariadb' | 'sqlite', on?: string) {
  if (database === 'postgres') {
    const db = new Kysely<unknown>({
      dialect: new PostgresDialect({
        pool: pgPool(10, { database: on }) as unknown as PostgresPool,
      }),
    });
    return { db, sql: kyselySqlPort(db, { databaseType: 'postgres' }) };
  }
  if (database === 'mariadb') {
    const db = new Kysely<unknown>({
      dialect: new MysqlDialect({ pool: createMysql2Pool(mysqlConfig(on)) }),
    });
    return { db, sql: kyselySqlPort(db, { databaseType: 'mariadb' }) };
  }
  // Kysely closes the Database on destroy(); remove() then only deletes the directory.
  const sqlite = sqliteFile();
  const db = new Kysely<unknown>({
    dialect: new SqliteDialect({ database: sqlite.db as unknown as SqliteDatabase }),
  });
  return {
    db,
    sql: kyselySqlPort(db, { databaseType: 'sqlite', databaseFile: sqlite.file }),
    remove: () => sqlite.remove(),
  };
}
