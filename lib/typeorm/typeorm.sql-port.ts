import type { DataSource, QueryRunner } from 'typeorm';
import type {
  OneTripStatement,
  SqlListenLost,
  SqlPort,
  SqlQueryOptions,
  SqlResult,
  SqlRunner,
  SqlSession,
} from '../store/ports/sql-port';
import {
  heldStatement,
  holdsStatement,
  oneTripQuery,
  oneTripResult,
  statementGone,
} from '../drivers/postgres-one-trip';
import { executable, type Mysql2ExecuteValue } from '../drivers/mysql2/mysql2-client';
import { pgInOpenTransaction } from '../drivers/pg/pg-client';
import type { BetterSqlite3Database } from '../drivers/better-sqlite3/better-sqlite3-client';
import { betterSqlite3SqlRunner } from '../drivers/better-sqlite3/better-sqlite3.sql-port';
import { OutboxTransactionRequiredError } from '../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../outbox.messages';
import type { OutboxDriverType } from '../store/outbox-databases';

// TypeORM as the SQL port. Every statement goes through a QueryRunner with TypeORM's structured
// result: `DataSource.query` answers an UPDATE … RETURNING as [rows, count] on PostgreSQL and a
// DELETE as a header object on MySQL, so the plain form would hide rows or counts.

/** The statements of the caller's transaction (an EntityManager's active QueryRunner). */
export function typeormSqlRunner(runner: QueryRunner): SqlRunner {
  return typeormDriverOf(runner.connection.options.type).runner(runner);
}

/** A statement sent to a runner's connection prepared under `name`. */
type PreparedQuery = <R>(
  runner: QueryRunner,
  name: string,
  sql: string,
  params: readonly unknown[] | undefined,
  inTransaction?: SqlQueryOptions['inTransaction'],
) => Promise<SqlResult<R>>;

/** What the port does on one TypeORM driver. */
interface TypeormDriver {
  /** The statements of the caller's transaction. */
  runner(runner: QueryRunner): SqlRunner;
  /** SQLite: a database file, and transactions serializable whatever is asked. */
  readonly sqlite: boolean;
  /** The members of the port the driver has beyond statements and transactions. */
  extras(
    dataSource: DataSource,
  ): Pick<SqlPort, 'session' | 'listen' | 'transactionOpening' | 'transactionStatement'>;
}

/** TypeORM's query, or the driver's prepared statement where the store names one. */
function queryRunner(prepared: PreparedQuery | undefined): TypeormDriver['runner'] {
  return (runner) => ({
    query: (sql, params, options) =>
      prepared !== undefined && options?.prepare !== undefined && !runner.isReleased
        ? prepared(runner, options.prepare, sql, params, options.inTransaction)
        : structuredQuery(runner, sql, params),
  });
}

const MYSQL_DRIVER: TypeormDriver = {
  runner: queryRunner(executedQuery),
  sqlite: false,
  extras: (dataSource) => ({ session: () => typeormSession(dataSource) }),
};

const SQLITE = { sqlite: true, extras: () => ({}) } as const;

/** The TypeORM drivers the outbox supports (`OUTBOX_DATABASES`), each as the port runs it. */
const TYPEORM_DRIVERS: Readonly<Record<OutboxDriverType, TypeormDriver>> = {
  postgres: {
    runner: queryRunner(preparedQuery),
    sqlite: false,
    extras: (dataSource) => ({
      session: () => typeormSession(dataSource),
      listen: (...args) => postgresListen(dataSource, ...args),
      transactionOpening: (opening, work) => postgresTransaction(dataSource, opening, work),
      transactionStatement: (opening, statement, onSent) =>
        postgresStatementTransaction(dataSource, opening, statement, onSent),
    }),
  },
  mysql: MYSQL_DRIVER,
  mariadb: MYSQL_DRIVER,
  sqlite: { ...SQLITE, runner: queryRunner(undefined) },
  'better-sqlite3': {
    ...SQLITE,
    runner: (runner) => ({ query: (sql, params) => sqliteQuery(runner, sql, params) }),
  },
};

/** A driver the outbox does not support: the bootstrap refuses it by name. */
const OTHER_DRIVER: TypeormDriver = {
  runner: queryRunner(undefined),
  sqlite: false,
  extras: () => ({}),
};

