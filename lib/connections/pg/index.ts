/**
 * `nestjs-outbox/pg`: the outbox on plain node-postgres, for apps that run their own
 * `BEGIN … COMMIT` on a `pg.Pool` with no ORM: `OutboxModule.forRoot({ connection:
 * pgOutbox(pool), publisher })`, then `outbox.enqueue(event, client)` on the client of the open
 * transaction. The pool is the app's: the outbox borrows clients for its short transactions and
 * holds one for LISTEN, and never ends the pool. Only types of `pg` are named here, so loading
 * this file loads no driver.
 */
export { pgOutbox } from './pg.connection';
export { pgSqlPort, pgSqlRunner } from '../../drivers/pg/pg.sql-port';
export type { PgPool, PgPoolClient, PgQueryable, PgQueryResult } from '../../drivers/pg/pg-client';
