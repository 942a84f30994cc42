import { someInChain } from '../../internal/error-chain';

/** SQLSTATE of a statement cancelled, here by `statement_timeout` (PostgreSQL). */
const QUERY_CANCELED = '57014';
/** MySQL's `max_execution_time` and MariaDB's `max_statement_time` interrupting a statement. */
const MYSQL_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([3024, 1969]);

/**
 * Whether a statement failed because the server cancelled it for running past its own time limit
 * (PostgreSQL's `statement_timeout`, which the dispatcher's transactions set to `dbTimeoutMs`).
 * The server answered: it is busy, not gone, and the same work in smaller statements may pass.
 */
export function isStatementTimeout(error: unknown): boolean {
  return someInChain(
    error,
    (e) =>
      (e.code === QUERY_CANCELED &&
        typeof e.message === 'string' &&
        /statement timeout/.test(e.message)) ||
      (typeof e.errno === 'number' && MYSQL_TIMEOUT_ERRNOS.has(e.errno)),
  );
}
