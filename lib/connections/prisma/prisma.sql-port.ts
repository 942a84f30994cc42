import type { SqlPort, SqlResult, SqlRunner } from '../../store/ports/sql-port';
import { outboxDatabase, type OutboxDialect } from '../../store/schema/outbox-table-ddl';
import type { PrismaClientLike, PrismaRawClient } from './prisma-client';
import { statementShape } from '../../drivers/statement-shape';

/** The databases of Prisma's providers the outbox runs on. */
export type PrismaDatabase = OutboxDialect;

/**
 * How long the outbox's own transactions may take and wait for a connection. Prisma's default
 * interactive-transaction timeout (5 s) would cut a claim short while the database is slow; the
 * store bounds its statements itself (`dispatcher.dbTimeoutMs`).
 */
const OWN_TRANSACTION = { maxWait: 10_000, timeout: 60_000 } as const;

/** The statements of an interactive transaction's `tx`. */
export function prismaSqlRunner(
  tx: PrismaRawClient,
  database: PrismaDatabase = 'postgres',
): SqlRunner {
  return { query: (sql, params) => run(tx, database, sql, params) };
}

/**
 * The outbox's own work through Prisma Client: raw statements, and short interactive
 * transactions (READ COMMITTED on PostgreSQL and MySQL; SQLite's are serializable). No `listen`:
 * Prisma holds no connection for notifications, so the dispatcher polls.
 *
 * - MySQL/MariaDB: a statement that must report its insert id (the idempotent insert) runs in a
 *   transaction of its own when it comes outside one, since the id is read back on its connection.
 * - SQLite: the driver adapter has one connection, and a raw query outside `$transaction` runs
 *   on it even while an interactive transaction of the app is open there, so it would commit or
 *   roll back with the app's work. Each statement of the port runs in an interactive transaction
 *   of its own instead, which the adapter starts only once the app's has ended. The database file
 *   (where the dispatcher opens its own connection) is read from the database at the first
 *   statement (`pragma_database_list`), which is the bootstrap's table check.
 */
export function prismaSqlPort(
  prisma: PrismaClientLike,
  database: PrismaDatabase = 'postgres',
): SqlPort {
  const { serializableOnly, insertIdReportsWrite, file: onFile } = outboxDatabase(database);
  const transaction = <T>(work: (tx: SqlRunner) => Promise<T>): Promise<T> =>
    prisma.$transaction((tx) => work(prismaSqlRunner(tx, database)), {
      // Prisma refuses any level but SERIALIZABLE on SQLite, whose transactions are serializable.
      ...(serializableOnly ? {} : { isolationLevel: 'ReadCommitted' as const }),
      ...OWN_TRANSACTION,
    });
  if (!onFile) {
    return {
      databaseType: database,
      // Prisma connects on first use.
      isConnected: true,
      query: (sql, params) =>
        insertIdReportsWrite && reportsInsertId(sql)
          ? transaction((tx) => tx.query(sql, params))
          : run(prisma, database, sql, params),
      transaction,
    };
  }
  let file: string | undefined;
  let fileRead: Promise<void> | undefined;
  const readFile = (): Promise<void> =>
    (fileRead ??= transaction(async (tx) => {
      const { rows } = await tx.query<{ file: unknown }>(
        "SELECT file FROM pragma_database_list WHERE name = 'main'",
      );
      const found = rows[0]?.file;
      file = typeof found === 'string' ? found : '';
    }).catch((error: unknown) => {
      fileRead = undefined;
      throw error;
    }));
  return {
    databaseType: database,
    isConnected: true,
    get databaseFile() {
      return file;
    },
    async query(sql, params) {
      await readFile();
      return transaction((tx) => tx.query(sql, params));
    },
    async transaction(work) {
      await readFile();
      return transaction(work);
    },
  };
}

/**
 * Prisma answers either rows (`$queryRawUnsafe`) or a count (`$executeRawUnsafe`), not both: the
 * statement's shape picks the call that gives what the port must report.
 */
async function run<R>(
  client: PrismaRawClient,
  database: PrismaDatabase,
  sql: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const values = params ?? [];
  const shape = statementShape(sql);
  if (shape === 'count') {
    if (outboxDatabase(database).insertIdReportsWrite && reportsInsertId(sql))
      return insertWithId(client, sql, values);
    return { rows: [], affected: await client.$executeRawUnsafe(sql, ...values) };
  }
  const rows = await client.$queryRawUnsafe<R[]>(sql, ...values);
  const list = Array.isArray(rows) ? rows : [];
  // A write with RETURNING answers one row per changed row; a read changes none.
  return { rows: list, affected: shape === 'returning' ? list.length : 0 };
}

/**
 * MySQL's idempotent insert (`INSERT … ON DUPLICATE KEY UPDATE id = id`) tells whether it wrote
 * its row only by the insert id, which `$executeRawUnsafe` does not return, and by no count
 * (the driver counts a duplicate left alone as a found row). So LAST_INSERT_ID() is set to 0
 * before it and read after it, on the same connection: still 0 when nothing was written.
 */
async function insertWithId<R>(
  client: PrismaRawClient,
  sql: string,
  values: readonly unknown[],
): Promise<SqlResult<R>> {
  await client.$queryRawUnsafe('SELECT LAST_INSERT_ID(0)');
  const affected = await client.$executeRawUnsafe(sql, ...values);
  const rows = await client.$queryRawUnsafe<{ id: unknown }[]>('SELECT LAST_INSERT_ID() AS id');
  const id = Array.isArray(rows) ? rows[0]?.id : undefined;
  return { rows: [], affected, insertId: Number(id ?? 0) };
}

/** The outbox's MySQL statements that report an insert id: its idempotent inserts. */
function reportsInsertId(sql: string): boolean {
  return /^\s*insert\b/i.test(sql) && /\bon\s+duplicate\s+key\s+update\b/i.test(sql);
}
