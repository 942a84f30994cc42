/**
 * `nestjs-outbox/mysql2`: the outbox on a plain mysql2 promise pool, for apps on MySQL 8 or
 * MariaDB 10.6+ that run their own transactions with no ORM: `OutboxModule.forRoot({
 * connection: mysql2Outbox(pool), publisher })`, then `outbox.enqueue(event, connection)` on the
 * PoolConnection of the open transaction. The pool is the app's: the outbox borrows connections
 * for its short transactions and never ends the pool. Only types are named here, so loading this
 * file loads no driver.
 */
export { mysql2Outbox } from './mysql2.connection';
export { mysql2SqlPort, mysql2SqlRunner } from '../../drivers/mysql2/mysql2.sql-port';
export type {
  Mysql2ExecuteValue,
  Mysql2Pool,
  Mysql2PoolConnection,
  Mysql2Queryable,
} from '../../drivers/mysql2/mysql2-client';
