import type { DataSource } from 'typeorm';
import { OutboxTableMissingError } from '../errors/outbox-table-missing.error';
import type { OutboxQueuePolicy, OutboxStore } from './outbox-store.port';
import { describeError } from '../internal/describe-error';
import { OutboxMessages } from '../outbox.messages';
import { mysqlPaddedColumns } from './dialects/mysql-no-pad';
import { MYSQL_KEY_LOCK_BUCKETS } from './dialects/mysql.sql';
import { MysqlOutboxStore } from './mysql.store';
import { outboxDialectOf, tableNamesFor } from './outbox-dialect';
import { PostgresOutboxStore } from './postgres.store';
import { SqliteOutboxStore } from './sqlite.store';

/** Picks the store for the DataSource's database; opens what the dispatcher needs when asked. */
export async function createOutboxStore(
  dataSource: DataSource,
  table: {
    tableName: string;
    schema: string | null;
    ordering?: { enabled: boolean; onDeadLetter: 'block' | 'skip' };
    dispatcher?: { dbTimeoutMs: number };
  },
  dispatch: { enabled: boolean; notify: boolean },
): Promise<OutboxStore> {
  const policy: OutboxQueuePolicy = {
    ordered: table.ordering?.enabled ?? true,
    deadBlocksKey: (table.ordering?.onDeadLetter ?? 'block') === 'block',
  };
  const timeoutMs = table.dispatcher?.dbTimeoutMs ?? 10_000;
  const dialect = outboxDialectOf(dataSource.options.type);
  const names = tableNamesFor(dialect, {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  if (dataSource.isInitialized) {
    // Fail at bootstrap, not at the first enqueue, when the migration has not run.
    try {
      // The columns added in 0.2 are probed too: an older table fails here, not mid-dispatch.
      await dataSource.query(
        `SELECT 1 FROM ${names.table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`,
      );
    } catch (error) {
      throw new OutboxTableMissingError(
        OutboxMessages.tableMissing(names.table, describeError(error), {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: dialect === 'mysql',
        }),
        names.table,
        { cause: error },
      );
    }
  }
  if (dataSource.isInitialized && dialect === 'mysql') {
    const { padded } = await mysqlPaddedColumns(
      (sql, params) => dataSource.query(sql, params),
      names,
    );
    if (padded.length > 0) {
      throw new OutboxTableMissingError(
        OutboxMessages.tablePadSpace(names.table, padded.join(', '), {
          tableName: table.tableName,
          schema: table.schema ?? undefined,
          keyLock: true,
        }),
        names.table,
        { cause: undefined },
      );
    }
  }
  if (dataSource.isInitialized && dialect === 'mysql' && policy.ordered) {
    await checkKeyLockTable(dataSource, names.lockTable, {
      tableName: table.tableName,
      schema: table.schema ?? undefined,
    });
  }
  switch (dialect) {
    case 'postgres': {
      // The lock namespace and NOTIFY channel follow the schema the table really lives in, so
      // that tenants with a schema each (by search_path) never wait on one another's enqueue
      // locks or wake one another's dispatchers.
      const schema = table.schema ?? (await postgresSchemaOf(dataSource, names.table));
      return new PostgresOutboxStore(dataSource, names, dispatch.notify, policy, timeoutMs, schema);
    }
    case 'mysql':
      return new MysqlOutboxStore(dataSource, names, policy, timeoutMs);
    case 'sqlite': {
      const store = new SqliteOutboxStore(dataSource, names, policy);
      if (dispatch.enabled) await store.open();
      return store;
    }
  }
}

/**
 * The schema the unqualified table really resolves to on this DataSource's connections (their
 * search_path). Not the DataSource's `schema` option: TypeORM does not set search_path from it,
 * and two apps sharing one table must share one lock namespace.
 */
async function postgresSchemaOf(dataSource: DataSource, table: string): Promise<string> {
  if (!dataSource.isInitialized) return 'public';
  const rows: unknown = await dataSource.query(
    `SELECT coalesce((SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
  WHERE c.oid = to_regclass($1)), current_schema()) AS schema`,
    [table],
  );
  const first = Array.isArray(rows) ? (rows[0] as { schema?: unknown } | undefined) : undefined;
  return typeof first?.schema === 'string' ? first.schema : 'public';
}

/**
 * The MySQL/MariaDB key-lock table must exist with all its rows: enqueue locks existing rows
 * only, so a missing row would silently stop serialising the keys that hash to it.
 */
async function checkKeyLockTable(
  dataSource: DataSource,
  lockTable: string,
  ref: { tableName: string; schema: string | undefined },
): Promise<void> {
  const expected = 2 * MYSQL_KEY_LOCK_BUCKETS;
  let problem: string | undefined;
  let cause: unknown;
  try {
    const [row] = await dataSource.query<{ n: number | string; lo: unknown; hi: unknown }[]>(
      `SELECT COUNT(*) AS n, MIN(bucket) AS lo, MAX(bucket) AS hi FROM ${lockTable}`,
    );
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
