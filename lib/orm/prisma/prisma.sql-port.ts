import type { SqlPort, SqlResult, SqlRunner } from '../../store/sql-port';
import type { PrismaClientLike, PrismaRawClient } from './prisma-client';
import { statementShape } from './statement-shape';

/**
 * How long the outbox's own transactions may take and wait for a connection. Prisma's default
 * interactive-transaction timeout (5 s) would cut a claim short while the database is slow; the
 * store bounds its statements itself (`dispatcher.dbTimeoutMs`).
 */
const OWN_TRANSACTION = { maxWait: 10_000, timeout: 60_000 } as const;

/** The statements of an interactive transaction's `tx`. */
export function prismaSqlRunner(tx: PrismaRawClient): SqlRunner {
  return { query: (sql, params) => run(tx, sql, params) };
}

/**
 * The outbox's own work through Prisma Client on PostgreSQL: raw statements, and short READ
 * COMMITTED interactive transactions. No `listen`: Prisma holds no connection for
 * notifications, so the dispatcher polls.
 */
export function prismaSqlPort(prisma: PrismaClientLike): SqlPort {
  return {
    databaseType: 'postgres',
    // Prisma connects on first use.
    isConnected: true,
    query: (sql, params) => run(prisma, sql, params),
    transaction: (work) =>
      prisma.$transaction((tx) => work(prismaSqlRunner(tx)), {
        isolationLevel: 'ReadCommitted',
        ...OWN_TRANSACTION,
      }),
  };
}

/**
 * Prisma answers either rows (`$queryRawUnsafe`) or a count (`$executeRawUnsafe`), not both: the
 * statement's shape picks the call that gives what the port must report.
 */
async function run<R>(
  client: PrismaRawClient,
  sql: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const values = params ?? [];
  const shape = statementShape(sql);
  if (shape === 'count') {
    return { rows: [], affected: await client.$executeRawUnsafe(sql, ...values) };
  }
  const rows = await client.$queryRawUnsafe<R[]>(sql, ...values);
  const list = Array.isArray(rows) ? rows : [];
  // A write with RETURNING answers one row per changed row; a read changes none.
  return { rows: list, affected: shape === 'returning' ? list.length : 0 };
}
