import { CompiledQuery, type QueryResult } from 'kysely';
import type { SqlPort, SqlResult, SqlRunner } from '../../store/ports/sql-port';
import { outboxDatabase } from '../../store/schema/outbox-table-ddl';

/**
 * What runs a compiled statement: a `Kysely` instance, a `Transaction` or a
 * `ControlledTransaction`, whatever its database interface.
 */
export interface KyselyExecutor {
  executeQuery<R>(query: CompiledQuery<R>): Promise<QueryResult<R>>;
}

/** A `Kysely` instance, of any database interface: the statements and transactions the port uses. */
export interface KyselyDatabase extends KyselyExecutor {
  transaction(): {
    setIsolationLevel(level: 'read committed'): {
      execute<T>(callback: (trx: KyselyExecutor) => Promise<T>): Promise<T>;
    };
  };
}

/**
 * The database behind the Kysely instance, which Kysely does not tell: its dialect's SQL is the
 * outbox's own, so it must be named. SQLite also needs the file, where the dispatcher opens a
 * connection of its own.
 */
export type KyselySqlPortOptions =
  | { readonly databaseType: 'postgres' | 'mysql' | 'mariadb' }
  | { readonly databaseType: 'sqlite'; readonly databaseFile: string };

/** The statements of the caller's transaction (`db.transaction().execute(async (trx) => …)`). */
export function kyselySqlRunner(trx: KyselyExecutor): SqlRunner {
  return { query: (sql, params) => run(trx, sql, params, false) };
}

/**
 * The outbox's own work on a Kysely instance: its statements and short READ COMMITTED
 * transactions. No `listen`: Kysely holds no connection for notifications, so on PostgreSQL
 * the dispatcher polls (and wakes at local commits).
 */
export function kyselySqlPort(db: KyselyDatabase, options: KyselySqlPortOptions): SqlPort {
  const mysql = outboxDatabase(options.databaseType).insertIdReportsWrite;
  return {
    databaseType: options.databaseType,
    // Kysely's drivers connect on first use: usable from the start.
    isConnected: true,
    ...('databaseFile' in options ? { databaseFile: options.databaseFile } : {}),
    query: (sql, params) => run(db, sql, params, mysql),
    transaction: (work) =>
      db
        .transaction()
        .setIsolationLevel('read committed')
        .execute((trx) => work({ query: (sql, params) => run(trx, sql, params, mysql) })),
  };
}

async function run<R>(
  executor: KyselyExecutor,
  sql: string,
  params: readonly unknown[] | undefined,
  mysql: boolean,
): Promise<SqlResult<R>> {
  const result = await executor.executeQuery<R>(
    CompiledQuery.raw(sql, params === undefined ? [] : [...params]),
  );
  const affected = Number(result.numAffectedRows ?? 0n);
  // Kysely leaves out a MySQL insert id of 0, which is how MySQL says an idempotent INSERT wrote
  // nothing; the port says it where it knows the database (the MySQL store reads a missing one
  // as 0 too, so the runner, which does not know, can leave it out).
  const insertId =
    result.insertId !== undefined
      ? Number(result.insertId)
      : mysql && result.numAffectedRows !== undefined
        ? 0
        : undefined;
  return { rows: result.rows, affected, ...(insertId === undefined ? {} : { insertId }) };
}
