import type { SqlPort, SqlRunner } from './sql-port';

/**
 * How `OutboxModule` reaches one database through one library: the SQL port for the outbox's own
 * work (dispatcher, unlocker, cleaner, admin, table checks) and the way into the caller's
 * transaction for `enqueue()`. `Tx` is what the app holds inside its transaction: an
 * EntityManager for TypeORM (`typeormConnection`, what `dataSource` builds), a `PoolClient` for
 * node-postgres (`pgOutbox` of `nestjs-outbox/pg`), a `PoolConnection` for mysql2
 * (`mysql2Outbox`), the `Database` for better-sqlite3 (`betterSqlite3Outbox`), a `Transaction`
 * for Kysely (`kyselyOutbox`).
 */
export interface OutboxConnection<Tx> {
  /** The outbox's own statements and short transactions, never inside the app's. */
  readonly sql: SqlPort;
  /**
   * The statements of the app's transaction `tx`. Throws `OutboxTransactionRequiredError` when
   * `tx` is not inside an open transaction, and an `OutboxError` when it is a transaction of
   * another database or pool than `sql`'s (where the library lets that be seen): either way the
   * message would not commit with the caller's writes.
   */
  join(tx: Tx): SqlRunner;
  /**
   * Calls `wake` once after the outermost commit of `tx` (not after a rollback), so the local
   * dispatcher claims without waiting for its next poll. Optional: a library with no commit
   * event leaves it out, and the wake-up comes from PostgreSQL LISTEN or the poll.
   */
  afterCommit?(tx: Tx, wake: () => void): void;
  /** Releases what the connection itself holds (not the app's pool) when the module stops. */
  close?(): Promise<void>;
}
