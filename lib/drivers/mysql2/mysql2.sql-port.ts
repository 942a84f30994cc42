import type { SqlPort, SqlQueryOptions, SqlResult, SqlRunner } from '../../store/ports/sql-port';
import { executable, type Mysql2Pool, type Mysql2Queryable } from './mysql2-client';

/** The statements of the caller's transaction: the connection they opened `BEGIN` on. */
export function mysql2SqlRunner(connection: Mysql2Queryable): SqlRunner {
  return { query: (sql, params, options) => run(connection, sql, params, options) };
}

/**
 * The outbox's own work on a mysql2 promise pool (MySQL 8 or MariaDB 10.6+): pooled statements
 * and short transactions. No `listen`: MySQL has no notifications, the dispatcher polls.
 */
export function mysql2SqlPort(pool: Mysql2Pool): SqlPort {
  return {
    databaseType: 'mysql',
    // A pool opens connections as statements need them: usable from the start.
    isConnected: true,
    query: (sql, params) => run(pool, sql, params),
    async transaction(work) {
      const connection = await pool.getConnection();
      // A connection whose rollback failed is in an unknown state: closed, not pooled.
      let broken = false;
      try {
        // SET TRANSACTION applies to the next transaction of this session only.
        await connection.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
        await connection.query('BEGIN');
        const value = await work(mysql2SqlRunner(connection));
        await connection.query('COMMIT');
        return value;
      } catch (error) {
        await connection.query('ROLLBACK').catch(() => {
          broken = true;
        });
        throw error;
      } finally {
        if (broken) connection.destroy();
        else connection.release();
      }
    },
    // A connection kept for the outbox: the dispatcher's owner lock (GET_LOCK) lives on it.
    async session() {
      const connection = await pool.getConnection();
      // Heard: the server ending the held connection must not end the process (its next
      // statement fails instead, and the lock is known to be gone).
      const events = connection.connection as Mysql2Events | undefined;
      const heard = (): void => undefined;
      events?.on?.('error', heard);
      let released = false;
      return {
        query: (sql, params) => run(connection, sql, params),
        release(broken) {
          if (!released) {
            released = true;
            events?.removeListener?.('error', heard);
            // Destroyed, it leaves the pool with its session and the locks the session held.
            if (broken) connection.destroy();
            else connection.release();
          }
          return Promise.resolve();
        },
      };
    },
  };
}

/** The callback-API connection's events, where the promise connection exposes it. */
interface Mysql2Events {
  on?(event: 'error', listener: () => void): unknown;
  removeListener?(event: 'error', listener: () => void): unknown;
}

/** mysql2's `ResultSetHeader`, answered for a statement without rows. */
interface ResultSetHeader {
  readonly affectedRows: number;
  readonly insertId: number | string | bigint;
}

function isHeader(value: unknown): value is ResultSetHeader {
  return (
    value !== null && typeof value === 'object' && 'affectedRows' in value && 'insertId' in value
  );
}

async function run<R>(
  target: Mysql2Queryable,
  sql: string,
  params: readonly unknown[] | undefined,
  options?: SqlQueryOptions,
): Promise<SqlResult<R>> {
  const values = params === undefined ? [] : [...params];
  // query, not execute: the statements are sent as the other ports send them (placeholders
  // filled in by the client), with none of the server-side prepared statements' type rules.
  // Only a statement the store names for preparing (the one-message enqueue, whose values are
  // text, bytes and integers) is executed as a prepared statement: parsed once per connection.
  const [result] =
    options?.prepare !== undefined && target.execute !== undefined && executable(values)
      ? await target.execute(sql, values)
      : await target.query(sql, values);
  if (isHeader(result)) {
    return { rows: [], affected: result.affectedRows, insertId: Number(result.insertId) };
  }
  return { rows: Array.isArray(result) ? (result as R[]) : [], affected: 0 };
}
