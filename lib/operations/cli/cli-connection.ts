import { existsSync } from 'node:fs';
import { OutboxError } from '../../errors/outbox.error';
import { describeError } from '../../internal/describe-error';
import type { SqlPort } from '../../store/ports/sql-port';
import type { OutboxDialect } from '../../store/schema/outbox-table-ddl';
import { betterSqlite3SqlPort } from '../../drivers/better-sqlite3/better-sqlite3.sql-port';
import type { BetterSqlite3Database } from '../../drivers/better-sqlite3/better-sqlite3-client';
import { mysql2SqlPort } from '../../drivers/mysql2/mysql2.sql-port';
import type { Mysql2Pool } from '../../drivers/mysql2/mysql2-client';
import { pgSqlPort } from '../../drivers/pg/pg.sql-port';
import type { PgPool } from '../../drivers/pg/pg-client';
import { CliMessages } from './cli.messages';
import type { CliDatabase, CliMysqlServer } from './database-url';

/** The CLI's connection: the SQL port the commands run on, and how to let it go. */
export interface CliConnection {
  readonly sql: SqlPort;
  close(): Promise<void>;
}

const CONNECT_TIMEOUT_MS = 10_000;
// `stats` runs two reads at once; no command needs more.
const POOL_SIZE = 2;

interface PgModule {
  Pool: new (config: {
    connectionString: string;
    connectionTimeoutMillis: number;
    application_name: string;
    max: number;
  }) => PgPool & { end(): Promise<void>; on(event: 'error', listener: () => void): unknown };
}

interface Mysql2Module {
  createPool(
    this: void,
    config: CliMysqlServer & { connectTimeout: number; connectionLimit: number },
  ): Mysql2Pool & { end(): Promise<void> };
}

type BetterSqlite3Constructor = new (
  file: string,
  options: { fileMustExist: boolean },
) => BetterSqlite3Database & { pragma(source: string): unknown; close(): unknown };

/** DATABASE_URL's database of one dialect. */
type CliDatabaseOf<D extends OutboxDialect> = Extract<CliDatabase, { readonly dialect: D }>;

/**
 * The driver a database is reached through: the package the app already has for its own
 * connection, whatever its ORM (TypeORM, Prisma, Drizzle, MikroORM and Kysely all sit on these).
 */
interface CliDriverPackage {
  readonly database: string;
  readonly driver: string;
  readonly npmPackage: string;
  /** The module `import()`ed, only when the command connects. */
  readonly load: string;
}

interface CliDriver<D extends OutboxDialect> extends CliDriverPackage {
  open(db: CliDatabaseOf<D>, createFile: boolean): Promise<CliConnection>;
}

const DRIVERS: { readonly [D in OutboxDialect]: CliDriver<D> } = {
  postgres: {
    database: 'PostgreSQL',
    driver: 'node-postgres',
    npmPackage: 'pg',
    load: 'pg',
    async open(db) {
      const { Pool } = exportsOf<PgModule>(await loadDriver(this), 'Pool');
      const pool = new Pool({
        connectionString: db.url,
        connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
        application_name: 'nestjs-outbox-cli',
        max: POOL_SIZE,
      });
      // An idle client the server drops emits 'error' on the pool, which would end the process
      // with a stack; the next statement fails on its own, with the one-line report.
      pool.on('error', () => undefined);
      return probed({ sql: pgSqlPort(pool), close: () => pool.end() }, 'the postgres database');
    },
  },
  mysql: {
    database: 'MySQL or MariaDB',
    driver: 'mysql2',
    npmPackage: 'mysql2',
    load: 'mysql2/promise',
    async open(db) {
      const { createPool } = exportsOf<Mysql2Module>(await loadDriver(this), 'createPool');
      const pool = createPool({
        ...db.server,
        connectTimeout: CONNECT_TIMEOUT_MS,
        connectionLimit: POOL_SIZE,
      });
      return probed({ sql: mysql2SqlPort(pool), close: () => pool.end() }, 'the mysql database');
    },
  },
  sqlite: {
    database: 'SQLite',
    driver: 'better-sqlite3',
    npmPackage: 'better-sqlite3',
    load: 'better-sqlite3',
    async open(db, createFile) {
      if (!createFile && !existsSync(db.file)) {
        throw new OutboxError(CliMessages.sqliteFileMissing(db.file));
      }
      const Database = sqliteConstructor(await loadDriver(this));
      const sqlite = openSqlite(Database, db.file, createFile);
      return {
        sql: betterSqlite3SqlPort(sqlite),
        close: () => {
          sqlite.close();
          return Promise.resolve();
        },
      };
    },
  },
};

