import type { SqlPort, SqlResult, SqlRunner } from '../../store/ports/sql-port';
import type { BetterSqlite3Database } from './better-sqlite3-client';

// The app's transaction holds the one connection while it awaits; the port's transaction waits
// for it to end rather than fail with "cannot start a transaction within a transaction".
const APP_TRANSACTION_WAIT_MS = 5_000;
const MAX_WAIT_STEP_MS = 20;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The statements of the caller's transaction. On SQLite that is the connection itself: the
 * caller opened `BEGIN` on it, so every statement on it until `COMMIT` is in that transaction.
 */
export function betterSqlite3SqlRunner(db: BetterSqlite3Database): SqlRunner {
  return { query: (sql, params) => settled(() => run(db, sql, params)) };
}

/**
 * The outbox's own work on a better-sqlite3 Database. There is one connection, so the port's
 * statements and transactions take turns: a statement asked for while the port's transaction
 * awaits waits for its end instead of running inside it. No `listen` on SQLite.
 */
export function betterSqlite3SqlPort(db: BetterSqlite3Database): SqlPort {
  let tail: Promise<unknown> = Promise.resolve();
  const inTurn = <T>(task: () => Promise<T>): Promise<T> => {
    const turn = tail.then(task);
    tail = turn.catch(() => undefined);
    return turn;
  };
  return {
    databaseType: 'sqlite',
    get isConnected() {
      return db.open;
    },
    get closed() {
      return !db.open;
    },
    databaseFile: db.name,
    query: (sql, params) => inTurn(() => settled(() => run(db, sql, params))),
    transaction: (work) =>
      inTurn(async () => {
        await appTransactionEnded(db);
        // IMMEDIATE: the write lock is taken at BEGIN, so a statement inside cannot fail busy
        // halfway through the work when another connection wrote meanwhile.
        db.exec('BEGIN IMMEDIATE');
        try {
          const value = await work(betterSqlite3SqlRunner(db));
          db.exec('COMMIT');
          return value;
        } catch (error) {
          if (db.inTransaction) db.exec('ROLLBACK');
          throw error;
        }
      }),
  };
}

/**
 * The synchronous driver's answer as a promise: a statement that fails rejects, not throws. Its
 * error as thrown: better-sqlite3's come from another realm under jest, and their `code`
 * (SQLITE_BUSY…) is what callers test.
 */
function settled<T>(work: () => T): Promise<T> {
  return new Promise((resolve) => resolve(work()));
}

function run<R>(
  db: BetterSqlite3Database,
  sql: string,
  params: readonly unknown[] | undefined,
): SqlResult<R> {
  const statement = db.prepare(sql);
  const values = params ?? [];
  if (statement.reader) {
    const rows = statement.all(...values) as R[];
    // A write with RETURNING answers one row per changed row.
    return { rows, affected: statement.readonly ? 0 : rows.length };
  }
  return { rows: [], affected: statement.run(...values).changes };
}

async function appTransactionEnded(db: BetterSqlite3Database): Promise<void> {
  const deadline = Date.now() + APP_TRANSACTION_WAIT_MS;
  for (let step = 1; db.inTransaction; step = Math.min(step * 2, MAX_WAIT_STEP_MS)) {
    if (Date.now() >= deadline) {
      throw new Error(
        `The outbox could not start a transaction on the SQLite connection: an application transaction held it for ${APP_TRANSACTION_WAIT_MS} ms`,
      );
    }
    await sleep(step);
  }
}
