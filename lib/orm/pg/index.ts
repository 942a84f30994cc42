/**
 * nestjs-outbox on plain node-postgres, for apps that run their own `BEGIN … COMMIT` on a
 * `pg.Pool` with no ORM. The pool is the app's: the port borrows clients for the outbox's short
 * transactions and holds one for LISTEN, and never ends the pool. Only types of `pg` are named
 * here, so loading this file loads no driver.
 */
export { pgSqlPort, pgSqlRunner } from './pg.sql-port';
export type { PgPool, PgPoolClient, PgQueryable, PgQueryResult } from './pg-client';