function typeormDriverOf(type: string): TypeormDriver {
  return Object.prototype.hasOwnProperty.call(TYPEORM_DRIVERS, type)
    ? TYPEORM_DRIVERS[type as OutboxDriverType]
    : OTHER_DRIVER;
}

/**
 * SQLite: a statement of the caller's transaction on better-sqlite3's one connection, run only
 * if that transaction is still open, checked in the same synchronous step as the statement:
 * TypeORM's `query` awaits before it runs one, and a ROLLBACK that runs meanwhile (an enqueue
 * not awaited before the transaction ended) would leave the statement to commit on its own.
 */
async function sqliteQuery<R>(
  runner: QueryRunner,
  sql: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const db = (await runner.connect()) as BetterSqlite3Database;
  if (!db.inTransaction) {
    throw new OutboxTransactionRequiredError(OutboxMessages.transactionEndedBeforeWrite());
  }
  const values = params === undefined ? [] : [...params];
  // Nothing is awaited between the check and the statement: loggedAsQuery calls it at once,
  // and better-sqlite3 runs it synchronously.
  return loggedAsQuery(runner, sql, values, () => betterSqlite3SqlRunner(db).query<R>(sql, values));
}

// node-postgres' client as a named statement needs it: the config form of `query`.
interface NamedStatementClient {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{
    rows?: unknown[];
    rowCount?: number | null;
  }>;
}

/**
 * A statement node-postgres prepares on the runner's connection under `name` the first time and
 * executes by name afterwards. `QueryRunner.query` takes only text, so this sends it to the
 * runner's own connection, logging and failing as `query` does (TypeORM's logger, its slow-query
 * log, a `QueryFailedError` wrapping the driver's error), so that the caller's transaction sees
 * the same errors as from its own statements. Not mirrored: the `beforeQuery`/`afterQuery`
 * subscriber events of recent TypeORM releases, whose form changes between them.
 */
async function preparedQuery<R>(
  runner: QueryRunner,
  name: string,
  sql: string,
  params: readonly unknown[] | undefined,
  inTransaction?: SqlQueryOptions['inTransaction'],
): Promise<SqlResult<R>> {
  const client = (await runner.connect()) as NamedStatementClient;
  const values = params === undefined ? [] : [...params];
  // Checked after the await above and in the same step as the send: loggedAsQuery calls it at once.
  const checked =
    inTransaction?.prepare !== undefined && pgInOpenTransaction(client) ? inTransaction : undefined;
  const text = checked?.text ?? sql;
  const statement = checked?.prepare ?? name;
  return loggedAsQuery(runner, text, values, async () => {
    const raw = await client.query({ name: statement, text, values });
    return { rows: (raw.rows ?? []) as R[], affected: raw.rowCount ?? 0 };
  });
}

/**
 * Runs `send` (a statement sent past `QueryRunner.query`) logging and failing as `query` does:
 * TypeORM's logger, its slow-query log, a `QueryFailedError` wrapping the driver's error.
 */
async function loggedAsQuery<T>(
  runner: QueryRunner,
  sql: string,
  values: unknown[],
  send: () => Promise<T>,
): Promise<T> {
  const { logger } = runner.connection;
  logger.logQuery(sql, values, runner);
  try {
    const started = Date.now();
    const result = await send();
    const took = Date.now() - started;
    const slow = runner.connection.options.maxQueryExecutionTime;
    if (slow !== undefined && slow > 0 && took > slow)
      logger.logQuerySlow(took, sql, values, runner);
    return result;
  } catch (error) {
    const cause = error instanceof Error ? error : new Error(String(error));
    logger.logQueryError(cause, sql, values, runner);
    throw queryFailed(sql, values, cause);
  }
}

// mysql2's callback connection, as TypeORM's MySQL driver holds it; the older mysql package has
// no execute, and its statements run as text.
interface ExecutingConnection {
  execute(
    sql: string,
    values: Mysql2ExecuteValue[],
    callback: (error: Error | null, result: unknown) => void,
  ): unknown;
}

function canExecute(connection: unknown): connection is ExecutingConnection {
  return (
    connection !== null &&
    typeof connection === 'object' &&
    typeof (connection as { execute?: unknown }).execute === 'function'
  );
}

/**
 * MySQL/MariaDB: a statement mysql2 prepares on the runner's connection the first time and
 * executes by its handle afterwards (it keeps them per connection, by text; the name is not
 * needed). Logged and failing as `query` does, like `preparedQuery`.
 */
