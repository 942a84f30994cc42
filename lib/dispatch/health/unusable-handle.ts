import { someInChain } from '../../internal/error-chain';

/**
 * What drivers say when they are handed a transaction or connection handle that has already
 * ended: knex (under MikroORM and Kysely's knex dialects) and TypeORM.
 */
const ENDED_HANDLE_MESSAGES: readonly RegExp[] = [
  /^Transaction query already complete\b/,
  /^Query runner already released\b/,
];
const ENDED_HANDLE_NAMES: ReadonlySet<string> = new Set(['QueryRunnerAlreadyReleasedError']);

/**
 * Whether a database call failed only because the handle it ran on had already ended (a
 * transaction committed or rolled back, a released query runner): a fault of the SQL port, not
 * a database that cannot be reached. Pausing claims for it would be wrong twice over: the
 * database answers, and the pause would only grow while the port keeps handing out that handle.
 */
export function isUnusableHandle(error: unknown): boolean {
  return someInChain(
    error,
    ({ name, message }) =>
      (typeof name === 'string' && ENDED_HANDLE_NAMES.has(name)) ||
      (typeof message === 'string' &&
        ENDED_HANDLE_MESSAGES.some((pattern) => pattern.test(message))),
  );
}
