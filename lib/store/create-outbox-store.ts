import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxError } from '../errors/outbox.error';
import { OutboxTableMissingError } from '../errors/outbox-table-missing.error';
import type { OutboxStore } from './ports/outbox-store.port';
import { queuePolicyOf } from '../options/queue-policy';
import { describeError } from '../internal/describe-error';
import { OutboxMessages } from '../outbox.messages';
import type { OutboxStoreContext } from './outbox-database';
import type { SqlPort } from './ports/sql-port';
import { OUTBOX_SCHEMA_STEPS, type SchemaNeeds } from './schema/schema-steps';
import { outboxDatabase, outboxDialectOf, tableNamesFor } from './schema/outbox-table-ddl';
import type { ResolvedPartitioningOptions } from '../options/resolve-partitioning-options';
import { checkTableLayout } from './schema/table-layout';
import { messageIdCodecOf } from './schema/message-id-layout';
import { databaseAnswers } from './schema/database-answers';

/** Picks the store for the port's database; opens what the dispatcher needs when asked. */
export async function createOutboxStore(
  sql: SqlPort,
  table: {
    tableName: string;
    schema: string | null;
    ordering?: {
      enabled: boolean;
      onDeadLetter: 'block' | 'skip';
      maxRun?: number;
      sequence?: boolean;
      /** Types whose dead messages do the opposite of `onDeadLetter` (their policy's). */
      deadLetterExceptions?: readonly string[];
    };
    dispatcher?: { dbTimeoutMs: number; batchSize?: number; claims?: 'leases' | 'partitions' };
    cleaner?: { archive: boolean };
    /** The `tenants` option: when set, the table must have schema step 7's `tenant_id`. */
    tenants?: object | null;
    /** The `claimCheck` option: when set where messages are published, step 10's table. */
    claimCheck?: object | null;
    /** The `erasure` option: when set, step 11's tables. */
    erasure?: object | null;
    /** Whether statements may be prepared by name (the `preparedStatements` option); default true. */
    preparedStatements?: boolean;
    /**
     * The layout the table must have: null a plain table, else partitioned by this interval;
     * left out, the table's own layout is used as it is (tools that do not know the options).
     */
    partitioning?: Pick<ResolvedPartitioningOptions, 'interval' | 'premake'> | null;
  },
  dispatch: OutboxStoreContext['dispatch'],
): Promise<OutboxStore> {
  const policy = queuePolicyOf(table.ordering, table.dispatcher?.batchSize);
  const timeoutMs = table.dispatcher?.dbTimeoutMs ?? 10_000;
  const database = outboxDatabase(sql.databaseType);
  const dialect = outboxDialectOf(sql.databaseType);
  const names = tableNamesFor(dialect, {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  if (sql.closed === true) {
    throw new OutboxError(OutboxMessages.databaseClosed(names.table));
  }
  if (sql.isConnected) {
    const ref = {
      tableName: table.tableName,
      schema: table.schema ?? undefined,
      keyLock: database.keyLockTable,
    };
    /** Runs a read that fails when a part of the schema is missing, and says how to add it. */
    const probe = async (
      statement: string,
      missing: string,
      message: (reason: string) => string,
      step?: number,
    ): Promise<void> => {
      try {
        await sql.query(statement);
      } catch (error) {
        if (!(await databaseAnswers(sql))) {
          throw new OutboxError(
            OutboxMessages.databaseUnreachable(names.table, describeError(error)),
            { cause: error },
          );
        }
        throw new OutboxTableMissingError(
          message(describeError(error)),
          missing,
          {
            cause: error,
          },
          step,
        );
      }
    };
    // Fail at bootstrap, not at the first enqueue, when the migration has not run. The columns
    // added in 0.2 are probed too: an older table fails here, not mid-dispatch.
    await probe(
      `SELECT 1 FROM ${names.table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`,
      names.table,
      (reason) => OutboxMessages.tableMissing(names.table, reason, ref),
    );
    // The attempt history is newer than the table: an older table lacks it until the schema
    // command or the next migration step adds it, and every failed settle would fail on it.
    await probe(`SELECT 1 FROM ${names.attemptsTable} WHERE 1 = 0`, names.attemptsTable, (reason) =>
      OutboxMessages.historyTableMissing(names.attemptsTable, reason, ref),
    );
    // The later steps these options need (each step says which, schema-steps.ts), in order.
    const needs: SchemaNeeds = {
      sequence: table.ordering?.sequence === true,
      tenants: table.tenants !== undefined && table.tenants !== null,
      partitions: table.dispatcher?.claims === 'partitions' && dispatch.enabled,
      claimChecks: table.claimCheck !== undefined && table.claimCheck !== null && dispatch.enabled,
      erasure: table.erasure !== undefined && table.erasure !== null,
    };
    for (const [index, { check }] of OUTBOX_SCHEMA_STEPS.entries()) {
      if (check === undefined || check.neededBy?.(needs) === false) continue;
      const step = index + 1;
      const refusal = check.unsupported?.(database, names.table, sql.databaseType) ?? null;
      if (refusal !== null) throw new OutboxOptionsError(refusal, check.option ?? 'dataSource');
      for (const statement of check.probes(names)) {
        await probe(
          statement,
          names.table,
          (reason) => check.message(names.table, reason, ref, step),
          step,
        );
      }
    }
    // Checked here, not at the first clean an hour into production.
    if (table.cleaner?.archive === true) {
      await probe(`SELECT 1 FROM ${names.archiveTable} WHERE 1 = 0`, names.archiveTable, (reason) =>
        OutboxMessages.archiveTableMissing(names.archiveTable, reason, ref),
      );
    }
  }
  // Before the store is made: its statements differ by layout (the partitioned table's guard).
  const partitioned = await checkTableLayout(sql, database, names, table.partitioning, {
    creating: false,
  });
  // How the ids are bound depends on the table (BINARY(16), or CHAR(36) made before 0.3).
  const messageIds = sql.isConnected
    ? await messageIdCodecOf(
        database.schema.messageIdLayout?.bind(database),
        async (statement, params) => (await sql.query(statement, params)).rows,
        names,
        {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: database.keyLockTable,
        },
      )
    : undefined;
  // Step 8 is not required: without it a settling fallback leaves no history row (as before the
  // step), rather than every such settle failing on the history's check.
  const fallbackHistory =
    sql.isConnected &&
    (await (
      database.schema.fallbackOutcome?.has(
        async (statement, params) => (await sql.query(statement, params)).rows,
        names,
      ) ?? Promise.resolve(false)
    ).catch(() => false));
  const context: OutboxStoreContext = {
    names,
    policy,
    timeoutMs,
    table: { tableName: table.tableName, schema: table.schema ?? null },
    dispatch,
    partitioned,
    messageIds,
    preparedStatements: table.preparedStatements ?? true,
    fallbackHistory,
  };
  if (sql.isConnected) await database.checkTable?.(sql, context);
  return database.createStore(sql, context);
}
