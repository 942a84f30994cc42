import { is } from 'drizzle-orm';
import { MySqlDatabase, MySqlTransaction } from 'drizzle-orm/mysql-core';
import { PgDatabase, PgTransaction } from 'drizzle-orm/pg-core';
import { BaseSQLiteDatabase, SQLiteTransaction } from 'drizzle-orm/sqlite-core';
import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { SqlRunner } from '../../store/ports/sql-port';
import type { Mysql2Pool } from '../../drivers/mysql2/mysql2-client';
import { poolClients } from '../../drivers/pg/pg-pool-clients';
import { mysql2SqlPort, mysql2SqlRunner } from '../../drivers/mysql2/mysql2.sql-port';
import { mysqlInTransaction } from '../../drivers/mysql2/mysql2-transaction-status';
import type { PgPool, PgPoolClient } from '../../drivers/pg/pg-client';
import { pgSqlPort, pgSqlRunner } from '../../drivers/pg/pg.sql-port';
import { drizzleStatement } from './drizzle-statement';
import {
  libsqlResult,
  libsqlSqlPort,
  type LibsqlClient,
  type LibsqlResultSet,
} from '../../drivers/libsql/libsql.sql-port';

/**
 * A Drizzle database (what `drizzle(pool)` of `drizzle-orm/node-postgres` or
 * `drizzle-orm/mysql2`, or `drizzle(client)` of `drizzle-orm/libsql`, returns), of any schema:
 * `Tx` is the `tx` its `transaction` hands over.
 */
export interface DrizzleDatabase<Tx> {
  /** The driver's pool the database was made on. */
  readonly $client: unknown;
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
}

/** What runs Drizzle's `sql` objects: a database or a transaction, of either dialect. */
interface DrizzleExecutor {
  execute(query: ReturnType<typeof drizzleStatement>): PromiseLike<unknown>;
}

const FIX_TX =
  'call it inside db.transaction(async (tx) => { … }) with that tx ' +
  '(docs/drizzle.md#enqueue-in-your-transaction).';

/**
 * The outbox on a Drizzle database, for `OutboxModule.forRoot({ connection: drizzleOutbox(db) })`;
 * then `outbox.enqueue(event, tx)` with the `tx` of `db.transaction(async (tx) => …)`.
 *
 * The app's statements and the message go through the `tx` (Drizzle's `execute`, so its logger
 * sees them as part of the transaction). The dispatcher, unlocker, cleaner and admin work on the
 * client under the database (`db.$client`), the way `nestjs-outbox/pg` and `mysql2` do: their
 * short transactions need a connection of their own, PostgreSQL wake-ups need a held LISTEN
 * connection that Drizzle does not give, and a poll every few hundred milliseconds has no place
 * in the app's query log. So the database must be made on a pool: node-postgres `pg.Pool` or a
 * mysql2 pool (MySQL 8, MariaDB 10.6+), or on a libSQL client of a local file
 * (`drizzle-orm/libsql`), whose transactions hold a connection of their own. The pool stays the
 * app's: the outbox never ends it.
 *
 * Not on Drizzle's synchronous SQLite drivers (`drizzle-orm/better-sqlite3`, `bun-sqlite`,
 * `sql-js`…): their `db.transaction(fn)` runs `fn` synchronously, so an awaited `enqueue()`
 * cannot run inside it; refused with an `OutboxError` that says what to use instead.
 */
export function drizzleOutbox<Tx>(db: DrizzleDatabase<Tx>): OutboxConnection<Tx> {
  if (is(db, PgDatabase)) return postgres(db.$client);
  if (is(db, MySqlDatabase)) return mysql(db.$client);
  if (is(db, BaseSQLiteDatabase)) return sqlite<Tx>(db);
  throw new OutboxError(
    OutboxMessages.ormUnsupportedClient(
      'this value',
      'drizzleOutbox(db) takes a database of drizzle-orm/node-postgres, drizzle-orm/mysql2 or drizzle-orm/libsql.',
    ),
  );
}

