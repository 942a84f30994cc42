import { OutboxTransactionRequiredError } from '../../lib';
import {
  betterSqlite3Outbox,
  betterSqlite3SqlPort,
  type BetterSqlite3Database,
} from '../../lib/connections/better-sqlite3';
import { describeConnectionModule, type AppDatabase } from './connection-module.suite';
import { openSqliteFile, sqliteFile, type SqliteDatabaseForTests } from './driver-targets';

// An app with no ORM on SQLite: OutboxModule on a better-sqlite3 Database (`connection:
// betterSqlite3Outbox(db)`), enqueuing with the Database between the app's own
// db.exec('BEGIN IMMEDIATE') and db.exec('COMMIT'); the dispatcher writes through a connection
// of its own to the same file.

let file: string;

async function inTransaction<T>(
  db: SqliteDatabaseForTests,
  work: (db: BetterSqlite3Database) => Promise<T>,
  rollback = false,
): Promise<T> {
  db.exec('BEGIN IMMEDIATE');
  try {
    const value = await work(db);
    db.exec(rollback ? 'ROLLBACK' : 'COMMIT');
    return value;
  } catch (error) {
    if (db.inTransaction) db.exec('ROLLBACK');
    throw error;
  }
}

describeConnectionModule<BetterSqlite3Database>({
  name: 'better-sqlite3 (nestjs-outbox/better-sqlite3)',
  services: [],
  dialect: 'sqlite',
  placeholder: '?',
  setUp() {
    const suite = sqliteFile();
    file = suite.file;
    return Promise.resolve({
      admin: betterSqlite3SqlPort(suite.db),
      tearDown: () => Promise.resolve(suite.remove()),
    });
  },
  openDatabase(): Promise<AppDatabase<BetterSqlite3Database>> {
    const db = openSqliteFile(file);
    return Promise.resolve({
      connection: betterSqlite3Outbox(db),
      inTransaction: (work, rollback) => inTransaction(db, work, rollback),
      outsideTransaction: (work) => work(db),
      insertOrder: (tx, table, id) => {
        tx.prepare(`INSERT INTO ${table} (id) VALUES (?)`).run(id);
        return Promise.resolve();
      },
      ping: () => {
        db.prepare('SELECT 1').all();
        return Promise.resolve();
      },
      end: () => {
        db.close();
        return Promise.resolve();
      },
    });
  },
  async inForeignTransaction(work) {
    // Another Database on the same file is another connection: its transaction commits apart.
    const other = openSqliteFile(file);
    try {
      return await inTransaction(other, work, true);
    } finally {
      other.close();
    }
  },
  foreignMessage: /another Database/,
  async moreRefusals({ database, outbox, countRows, removeRows }) {
    // What an enqueue left unawaited inside db.transaction(fn) does (that function must be
    // synchronous, and commits when it returns): the first statement runs in the call's own
    // tick, inside the transaction; the commit comes before the second (over 4000 messages take
    // two), which must then fail rather than commit on its own.
    const ids = Array.from(
      { length: 4_001 },
      (_, n) => `0190a6b2-0000-7000-8000-${n.toString(16).padStart(12, '0')}`,
    );
    const messages = ids.map((messageId, n) => ({ topic: 'bulk', payload: { n }, messageId }));
    await database.outsideTransaction(async (db) => {
      db.exec('BEGIN IMMEDIATE');
      const pending = outbox.enqueue(messages, db);
      db.exec('COMMIT');
      await expect(pending).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
    });
    try {
      // The rows of the first statement committed with the app's transaction; none after it.
      expect(await countRows(ids.slice(0, 4_000))).toBe(4_000);
      expect(await countRows(ids.slice(4_000))).toBe(0);
    } finally {
      await removeRows(ids);
    }
  },
});
