import type { DataSource } from 'typeorm';
import type { OutboxDatabase } from '../outbox-database';
import { postgresAdmin } from './postgres.admin-sql';
import {
  postgresInboxDrop,
  postgresInboxInsert,
  postgresInboxPurge,
  postgresInboxTable,
} from './postgres.inbox-sql';
import { postgresCreateTable, postgresDropTable } from './postgres.sql';
import { PostgresOutboxStore } from './postgres.store';

/** PostgreSQL 12+. */
export const postgresDatabase: OutboxDatabase<'postgres'> = {
  dialect: 'postgres',
  urlSchemes: ['postgres', 'postgresql'],
  quoting: 'double',
  schemas: true,
  keyLockTable: false,
  createTable: postgresCreateTable,
  dropTable: postgresDropTable,
  async createStore(dataSource, { names, policy, timeoutMs, table, dispatch }) {
    // The lock namespace and NOTIFY channel follow the schema the table really lives in, so
    // that tenants with a schema each (by search_path) never wait on one another's enqueue
    // locks or wake one another's dispatchers.
    const schema = table.schema ?? (await postgresSchemaOf(dataSource, names.table));
    return new PostgresOutboxStore(dataSource, names, dispatch.notify, policy, timeoutMs, schema);
  },
  admin: postgresAdmin,
  inbox: {
    createTable: postgresInboxTable,
    dropTable: postgresInboxDrop,
    insert: postgresInboxInsert,
    purge: postgresInboxPurge,
    sharedConnection: false,
  },
};

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
