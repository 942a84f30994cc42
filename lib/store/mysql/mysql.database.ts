import { mysqlSubjectKeys, mysqlSubjectKeysTables } from './mysql.subject-keys-sql';
import { mysqlClaimChecks, mysqlClaimCheckTable } from './mysql.claim-check-sql';
import { MYSQL_CONSOLE_AUDIT_SQL } from './mysql.audit-sql';
import { OutboxTableMissingError } from '../../errors/outbox-table-missing.error';
import { describeError } from '../../internal/describe-error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxDatabase, OutboxStoreContext } from '../outbox-database';
import type { SqlPort } from '../ports/sql-port';
import { mysqlAdmin } from './mysql.admin-sql';
import {
  mysqlInboxDrop,
  mysqlInboxInsert,
  mysqlInboxRecorder,
  mysqlInboxPurge,
  mysqlInboxSequence,
  mysqlInboxTable,
} from './mysql.inbox-sql';
import { mysqlEnsureCleanerIndex, mysqlHasCleanerIndex } from './mysql-cleaner-index';
import { mysqlEnsureNoPad, mysqlNoPadDdl, mysqlPaddedColumns } from './mysql-no-pad';
import {
  mysqlPresentPayloadColumns,
  payloadColumnDefinitions,
  PAYLOAD_COLUMNS,
} from '../schema/payload-columns';
import {
  MYSQL_PAYLOAD_TYPES,
  MYSQL_KEY_LOCK_BUCKETS,
  mysqlCreateHistoryTable,
  mysqlCreateTable,
  mysqlDropHistoryTable,
  mysqlCreateArchiveTable,
  mysqlDropTable,
} from './mysql.sql';
import { MysqlOutboxStore } from './mysql.store';
import { mysqlTenantColumn } from './mysql.tenant-sql';
import { mysqlFallbackOutcome } from './mysql.fallback-outcome-sql';
import {
  mysqlConversionSteps,
  mysqlCreatePartitionedTable,
  mysqlDropIdsTable,
} from './mysql.partition-sql';
import { MysqlPartitions, mysqlTableLayout } from './mysql.partitions';
import { mysqlConvertMessageIds, mysqlMessageIdLayout } from './mysql-message-ids';

/** MySQL 8 and MariaDB 10.6+. */
import { mysqlKeySequence } from './mysql.key-sequence-sql';
import {
  MYSQL_DELIVERY_PARTITIONS_OFFERED,
  mysqlDeliveryPartitions,
} from './mysql.delivery-partitions-sql';

