/**
 * The part of Prisma Client the outbox uses, typed here so that the outbox compiles and loads
 * without `@prisma/client` or a generated client: any `PrismaClient` (with a driver adapter or
 * not) and the `tx` of its interactive transactions fit.
 */

/** What runs raw SQL: a `PrismaClient`, or the `tx` of `prisma.$transaction(async (tx) => …)`. */
export interface PrismaRawClient {
  /** Runs a statement that answers rows; `$1`, `$2`… bound to `values`. */
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  /** Runs a statement and answers how many rows it changed. */
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** A `PrismaClient`: raw SQL, and interactive transactions. */
export interface PrismaClientLike extends PrismaRawClient {
  $transaction<T>(
    work: (tx: PrismaTransactionClient) => Promise<T>,
    // The levels the outbox asks for; a SQLite client's options name only 'Serializable'.
    options?: {
      isolationLevel?: 'ReadCommitted' | 'Serializable';
      maxWait?: number;
      timeout?: number;
    },
  ): Promise<T>;
}

/**
 * The `tx` of an interactive transaction: the client without `$connect`, `$disconnect` and the
 * other client-level methods, which is how it is told from the client itself.
 */
export type PrismaTransactionClient = PrismaRawClient;