async function executedQuery<R>(
  runner: QueryRunner,
  _name: string,
  sql: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const connection: unknown = await runner.connect();
  const values = params === undefined ? [] : [...params];
  if (!canExecute(connection) || !executable(values)) return structuredQuery(runner, sql, params);
  return loggedAsQuery(runner, sql, values, async () => {
    const raw = await new Promise<unknown>((resolve, reject) => {
      connection.execute(sql, values, (error, result) => (error ? reject(error) : resolve(result)));
    });
    if (Array.isArray(raw)) return { rows: raw as R[], affected: 0 };
    const header = (raw ?? {}) as { affectedRows?: unknown; insertId?: unknown };
    return {
      rows: [],
      affected: Number(header.affectedRows ?? 0),
      ...(header.insertId === undefined ? {} : { insertId: Number(header.insertId) }),
    };
  });
}

/** TypeORM's own error for a failed statement, as its `query` throws it. */
function queryFailed(sql: string, values: unknown[], cause: Error): Error {
  // Loaded here, not imported: the core loads without TypeORM installed, and only an app on
  // TypeORM reaches this.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { QueryFailedError } = require('typeorm') as typeof import('typeorm');
  return new QueryFailedError(sql, values, cause);
}

/** The outbox's own work on a DataSource: pooled statements, short transactions, LISTEN. */
export function typeormSqlPort(dataSource: DataSource): SqlPort {
  const type = dataSource.options.type;
  const file = (dataSource.options as { database?: unknown }).database;
  const driver = typeormDriverOf(type);
  const { sqlite } = driver;
  return {
    databaseType: type,
    get isConnected() {
      return dataSource.isInitialized;
    },
    databaseFile: sqlite && typeof file === 'string' ? file : undefined,
    async query(sql, params) {
      const runner = dataSource.createQueryRunner();
      try {
        return await structuredQuery(runner, sql, params);
      } finally {
        await runner.release();
      }
    },
    async transaction(work) {
      const runner = dataSource.createQueryRunner('master');
      try {
        await runner.connect();
        // TypeORM refuses any level but SERIALIZABLE and READ UNCOMMITTED on SQLite, whose
        // transactions are serializable anyway.
        await runner.startTransaction(sqlite ? undefined : 'READ COMMITTED');
        const value = await work(typeormSqlRunner(runner));
        await runner.commitTransaction();
        return value;
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
        throw error;
      } finally {
        await runner.release();
      }
    },
    ...driver.extras(dataSource),
  } satisfies SqlPort;
}

/** A QueryRunner kept connected (`SqlPort.session`). */
async function typeormSession(dataSource: DataSource): Promise<SqlSession> {
  const runner = dataSource.createQueryRunner('master');
  await runner.connect();
  return {
    query: (sql, params) => structuredQuery(runner, sql, params),
    async release(broken) {
      if (runner.isReleased) return;
      // A broken connection is closed, with its session: what it held must not go back to the
      // pool. node-postgres' pool closes a client released with an error (TypeORM's
      // releasePostgresConnection); mysql2's connection leaves its pool when destroyed.
      const pg = runner as unknown as {
        releasePostgresConnection?: (error?: Error) => Promise<void>;
      };
      if (broken && typeof pg.releasePostgresConnection === 'function') {
        await pg.releasePostgresConnection(new Error('outbox session closed'));
        return;
      }
      if (broken) {
        const client = (runner as unknown as { databaseConnection?: { destroy?: () => void } })
          .databaseConnection;
        client?.destroy?.();
      }
      await runner.release();
    },
  };
}

async function structuredQuery<R>(
  runner: QueryRunner,
  sql: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const result = await runner.query(sql, params === undefined ? [] : [...params], true);
  const raw: unknown = result.raw;
  const insertId =
    raw !== null && typeof raw === 'object' && 'insertId' in raw ? Number(raw.insertId) : undefined;
  return {
    rows: Array.isArray(result.records) ? (result.records as R[]) : [],
    affected: result.affected ?? 0,
    ...(insertId === undefined ? {} : { insertId }),
  };
}

/**
 * A READ COMMITTED transaction whose BEGIN carries `opening` in one simple query (a statement
 * without parameters goes to node-postgres as one). Opened by hand, not by `startTransaction`,
 * which sends the BEGIN and its isolation level as two more round trips; the outbox's own short
 * transactions need none of TypeORM's transaction events.
 */