/**
 * Connects to the database DATABASE_URL names through its driver, loaded only now: `schema
 * print` needs none, and an app has only the driver of its own database. `createFile`: a SQLite
 * file that does not exist is made (for `schema migrate`) instead of refused.
 */
export function openCliConnection(db: CliDatabase, createFile: boolean): Promise<CliConnection> {
  // Each entry takes its own dialect's database, which TypeScript cannot pair with `db` here.
  const driver = DRIVERS[db.dialect] as CliDriver<CliDatabase['dialect']>;
  return driver.open(db, createFile);
}

function openSqlite(
  Database: BetterSqlite3Constructor,
  file: string,
  createFile: boolean,
): InstanceType<BetterSqlite3Constructor> {
  let sqlite: InstanceType<BetterSqlite3Constructor> | undefined;
  try {
    sqlite = new Database(file, { fileMustExist: !createFile });
    // As the app's dispatcher opens it: readers never wait for the writer.
    sqlite.pragma('journal_mode = WAL');
    return sqlite;
  } catch (error) {
    sqlite?.close();
    throw new OutboxError(
      CliMessages.cannotConnect(`the SQLite file ${file}`, describeError(error)),
    );
  }
}

/**
 * A pool connects on its first statement: one now, so that a wrong host or password is reported
 * as the connection failing, not as whichever command ran first.
 */
async function probed(connection: CliConnection, where: string): Promise<CliConnection> {
  try {
    await connection.sql.query('SELECT 1');
  } catch (error) {
    await connection.close().catch(() => undefined);
    throw new OutboxError(CliMessages.cannotConnect(where, describeError(error)));
  }
  return connection;
}

async function loadDriver(driver: CliDriverPackage): Promise<unknown> {
  try {
    return (await import(driver.load)) as unknown;
  } catch (error) {
    if (!isMissing(error, driver.load)) throw error;
    throw new OutboxError(
      CliMessages.driverMissing(driver.database, driver.driver, driver.npmPackage),
    );
  }
}

/**
 * Whether `error` says that `name` itself is not installed: a package that is there but fails
 * to load, or lacks one of its own dependencies, is reported as it is.
 */
function isMissing(error: unknown, name: string): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return (
    (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') &&
    typeof message === 'string' &&
    message.includes(`'${name}'`)
  );
}

/**
 * The driver's exports, whichever way the module system handed them over: as the module itself
 * (CommonJS) or under `default` (the interop wrapper of a compiled `import()`).
 */
function exportsOf<T>(loaded: unknown, name: keyof T & string): T {
  const module = loaded as Record<string, unknown> | null;
  if (typeof module?.[name] === 'function') return module as T;
  const inner = module?.default as Record<string, unknown> | undefined;
  if (typeof inner?.[name] === 'function') return inner as T;
  throw new OutboxError(CliMessages.driverUnusable(name));
}

function sqliteConstructor(loaded: unknown): BetterSqlite3Constructor {
  if (typeof loaded === 'function') return loaded as BetterSqlite3Constructor;
  const inner = (loaded as { default?: unknown } | null)?.default;
  if (typeof inner === 'function') return inner as BetterSqlite3Constructor;
  throw new OutboxError(CliMessages.driverUnusable('its Database class'));
}
