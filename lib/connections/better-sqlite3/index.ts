/**
 * `nestjs-outbox/better-sqlite3`: the outbox on a plain better-sqlite3 Database, for apps that
 * run their own `BEGIN … COMMIT` on SQLite with no ORM: `OutboxModule.forRoot({ connection:
 * betterSqlite3Outbox(db), publisher })`, then `outbox.enqueue(event, db)` between
 * `db.exec('BEGIN IMMEDIATE')` and `db.exec('COMMIT')`. The Database is the app's, and its file
 * is where the dispatcher opens a connection of its own (so it needs a file, not `:memory:`).
 * Only types are named here, so loading this file loads no driver.
 */
export { betterSqlite3Outbox } from './better-sqlite3.connection';
export {
  betterSqlite3SqlPort,
  betterSqlite3SqlRunner,
} from '../../drivers/better-sqlite3/better-sqlite3.sql-port';
export type {
  BetterSqlite3Database,
  BetterSqlite3Statement,
} from '../../drivers/better-sqlite3/better-sqlite3-client';
