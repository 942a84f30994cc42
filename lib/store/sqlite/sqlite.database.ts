import { sqliteSubjectKeys, sqliteSubjectKeysTables } from './sqlite.subject-keys-sql';
import { sqliteClaimChecks, sqliteClaimCheckTable } from './sqlite.claim-check-sql';
import { SQLITE_CONSOLE_AUDIT_SQL } from './sqlite.audit-sql';
import { sqliteTenantColumn } from './sqlite.tenant-sql';
import { sqliteFallbackOutcome } from './sqlite.fallback-outcome-sql';
import type { OutboxDatabase } from '../outbox-database';
import { partialCleanerIndexes } from '../schema/partial-indexes.sql';
import { sqliteAdmin } from './sqlite.admin-sql';
import {
  sqliteInboxDrop,
  sqliteInboxInsert,
  sqliteInboxRecorder,
  sqliteInboxPurge,
  sqliteInboxSequence,
  sqliteInboxTable,
} from './sqlite.inbox-sql';
import {
  sqliteCreateHistoryTable,
  SQLITE_PAYLOAD_TYPES,
  sqliteCreateTable,
  sqliteIndexCatalog,
  sqliteDropHistoryTable,
  sqliteCreateArchiveTable,
  sqliteDropTable,
} from './sqlite.sql';
import { SqliteOutboxStore } from './sqlite.store';
import { sqliteKeySequence } from './sqlite.key-sequence-sql';
import {
  PAYLOAD_COLUMNS,
  payloadColumnDefinitions,
  sqlitePresentPayloadColumns,
} from '../schema/payload-columns';

/** SQLite 3.35+ through better-sqlite3. */
export const sqliteDatabase: OutboxDatabase<'sqlite'> = {
  dialect: 'sqlite',
  urlSchemes: ['sqlite'],
  quoting: 'double',
  schemas: false,
  keyLockTable: false,
  placeholders: 'question',
  serializableOnly: true,
  singleWriter: true,
  insertIdReportsWrite: false,
  file: true,
  deliveryPartitionsOffered: false,
  schema: {
    createTable: sqliteCreateTable,
    dropTable: sqliteDropTable,
    createHistoryTable: (n) => sqliteCreateHistoryTable(n),
    dropHistoryTable: sqliteDropHistoryTable,
    createArchiveTable: sqliteCreateArchiveTable,
    cleanerIndexes: partialCleanerIndexes(sqliteIndexCatalog),
    // SQLite adds one column per ALTER, without rewriting the table.
    tenantColumn: sqliteTenantColumn,
    fallbackOutcome: sqliteFallbackOutcome,
    claimCheckTable: sqliteClaimCheckTable,
    subjectKeysTables: sqliteSubjectKeysTables,
    payloadColumns: {
      async ensure(run, n) {
        const present = await sqlitePresentPayloadColumns(run, n);
        const definitions = payloadColumnDefinitions(SQLITE_PAYLOAD_TYPES);
        for (const [i, column] of PAYLOAD_COLUMNS.entries()) {
          if (!present.has(column))
            await run(`ALTER TABLE ${n.table} ADD COLUMN ${definitions[i] ?? ''}`);
        }
      },
      has: async (run, n) =>
        (await sqlitePresentPayloadColumns(run, n)).size === PAYLOAD_COLUMNS.length,
      async drop(run, n) {
        const present = await sqlitePresentPayloadColumns(run, n);
        for (const column of PAYLOAD_COLUMNS) {
          if (present.has(column)) await run(`ALTER TABLE ${n.table} DROP COLUMN ${column}`);
        }
      },
    },
    keySequence: sqliteKeySequence,
  },
  createStore(sql, { names, policy, dispatch, fallbackHistory }) {
    const store = new SqliteOutboxStore(sql, names, policy, fallbackHistory ?? false);
    if (dispatch.enabled) store.open();
    return Promise.resolve(store);
  },
  admin: sqliteAdmin,
  audit: SQLITE_CONSOLE_AUDIT_SQL,
  claimChecks: sqliteClaimChecks,
  subjectKeys: sqliteSubjectKeys,
  inbox: {
    createTable: sqliteInboxTable,
    dropTable: sqliteInboxDrop,
    insert: sqliteInboxInsert,
    recorder: sqliteInboxRecorder,
    purge: sqliteInboxPurge,
    sequence: sqliteInboxSequence,
    sharedConnection: true,
  },
};
