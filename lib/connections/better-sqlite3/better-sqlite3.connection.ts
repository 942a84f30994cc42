import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { SqlRunner } from '../../store/ports/sql-port';
import type { BetterSqlite3Database } from '../../drivers/better-sqlite3/better-sqlite3-client';
import {
  betterSqlite3SqlPort,
  betterSqlite3SqlRunner,
} from '../../drivers/better-sqlite3/better-sqlite3.sql-port';

/**
 * The outbox on a better-sqlite3 Database, for `OutboxModule.forRoot({ connection:
 * betterSqlite3Outbox(db) })`: `enqueue(message, db)` writes on `db` between the app's
 * `db.exec('BEGIN IMMEDIATE')` and `db.exec('COMMIT')`. The dispatcher, unlocker and cleaner
 * work on a better-sqlite3 connection of their own to the same file (so `db` must be a file, not
 * `:memory:`, when they run); the admin's reads run on `db`. The outbox never closes `db`.
 *
 * Not inside `db.transaction(fn)`: better-sqlite3 runs `fn` synchronously and refuses one that
 * returns a promise, so an enqueue (which is asynchronous) cannot be awaited in it. Left
 * unawaited, its errors would not reach `fn` and the business rows would commit without the
 * message; the outbox cannot tell that case from a `BEGIN` the app holds open, so the docs say it.
 */
export function betterSqlite3Outbox(
  db: BetterSqlite3Database,
): OutboxConnection<BetterSqlite3Database> {
  return {
    sql: betterSqlite3SqlPort(db),
    join(tx) {
      if (tx !== db) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'better-sqlite3 Database',
            'Database',
            'Enqueue with the Database given to betterSqlite3Outbox(db): another Database object is another connection, even to the same file.',
          ),
        );
      }
      requireTransaction(db);
      return inTransactionRunner(db);
    },
  };
}

function requireTransaction(db: BetterSqlite3Database): void {
  if (!db.inTransaction) {
    throw new OutboxTransactionRequiredError(OutboxMessages.betterSqlite3TransactionRequired());
  }
}

/**
 * The app's transaction, checked again before every statement: an enqueue of several statements
 * awaits between them, and a transaction that ended meanwhile (the app committed without awaiting
 * the enqueue) must fail the rest, not let it commit on its own.
 */
function inTransactionRunner(db: BetterSqlite3Database): SqlRunner {
  const runner = betterSqlite3SqlRunner(db);
  return {
    async query(sql, params) {
      requireTransaction(db);
      return runner.query(sql, params);
    },
  };
}
