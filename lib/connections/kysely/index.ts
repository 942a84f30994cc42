/**
 * `nestjs-outbox/kysely`: the outbox on Kysely, for apps that write through Kysely instead of
 * TypeORM: `OutboxModule.forRoot({ connection: kyselyOutbox(db), publisher })`, then
 * `outbox.enqueue(event, trx)` inside `db.transaction().execute(async (trx) => …)`. The outbox's
 * statements run through the app's own Kysely instance and dialect (PostgreSQL, MySQL/MariaDB or
 * SQLite), so they share its pool and logging. The outbox's SQL is finished per database, so it
 * goes in as raw compiled statements, not through the query builder, and without the app's
 * plugins. This entry
 * loads `kysely` (an optional peer dependency, which an app on this path has).
 */
export {
  kyselyOutbox,
  type KyselyInstance,
  type KyselyOutboxOptions,
  type KyselyTransaction,
} from './kysely.connection';
export { outboxKyselyMigration, type OutboxKyselyMigration } from './kysely-outbox.migration';
export {
  kyselySqlPort,
  kyselySqlRunner,
  type KyselyDatabase,
  type KyselyExecutor,
  type KyselySqlPortOptions,
} from './kysely.sql-port';
