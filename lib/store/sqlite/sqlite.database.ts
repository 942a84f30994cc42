import type { OutboxDatabase } from '../outbox-database';
import {
  dropPartialCleanerIndexes,
  ensurePartialCleanerIndexes,
  hasPartialCleanerIndexes,
} from '../partial-indexes.sql';
import { sqliteAdmin } from './sqlite.admin-sql';
import {
  sqliteInboxDrop,
  sqliteInboxInsert,
  sqliteInboxPurge,
  sqliteInboxTable,
} from './sqlite.inbox-sql';
import {
  sqliteCreateHistoryTable,
  sqliteCreateTable,
  sqliteDropHistoryTable,
  sqliteCreateArchiveTable,
  sqliteDropTable,
} from './sqlite.sql';
import { SqliteOutboxStore } from './sqlite.store';

/** SQLite 3.35+ through better-sqlite3. */
export const sqliteDatabase: OutboxDatabase<'sqlite'> = {
  dialect: 'sqlite',
  urlSchemes: ['sqlite'],
  quoting: 'double',
  schemas: false,
  keyLockTable: false,
  createTable: sqliteCreateTable,
  dropTable: sqliteDropTable,
  createHistoryTable: sqliteCreateHistoryTable,
  dropHistoryTable: sqliteDropHistoryTable,
  createArchiveTable: sqliteCreateArchiveTable,
  ensureCleanerIndexes: ensurePartialCleanerIndexes,
  hasCleanerIndexes: (run, n) => hasPartialCleanerIndexes(run, n, 'sqlite'),
  dropCleanerIndexes: dropPartialCleanerIndexes,
  createStore(sql, { names, policy, dispatch }) {
    const store = new SqliteOutboxStore(sql, names, policy);
    if (dispatch.enabled) store.open();
    return Promise.resolve(store);
  },
  admin: sqliteAdmin,
  inbox: {
    createTable: sqliteInboxTable,
    dropTable: sqliteInboxDrop,
    insert: sqliteInboxInsert,
    purge: sqliteInboxPurge,
    sharedConnection: true,
  },
};