export const mysqlDatabase: OutboxDatabase<'mysql'> = {
  dialect: 'mysql',
  urlSchemes: ['mysql', 'mariadb'],
  quoting: 'backtick',
  schemas: true,
  keyLockTable: true,
  placeholders: 'question',
  serializableOnly: false,
  singleWriter: false,
  insertIdReportsWrite: true,
  file: false,
  deliveryPartitionsOffered: MYSQL_DELIVERY_PARTITIONS_OFFERED,
  schema: {
    createTable: mysqlCreateTable,
    finishTableDdl: mysqlNoPadDdl,
    dropTable: mysqlDropTable,
    createHistoryTable: mysqlCreateHistoryTable,
    dropHistoryTable: mysqlDropHistoryTable,
    createArchiveTable: mysqlCreateArchiveTable,
    messageIdLayout: mysqlMessageIdLayout,
    convertMessageIds: mysqlConvertMessageIds,
    async tableProblem(query, names) {
      const { padded } = await mysqlPaddedColumns(query, names);
      return padded.length === 0
        ? undefined
        : `${padded.join(', ')} compare ignoring trailing spaces (PAD SPACE, made before 0.3): migrate moves them to a NO PAD collation in place`;
    },
    tenantColumn: mysqlTenantColumn,
    fallbackOutcome: mysqlFallbackOutcome,
    claimCheckTable: mysqlClaimCheckTable,
    subjectKeysTables: mysqlSubjectKeysTables,
    cleanerIndexes: {
      ensure: mysqlEnsureCleanerIndex,
      has: mysqlHasCleanerIndex,
      async drop(run, n) {
        await run(`ALTER TABLE ${n.table} DROP INDEX ${n.quote(`${n.tableName}_done_idx`)}`);
      },
    },
    // MySQL has no ADD COLUMN IF NOT EXISTS: the catalog says which columns are missing, added in
    // one ALTER that MySQL 8.0.29+ and MariaDB 10.3+ run instantly (metadata only).
    payloadColumns: {
      async ensure(query, names) {
        const present = await mysqlPresentPayloadColumns(query, names);
        const definitions = payloadColumnDefinitions(MYSQL_PAYLOAD_TYPES);
        const missing = PAYLOAD_COLUMNS.flatMap((column, i) =>
          present.has(column) ? [] : [`ADD COLUMN ${definitions[i] ?? ''}`],
        );
        if (missing.length > 0) await query(`ALTER TABLE ${names.table} ${missing.join(', ')}`);
      },
      has: async (query, names) =>
        (await mysqlPresentPayloadColumns(query, names)).size === PAYLOAD_COLUMNS.length,
      async drop(query, names) {
        const present = await mysqlPresentPayloadColumns(query, names);
        const drops = PAYLOAD_COLUMNS.filter((c) => present.has(c)).map((c) => `DROP COLUMN ${c}`);
        if (drops.length > 0) await query(`ALTER TABLE ${names.table} ${drops.join(', ')}`);
      },
    },
    // Tables made before 0.3 compare keys and topics ignoring trailing spaces, and lack the
    // cleaner's index: both fixed in place.
    async afterCreateTable(query, names) {
      await mysqlEnsureNoPad(query, names);
      await mysqlEnsureCleanerIndex(query, names);
    },
    keySequence: mysqlKeySequence,
    // Not offered yet (deliveryPartitionsOffered): reached by the store's tests only.
    deliveryPartitions: mysqlDeliveryPartitions,
  },
  async checkTable(sql, context) {
    const { names, table, policy } = context;
    const ref = { tableName: table.tableName, schema: table.schema ?? undefined };
    const { padded } = await mysqlPaddedColumns(
      async (statement, params) => (await sql.query(statement, params)).rows,
      names,
    );
    if (padded.length > 0) {
      throw new OutboxTableMissingError(
        OutboxMessages.tablePadSpace(names.table, padded.join(', '), { ...ref, keyLock: true }),
        names.table,
        { cause: undefined },
      );
    }
    if (policy.ordered) await checkKeyLockTable(sql, names.lockTable, ref);
  },
  createStore: (
    sql: SqlPort,
    {
      names,
      policy,
      timeoutMs,
      partitioned,
      messageIds,
      preparedStatements,
      fallbackHistory,
    }: OutboxStoreContext,
  ) =>
    Promise.resolve(
      new MysqlOutboxStore(
        sql,
        names,
        policy,
        timeoutMs,
        partitioned,
        messageIds,
        preparedStatements,
        fallbackHistory ?? false,
      ),
    ),
  partitioned: {
    createTable: mysqlCreatePartitionedTable,
    dropTable: mysqlDropIdsTable,
    layout: mysqlTableLayout,
    partitions: (sql, n) => new MysqlPartitions(sql, n),
    conversionSteps: (n, interval, ranges) =>
      mysqlConversionSteps(n, mysqlCreatePartitionedTable(n, interval, ranges)),
  },
  admin: mysqlAdmin,
  audit: MYSQL_CONSOLE_AUDIT_SQL,
  claimChecks: mysqlClaimChecks,
  subjectKeys: mysqlSubjectKeys,
  inbox: {
    createTable: mysqlInboxTable,
    dropTable: mysqlInboxDrop,
    insert: mysqlInboxInsert,
    recorder: mysqlInboxRecorder,
    purge: mysqlInboxPurge,
    sequence: mysqlInboxSequence,
    sharedConnection: false,
  },
};

/**
 * The MySQL/MariaDB key-lock table must exist with all its rows: enqueue locks existing rows
 * only, so a missing row would silently stop serialising the keys that hash to it.
 */
async function checkKeyLockTable(
  sql: SqlPort,
  lockTable: string,
  ref: { tableName: string; schema: string | undefined },
): Promise<void> {
  const expected = 2 * MYSQL_KEY_LOCK_BUCKETS;
  let problem: string | undefined;
  let cause: unknown;
  try {
    const [row] = (
      await sql.query<{ n: number | string; lo: unknown; hi: unknown }>(
        `SELECT COUNT(*) AS n, MIN(bucket) AS lo, MAX(bucket) AS hi FROM ${lockTable}`,
      )
    ).rows;
    const n = Number(row?.n ?? 0);
    if (n !== expected || Number(row?.lo) !== 0 || Number(row?.hi) !== expected - 1)
      problem = `holds ${n} of its ${expected} rows`;
  } catch (error) {
    problem = `cannot be read (${describeError(error)})`;
    cause = error;
  }
  if (problem === undefined) return;
  throw new OutboxTableMissingError(
    OutboxMessages.keyLockTableBroken(lockTable, problem, { ...ref, keyLock: true }),
    lockTable,
    { cause },
  );
}
