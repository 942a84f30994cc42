/**
 * `nestjs-outbox/drizzle`: the outbox on Drizzle ORM (node-postgres or mysql2):
 * `OutboxModule.forRoot({ connection: drizzleOutbox(db), publisher })`, then
 * `outbox.enqueue(event, tx)` inside `db.transaction(async (tx) => …)`. Loading this file loads
 * drizzle-orm (its dialect classes tell a transaction from a database), not a database driver.
 */
export { drizzleOutbox, type DrizzleDatabase } from './drizzle.connection';
export { drizzleStatement } from './drizzle-statement';
export type { PlaceholderStyle } from '../../drivers/sql-placeholders';
