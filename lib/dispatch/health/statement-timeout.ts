/** SQLSTATE of a statement cancelled, here by `statement_timeout` (PostgreSQL). */
const QUERY_CANCELED = '57014';
/** MySQL's `max_execution_time` and MariaDB's `max_statement_time` interrupting a statement. */
const MYSQL_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([3024, 1969]);
/** Enough for an error wrapped by an ORM and by the store; a cycle cannot loop. */
const MAX_CAUSES = 5;

/**
 * Whether a statement failed because the server cancelled it for running past its own time limit
 * (PostgreSQL's `statement_timeout`, which the dispatcher's transactions set to `dbTimeoutMs`).
 * The server answered: it is busy, not gone, and the same work in smaller statements may pass.
 */
export function isStatementTimeout(error: unknown): boolean {
  let current: unknown = error;
  for (let i = 0; i < MAX_CAUSES && typeof current === 'object' && current !== null; i++) {
    const e = current as {
      code?: unknown;
      errno?: unknown;
      message?: unknown;
      driverError?: unknown;
      cause?: unknown;
    };
    if (
      e.code === QUERY_CANCELED &&
      typeof e.message === 'string' &&
      /statement timeout/.test(e.message)
    ) {
      return true;
    }
    if (typeof e.errno === 'number' && MYSQL_TIMEOUT_ERRNOS.has(e.errno)) return true;
    current = e.driverError ?? e.cause;
  }
  return false;
}
