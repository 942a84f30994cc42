import { postgresSubjectKeys, postgresSubjectKeysTables } from './postgres.subject-keys-sql';
import { postgresClaimChecks, postgresClaimCheckTable } from './postgres.claim-check-sql';
import { POSTGRES_CONSOLE_AUDIT_SQL } from './postgres.audit-sql';
import { postgresDeliveryPartitions } from './postgres.delivery-partitions-sql';
import type { OutboxDatabase } from '../outbox-database';
import { partialCleanerIndexes } from '../schema/partial-indexes.sql';
import type { SqlPort } from '../ports/sql-port';
import { hasPayloadColumns } from '../schema/payload-columns';
import { postgresAdmin } from './postgres.admin-sql';
import {
  postgresInboxDrop,
  postgresInboxInsert,
  postgresInboxRecorder,
  postgresInboxPurge,
  postgresInboxSequence,
  postgresInboxTable,
} from './postgres.inbox-sql';
import {
  postgresAddPayloadColumns,
  postgresDropPayloadColumns,
  postgresCreateHistoryTable,
  postgresCreateTable,
  postgresIndexCatalog,
  postgresDropHistoryTable,
  postgresCreateArchiveTable,
  postgresDropTable,
  postgresDropWaitingIndex,
  postgresHasWaitingIndex,
  postgresWaitingIndex,
} from './postgres.sql';
import { PostgresOutboxStore } from './postgres.store';
import { postgresKeySequence } from './postgres.key-sequence-sql';
import { postgresTenantColumn } from './postgres.tenant-sql';
import { postgresFallbackOutcome } from './postgres.fallback-outcome-sql';
import {
  postgresConversionSteps,
  postgresCreatePartitionedTable,
  postgresDropIdsTable,
} from './postgres.partition-sql';
import { PostgresPartitions, postgresTableLayout } from './postgres.partitions';

/** PostgreSQL 12+. */
export const postgresDatabase: OutboxDatabase<'postgres'> = {
  dialect: 'postgres',
  urlSchemes: ['postgres', 'postgresql'],
  quoting: 'double',
  schemas: true,
  keyLockTable: false,
  placeholders: 'numbered',
  serializableOnly: false,
  singleWriter: false,
  insertIdReportsWrite: false,
  file: false,
  deliveryPartitionsOffered: true,
  schema: {
    createTable: postgresCreateTable,
    dropTable: postgresDropTable,
    createHistoryTable: postgresCreateHistoryTable,
    dropHistoryTable: postgresDropHistoryTable,
    createArchiveTable: postgresCreateArchiveTable,
    cleanerIndexes: partialCleanerIndexes(postgresIndexCatalog),
    // ADD COLUMN IF NOT EXISTS: columns only, no table rewrite.
    payloadColumns: {
      async ensure(run, n) {
        await run(postgresAddPayloadColumns(n));
      },
      has: hasPayloadColumns,
      async drop(run, n) {
        await run(postgresDropPayloadColumns(n));
      },
    },
    tenantColumn: postgresTenantColumn,
    fallbackOutcome: postgresFallbackOutcome,
    claimCheckTable: postgresClaimCheckTable,
    subjectKeysTables: postgresSubjectKeysTables,
    waitingIndex: {
      async ensure(run, n) {
        await run(postgresWaitingIndex(n));
      },
      async has(run, n) {
        const { text, params } = postgresHasWaitingIndex(n);
        const rows = (await run(text, params)) as { n: number }[];
        return (rows[0]?.n ?? 0) > 0;
      },
      async drop(run, n) {
        await run(postgresDropWaitingIndex(n));
      },
    },
    keySequence: postgresKeySequence,
    deliveryPartitions: postgresDeliveryPartitions,
  },
  async createStore(
    sql,
    { names, policy, timeoutMs, table, dispatch, partitioned, preparedStatements, fallbackHistory },
  ) {
    // The lock namespace and NOTIFY channel follow the schema the table really lives in, so
    // that tenants with a schema each (by search_path) never wait on one another's enqueue
    // locks or wake one another's dispatchers.
    const schema = table.schema ?? (await postgresSchemaOf(sql, names.table));
    return new PostgresOutboxStore(
      sql,
      names,
      !dispatch.notify ? 'none' : dispatch.afterCommit === true ? 'after-commit' : 'transaction',
      policy,
      timeoutMs,
      schema,
      partitioned,
      preparedStatements,
      fallbackHistory ?? false,
    );
  },
  partitioned: {
    createTable: postgresCreatePartitionedTable,
    dropTable: postgresDropIdsTable,
    layout: postgresTableLayout,
    partitions: (sql, n) => new PostgresPartitions(sql, n),
    conversionSteps: (n, interval, ranges) =>
      postgresConversionSteps(n, postgresCreatePartitionedTable(n, interval, ranges)),
  },
  admin: postgresAdmin,
  audit: POSTGRES_CONSOLE_AUDIT_SQL,
  claimChecks: postgresClaimChecks,
  subjectKeys: postgresSubjectKeys,
  inbox: {
    createTable: postgresInboxTable,
    dropTable: postgresInboxDrop,
    insert: postgresInboxInsert,
    recorder: postgresInboxRecorder,
    purge: postgresInboxPurge,
    sequence: postgresInboxSequence,
    sharedConnection: false,
  },
};

/**
 * The schema the unqualified table really resolves to on the app's connections (their
 * search_path). Not TypeORM's `schema` option: TypeORM does not set search_path from it, and
 * two apps sharing one table must share one lock namespace.
 */
async function postgresSchemaOf(sql: SqlPort, table: string): Promise<string> {
  if (!sql.isConnected) return 'public';
  const { rows } = await sql.query<{ schema?: unknown }>(
    `SELECT coalesce((SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
  WHERE c.oid = to_regclass($1)), current_schema()) AS schema`,
    [table],
  );
  const schema = rows[0]?.schema;
  return typeof schema === 'string' ? schema : 'public';
}
