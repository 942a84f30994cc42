import type { SqlRunner } from '../store/ports/sql-port';

/**
 * `runner` with the library's own error for a transaction that has ended (Kysely's "Transaction
 * is already committed", Prisma's P2028) turned into `refusal()`: the library refused the
 * statement, so nothing was written, and the caller is told which handle to pass instead.
 */
export function refusingEndedTransaction(
  runner: SqlRunner,
  ended: (error: unknown) => boolean,
  refusal: () => Error,
): SqlRunner {
  return {
    async query(sql, params, options) {
      try {
        return await runner.query(sql, params, options);
      } catch (error) {
        if (ended(error)) throw refusal();
        throw error;
      }
    },
  };
}
