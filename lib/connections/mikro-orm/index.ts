/**
 * `nestjs-outbox/mikro-orm`: the outbox on MikroORM 6 (PostgreSQL, MySQL, MariaDB, SQLite):
 * `OutboxModule.forRoot({ connection: mikroOrmOutbox(orm), publisher })`, then
 * `outbox.enqueue(event, em)` inside `em.transactional(async (em) => …)`. Only types of
 * MikroORM are named here, so loading this file loads neither MikroORM nor a driver.
 */
export { mikroOrmOutbox } from './mikro-orm.connection';
export { mikroOrmSqlPort, mikroOrmSqlRunner, type MikroOrmDatabase } from './mikro-orm.sql-port';
export type {
  MikroOrmEntityManager,
  MikroOrmInstance,
  MikroOrmSqlConnection,
} from './mikro-orm-client';
