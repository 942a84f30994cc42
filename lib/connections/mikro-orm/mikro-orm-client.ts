/**
 * The part of MikroORM 6 (its SQL drivers: `@mikro-orm/postgresql`, `mariadb`, `mysql`,
 * `better-sqlite`) the outbox uses, typed here so that the outbox compiles and loads without it:
 * a `MikroORM` instance and its `EntityManager` fit.
 */

/** An SQL driver's connection (`em.getConnection()`): one per ORM instance, shared by its forks. */
export interface MikroOrmSqlConnection {
  /**
   * Runs `sql` with `?` placeholders, the values filled in by the platform's escaping;
   * `'run'` answers `{ affectedRows, insertId, rows }` for a write and the rows for a read.
   */
  execute(sql: string, params: unknown[], method: 'run', ctx?: unknown): Promise<unknown>;
  /**
   * Runs `work` in a transaction of its own on a pool connection (a knex transaction on
   * MikroORM 6), whatever transaction the async context holds: without `ctx`, never nested.
   * `options` as MikroORM takes them (`{ isolationLevel }`, its enum's value).
   */
  transactional<T>(work: (trx: unknown) => Promise<T>, options?: object): Promise<T>;
}

/** An `EntityManager` of MikroORM's SQL drivers: the app's, or one forked by `transactional`. */
export interface MikroOrmEntityManager {
  getConnection(): MikroOrmSqlConnection;
  /** The database's platform (`PostgreSqlPlatform`, `MariaDbPlatform`, `BetterSqlitePlatform`…). */
  getPlatform(): object;
  /** The open transaction the manager runs in (a knex transaction on MikroORM 6), if any. */
  getTransactionContext(): unknown;
}

/** A `MikroORM` instance: its global EntityManager, forked for every unit of work. */
export interface MikroOrmInstance<Em extends MikroOrmEntityManager> {
  readonly em: Em;
  /** Its configuration: on SQLite, `dbName` is the database file. */
  readonly config: { get(key: 'dbName'): unknown };
}
