/**
 * nestjs-outbox on Kysely, for apps that write through Kysely instead of TypeORM: the outbox's
 * statements run through the app's own Kysely instance and dialect (PostgreSQL, MySQL/MariaDB or
 * SQLite), so they share its pool, plugins and logging. The outbox's SQL is finished per
 * database, so it goes in as raw compiled statements, not through the query builder.
 */
export {
  kyselySqlPort,
  kyselySqlRunner,
  type KyselyDatabase,
  type KyselyExecutor,
  type KyselySqlPortOptions,
} from './kysely.sql-port';
