/**
 * nestjs-outbox on a plain mysql2 promise pool, for apps on MySQL or MariaDB that run their own
 * `BEGIN … COMMIT` with no ORM. The pool is the app's: the port borrows connections for the
 * outbox's short transactions and never ends the pool. Only types are named here, so loading
 * this file loads no driver.
 */
export { mysql2SqlPort, mysql2SqlRunner } from './mysql2.sql-port';
export type { Mysql2Pool, Mysql2PoolConnection, Mysql2Queryable } from './mysql2-client';
