import type { SqliteStatement } from '../../store/sqlite/sqlite-connection';

/**
 * The part of better-sqlite3 the port uses, typed here so that the outbox compiles and loads
 * without the library: a better-sqlite3 `Database` fits.
 */

/** A prepared statement: what the SQLite store's own connection runs, and what kind it is. */
export interface BetterSqlite3Statement extends SqliteStatement {
  /** Whether the statement answers rows (a SELECT, or a write with RETURNING). */
  readonly reader: boolean;
  /** Whether the statement leaves the database unchanged. */
  readonly readonly: boolean;
}

/** A better-sqlite3 `Database`: one connection, statements run synchronously. */
export interface BetterSqlite3Database {
  /** The file it was opened on (`:memory:` for an in-memory database). */
  readonly name: string;
  /** Whether it is open (false once closed). */
  readonly open: boolean;
  /** Whether a transaction is open on the connection. */
  readonly inTransaction: boolean;
  prepare(sql: string): BetterSqlite3Statement;
  exec(sql: string): unknown;
}
