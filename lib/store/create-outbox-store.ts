import { OutboxTableMissingError } from '../errors/outbox-table-missing.error';
import type { OutboxStore } from './outbox-store.port';
import { queuePolicyOf } from './queue-policy';
import { describeError } from '../internal/describe-error';
import { OutboxMessages } from '../outbox.messages';
import type { OutboxStoreContext } from './outbox-database';
import type { SqlPort } from './sql-port';
import { payloadColumnsProbe } from './payload-columns';
import { outboxDatabase, outboxDialectOf, tableNamesFor } from './outbox-dialect';
import type { ResolvedPartitioningOptions } from '../options/resolve-partitioning-options';
import { checkTableLayout } from './table-layout';

/** Picks the store for the port's database; opens what the dispatcher needs when asked. */
export async function createOutboxStore(
  sql: SqlPort,
  table: {
    tableName: string;
    schema: string | null;
    ordering?: { enabled: boolean; onDeadLetter: 'block' | 'skip' };
    dispatcher?: { dbTimeoutMs: number };
    cleaner?: { archive: boolean };
    /**
     * The layout the table must have: null a plain table, else partitioned by this interval;
     * left out, the table's own layout is used as it is (tools that do not know the options).
     */
    partitioning?: Pick<ResolvedPartitioningOptions, 'interval' | 'premake'> | null;
  },
  dispatch: { enabled: boolean; notify: boolean },
): Promise<OutboxStore> {
  const policy = queuePolicyOf(table.ordering);
  const timeoutMs = table.dispatcher?.dbTimeoutMs ?? 10_000;
  const database = outboxDatabase(sql.databaseType);
  const dialect = outboxDialectOf(sql.databaseType);
  const names = tableNamesFor(dialect, {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  if (sql.isConnected) {
    // Fail at bootstrap, not at the first enqueue, when the migration has not run.
    try {
      // The columns added in 0.2 are probed too: an older table fails here, not mid-dispatch.
      await sql.query(
        `SELECT 1 FROM ${names.table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`,
      );
    } catch (error) {
      throw new OutboxTableMissingError(
        OutboxMessages.tableMissing(names.table, describeError(error), {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: database.keyLockTable,
        }),
        names.table,
        { cause: error },
      );
    }
    // The attempt history is newer than the table: an older table lacks it until the schema
    // command or the next migration step adds it, and every failed settle would fail on it.
    try {
      await sql.query(`SELECT 1 FROM ${names.attemptsTable} WHERE 1 = 0`);
    } catch (error) {
      throw new OutboxTableMissingError(
        OutboxMessages.historyTableMissing(names.attemptsTable, describeError(error), {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: database.keyLockTable,
        }),
        names.attemptsTable,
        { cause: error },
      );
    }
    // Step 4's columns: every claim reads them, so a table without them would fail each one.
    try {
      await sql.query(payloadColumnsProbe(names));
    } catch (error) {
      throw new OutboxTableMissingError(
        OutboxMessages.payloadColumnsMissing(names.table, describeError(error), {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: database.keyLockTable,
        }),
        names.table,
        { cause: error },
        4,
      );
    }
    // Checked here, not at the first clean an hour into production.
    if (table.cleaner?.archive === true) {
      try {
        await sql.query(`SELECT 1 FROM ${names.archiveTable} WHERE 1 = 0`);
      } catch (error) {
        throw new OutboxTableMissingError(
          OutboxMessages.archiveTableMissing(names.archiveTable, describeError(error), {
            tableName: table.tableName,
            schema: table.schema ?? undefined,
            keyLock: database.keyLockTable,
          }),
          names.archiveTable,
          { cause: error },
        );
      }
    }
  }
  // Before the store is made: its statements differ by layout (the partitioned table's guard).
  const partitioned = await checkTableLayout(sql, database, names, table.partitioning, {
    creating: false,
  });
  const context: OutboxStoreContext = {
    names,
    policy,
    timeoutMs,
    table: { tableName: table.tableName, schema: table.schema ?? null },
    dispatch,
    partitioned,
  };
  if (sql.isConnected) await database.checkTable?.(sql, context);
  return database.createStore(sql, context);
}