async function postgresTransaction<T>(
  dataSource: DataSource,
  opening: readonly string[],
  work: (tx: SqlRunner) => Promise<T>,
): Promise<T> {
  const runner = dataSource.createQueryRunner('master');
  let open = false;
  try {
    await runner.connect();
    open = true;
    await runner.query(['BEGIN ISOLATION LEVEL READ COMMITTED', ...opening].join('; '));
    const value = await work(typeormSqlRunner(runner));
    open = false;
    await runner.query('COMMIT');
    return value;
  } catch (error) {
    // A failed BEGIN or COMMIT leaves nothing open (PostgreSQL ends a failed COMMIT's
    // transaction); a ROLLBACK after them would only warn.
    if (open) await runner.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    await runner.release();
  }
}

// node-postgres' client as `transactionStatement` sends its one simple query on it.
interface SimpleQueryClient {
  query(text: string): Promise<unknown>;
}

/**
 * One named statement in a transaction of its own (`SqlPort.transactionStatement`), on the
 * runner's node-postgres client: one simple query when the client holds the statement, else
 * as `postgresTransaction` with the statement prepared by name, after which it holds it. The
 * simple query goes to the client itself (TypeORM's `query` keeps one result of a query that
 * answers several), logged and failing as `query` does.
 */
async function postgresStatementTransaction<R>(
  dataSource: DataSource,
  opening: readonly string[],
  statement: OneTripStatement,
  onSent?: () => void,
): Promise<SqlResult<R>> {
  const runner = dataSource.createQueryRunner('master');
  let open = false;
  try {
    const client = (await runner.connect()) as SimpleQueryClient;
    if (holdsStatement(client, statement.name)) {
      const text = oneTripQuery(opening, statement);
      // Open from here until an answer: a failure before the COMMIT leaves it so.
      open = true;
      const answer = loggedAsQuery(runner, text, [], () => client.query(text));
      onSent?.();
      try {
        return oneTripResult<R>(await answer, opening);
      } catch (error) {
        if (statementGone(error)) heldStatement(client, statement.name, false);
        throw error;
      }
    }
    // Open from the BEGIN on: its opening (a dispatch lock's wait) may fail after it.
    open = true;
    await runner.query(['BEGIN ISOLATION LEVEL READ COMMITTED', ...opening].join('; '));
    const answer = preparedQuery<R>(runner, statement.name, statement.text, statement.params);
    onSent?.();
    const result = await answer;
    open = false;
    await runner.query('COMMIT');
    heldStatement(client, statement.name, true);
    return result;
  } catch (error) {
    // After a failed COMMIT there is no transaction, and a ROLLBACK would only warn.
    if (open) await runner.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    await runner.release();
  }
}

// The subset of node-postgres' client that LISTEN needs.
interface NotifyingClient {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { payload?: string }) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeAllListeners(event: string): unknown;
}
interface PostgresDriverLike {
  obtainMasterConnection(): Promise<[NotifyingClient, (error?: unknown) => void]>;
}

/** LISTEN on a pool connection held for it; `onLost` once when the connection goes. */
async function postgresListen(
  dataSource: DataSource,
  channel: string,
  onNotify: (payload: string) => void,
  onLost: SqlListenLost,
): Promise<() => Promise<void>> {
  const driver = dataSource.driver as unknown as PostgresDriverLike;
  const [client, release] = await driver.obtainMasterConnection();
  let held = true;
  const drop = (error?: unknown): void => {
    if (!held) return;
    held = false;
    client.removeAllListeners('notification');
    client.removeAllListeners('error');
    client.removeAllListeners('end');
    // A lost connection goes back to the pool marked broken, so the pool closes it.
    release(error ?? true);
  };
  const lose = (error: Error): void => {
    if (!held) return;
    drop(error);
    onLost(error);
  };
  client.on('notification', (message) => onNotify(message.payload ?? ''));
  client.on('error', lose);
  // A connection the server closes cleanly (pg_terminate_backend, a restart, an idle timeout)
  // ends without an 'error': without this, wake-ups would stop for good.
  client.on('end', () => lose(new Error('LISTEN connection ended')));
  try {
    await client.query(`LISTEN ${channel}`);
  } catch (error) {
    drop(error);
    throw error;
  }
  return async () => {
    if (held) await client.query(`UNLISTEN ${channel}`).catch(() => undefined);
    drop();
  };
}