function postgres<Tx>(client: unknown): OutboxConnection<Tx> {
  if (!isPgPool(client)) {
    throw new OutboxError(
      OutboxMessages.ormUnsupportedClient(
        'a Drizzle database made on a single pg.Client or another PostgreSQL driver',
        'make it with drizzle(new Pool(…)) of drizzle-orm/node-postgres: the outbox needs connections of its own next to the app’s transactions.',
      ),
    );
  }
  const clients = poolClients(client);
  return {
    sql: pgSqlPort(client),
    join(tx) {
      const executor = transactionOf(tx, PgTransaction, 'PostgreSQL');
      // Where the transaction's connection can be seen (Drizzle keeps it on its session): it
      // must still be inside BEGIN (a tx kept after its callback ended is back in the pool) and
      // come from this pool. Where it cannot, the instance check above is all there is.
      const connection = sessionClient(tx);
      const status = connection?.getTransactionStatus?.() ?? null;
      if (status !== null && status !== 'T') {
        throw new OutboxTransactionRequiredError(
          OutboxMessages.ormTransactionRequired(
            `a Drizzle transaction whose connection is not in one (status '${status}': its callback has ended, or it failed)`,
            FIX_TX,
          ),
        );
      }
      if (connection !== undefined && clients !== undefined && !clients.has(connection)) {
        throw foreign(
          'pool',
          'Enqueue with a tx of the Drizzle database given to drizzleOutbox(db).',
        );
      }
      return pgSqlRunner({
        query: async (text, values) =>
          (await executor.execute(drizzleStatement(text, values, 'numbered'))) as Awaited<
            ReturnType<PgPool['query']>
          >,
      });
    },
  };
}

function sqlite<Tx>(db: DrizzleDatabase<Tx>): OutboxConnection<Tx> {
  // Drizzle's SQLite databases say whether their statements (and so their transactions) are
  // synchronous; libSQL's and the remote ones' are not.
  if ((db as { resultKind?: unknown }).resultKind !== 'async') {
    throw new OutboxError(
      OutboxMessages.ormUnsupportedClient(
        'a synchronous Drizzle SQLite database (drizzle-orm/better-sqlite3, bun-sqlite, sql-js…)',
        'its db.transaction(fn) runs fn synchronously (better-sqlite3 refuses a callback that returns a promise), so an awaited enqueue() cannot run inside it. ' +
          "Use nestjs-outbox/better-sqlite3's betterSqlite3Outbox(db.$client) and open the transaction on that Database yourself (BEGIN IMMEDIATE … COMMIT, Drizzle's queries in between), " +
          'or drizzle-orm/libsql on a file (docs/drizzle.md#on-sqlite).',
      ),
    );
  }
  const client = libsqlFileClient(db.$client);
  return {
    sql: libsqlSqlPort(client),
    join(tx): SqlRunner {
      if (!is(tx, SQLiteTransaction)) {
        const handle = is(tx, BaseSQLiteDatabase)
          ? 'the Drizzle database itself (each statement would commit on its own)'
          : is(tx, PgTransaction) || is(tx, MySqlTransaction)
            ? undefined
            : tx === undefined
              ? 'nothing'
              : 'a value that is not a Drizzle transaction';
        if (handle === undefined) {
          throw foreign(
            'database',
            'This outbox is on SQLite: enqueue with a tx of its Drizzle database.',
          );
        }
        throw new OutboxTransactionRequiredError(
          OutboxMessages.ormTransactionRequired(handle, FIX_TX),
        );
      }
      // A libSQL transaction's session keeps the client it was begun on, and libSQL's own
      // transaction, which says when it has ended (a tx kept after its callback).
      const session = (tx as { session?: { client?: unknown; tx?: { closed?: unknown } } }).session;
      if (session?.tx?.closed === true) {
        throw new OutboxTransactionRequiredError(
          OutboxMessages.ormTransactionRequired(
            'a Drizzle transaction that has ended (its callback returned or threw)',
            FIX_TX,
          ),
        );
      }
      const txClient = session?.client;
      if (txClient !== undefined && txClient !== client) {
        throw foreign(
          'client',
          'Enqueue with a tx of the Drizzle database given to drizzleOutbox(db).',
        );
      }
      // `run` answers libSQL's whole result set: the rows and the count.
      const run = (tx as unknown as { run(query: unknown): Promise<LibsqlResultSet> }).run.bind(tx);
      return {
        query: async (text, values) =>
          libsqlResult(text, await run(drizzleStatement(text, values, 'question'))),
      };
    },
  };
}

