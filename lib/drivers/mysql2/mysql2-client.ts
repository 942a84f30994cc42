/**
 * The part of mysql2's promise API (`mysql2/promise`) the port uses, typed here so that the
 * outbox compiles and loads without the library: a promise `Pool` and its `PoolConnection` fit.
 */

/** Anything that runs a statement: a promise `Pool`, `PoolConnection` or `Connection`. */
export interface Mysql2Queryable {
  /** Answers `[rows, fields]`, or `[ResultSetHeader, undefined]` for a statement without rows. */
  query(sql: string, values?: unknown[]): Promise<readonly [unknown, unknown]>;
  /**
   * Runs the statement as a server-side prepared statement: prepared on the connection the first
   * time, executed by its handle afterwards (mysql2 keeps them per connection, by text).
   */
  execute?(sql: string, values?: Mysql2ExecuteValue[]): Promise<readonly [unknown, unknown]>;
}

/** A value a prepared statement binds as it is. */
export type Mysql2ExecuteValue =
  string | number | bigint | boolean | Date | null | Buffer | Uint8Array;

/** Whether every value binds as it is (else the statement runs as text, as the others do). */
export function executable(values: readonly unknown[]): values is Mysql2ExecuteValue[] {
  return values.every(
    (v) =>
      v === null ||
      typeof v === 'string' ||
      typeof v === 'number' ||
      typeof v === 'bigint' ||
      typeof v === 'boolean' ||
      v instanceof Date ||
      v instanceof Uint8Array,
  );
}

/** A connection checked out of the pool until `release`. */
export interface Mysql2PoolConnection extends Mysql2Queryable {
  /** The callback-API connection it wraps: what the pool announces with 'connection'. */
  readonly connection?: object;
  release(): void;
  /** Closes the connection instead of returning it to the pool. */
  destroy(): void;
}

/** A promise `Pool` (`mysql2/promise`'s `createPool`, or `pool.promise()`). */
export interface Mysql2Pool extends Mysql2Queryable {
  getConnection(): Promise<Mysql2PoolConnection>;
}