/** The libSQL client of a local file under a `drizzle-orm/libsql` database. */
function libsqlFileClient(client: unknown): LibsqlClient {
  const protocol = (client as { protocol?: unknown } | null)?.protocol;
  if (
    protocol === 'file' &&
    typeof (client as { transaction?: unknown }).transaction === 'function' &&
    typeof (client as { execute?: unknown }).execute === 'function'
  ) {
    return client as LibsqlClient;
  }
  throw new OutboxError(
    OutboxMessages.ormUnsupportedClient(
      typeof protocol === 'string'
        ? `Drizzle on a libSQL server (${protocol}:)`
        : 'this asynchronous Drizzle SQLite database (D1, sqlite-proxy, op-sqlite…)',
      'the dispatcher needs a local database file to open a connection of its own. drizzleOutbox(db) runs on drizzle-orm/libsql with createClient({ url: "file:…" }).',
    ),
  );
}

function mysql<Tx>(client: unknown): OutboxConnection<Tx> {
  const pool = mysqlPool(client);
  if (pool === undefined) {
    throw new OutboxError(
      OutboxMessages.ormUnsupportedClient(
        'a Drizzle database made on a single mysql2 connection',
        'make it with drizzle(createPool(…)) of drizzle-orm/mysql2: the outbox needs connections of its own next to the app’s transactions.',
      ),
    );
  }
  return {
    sql: mysql2SqlPort(pool),
    join(tx): SqlRunner {
      const executor = transactionOf(tx, MySqlTransaction, 'MySQL');
      const query = async (text: string, values?: unknown[]) =>
        (await executor.execute(drizzleStatement(text, values ?? [], 'question'))) as readonly [
          unknown,
          unknown,
        ];
      const runner = mysql2SqlRunner({ query });
      // A tx kept after its callback ended runs on a connection back in the pool, where each
      // statement commits on its own: the server's status says so before the first one.
      let checked: Promise<void> | undefined;
      return {
        async query(sql, params, options) {
          checked ??= mysqlInTransaction((text) => query(text)).then((inTransaction) => {
            if (inTransaction === false) {
              throw new OutboxTransactionRequiredError(
                OutboxMessages.ormTransactionRequired(
                  'a Drizzle transaction whose connection is in none (its callback has ended, so it is back in the pool)',
                  FIX_TX,
                ),
              );
            }
          });
          await checked;
          return runner.query(sql, params, options);
        },
      };
    },
  };
}

/**
 * `tx` as a transaction of the expected dialect: a Drizzle database (not a transaction) or
 * anything else is refused as no transaction, one of another dialect as another database's.
 */
function transactionOf(
  tx: unknown,
  kind: typeof PgTransaction | typeof MySqlTransaction,
  database: string,
): DrizzleExecutor {
  if (is(tx, kind)) return tx;
  if (is(tx, PgTransaction) || is(tx, MySqlTransaction) || is(tx, SQLiteTransaction)) {
    throw foreign(
      'database',
      `This outbox is on ${database}: enqueue with a tx of its Drizzle database.`,
    );
  }
  const handle =
    is(tx, PgDatabase) || is(tx, MySqlDatabase)
      ? 'the Drizzle database itself (each statement would commit on its own)'
      : tx === undefined
        ? 'nothing'
        : 'a value that is not a Drizzle transaction';
  throw new OutboxTransactionRequiredError(OutboxMessages.ormTransactionRequired(handle, FIX_TX));
}

function foreign(owner: string, fix: string): OutboxError {
  return new OutboxError(OutboxMessages.foreignTransaction('Drizzle transaction', owner, fix));
}

function isPgPool(client: unknown): client is PgPool {
  // `pg.Pool` counts its clients; a `pg.Client` (one connection, shared by every transaction
  // Drizzle opens on it) has `connect` too, but no count.
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof (client as { connect?: unknown }).connect === 'function' &&
    typeof (client as { totalCount?: unknown }).totalCount === 'number'
  );
}

/** A mysql2 promise pool for the port: Drizzle keeps the pool it was given, callback or promise. */
function mysqlPool(client: unknown): Mysql2Pool | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  if (typeof (client as { getConnection?: unknown }).getConnection !== 'function') return undefined;
  const promise = (client as { promise?: unknown }).promise;
  // A callback pool's promise() wraps the same pool; a promise pool has no promise().
  return typeof promise === 'function'
    ? (promise as () => Mysql2Pool).call(client)
    : (client as Mysql2Pool);
}

/** The node-postgres client a Drizzle transaction runs on, where its session shows it. */
function sessionClient(tx: unknown): PgPoolClient | undefined {
  const session = (tx as { _?: { session?: unknown } })._?.session;
  const client = (session as { client?: unknown } | undefined)?.client;
  return typeof client === 'object' &&
    client !== null &&
    typeof (client as { release?: unknown }).release === 'function'
    ? (client as PgPoolClient)
    : undefined;
}
