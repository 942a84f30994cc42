import type { OneTripStatement, SqlResult } from '../store/ports/sql-port';

/**
 * What the two PostgreSQL ports (node-postgres, TypeORM on node-postgres) share for
 * `SqlPort.transactionStatement`: which named statements each connection holds, the one simple
 * query of a transaction, and its statement's result among the query's results.
 */

/** The statement names each connection (a node-postgres client) has run prepared for us. */
const held = new WeakMap<object, Set<string>>();

export function holdsStatement(connection: object, name: string): boolean {
  return held.get(connection)?.has(name) === true;
}

export function heldStatement(connection: object, name: string, holds: boolean): void {
  let names = held.get(connection);
  if (names === undefined) {
    if (!holds) return;
    names = new Set();
    held.set(connection, names);
  }
  if (holds) names.add(name);
  else names.delete(name);
}

/** The whole transaction as one simple query: BEGIN with the opening, the EXECUTE, COMMIT. */
export function oneTripQuery(opening: readonly string[], statement: OneTripStatement): string {
  return ['BEGIN ISOLATION LEVEL READ COMMITTED', ...opening, statement.executed, 'COMMIT'].join(
    '; ',
  );
}

/** node-postgres' answer to one statement of a simple query. */
interface PgStatementResult {
  readonly command?: string | null;
  readonly rowCount?: number | null;
  readonly rows?: readonly unknown[];
}

// node-postgres counts the rows a SELECT returned in `rowCount` too; `affected` is the rows a
// statement changed, so only these statement tags report a count.
const CHANGING_COMMANDS: ReadonlySet<string> = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/**
 * The EXECUTE's result among node-postgres' answers to `oneTripQuery` (one per statement, in
 * order: BEGIN, each opening statement, the EXECUTE, COMMIT).
 */
export function oneTripResult<R>(answer: unknown, opening: readonly string[]): SqlResult<R> {
  const results = Array.isArray(answer) ? (answer as PgStatementResult[]) : [];
  const result = results[opening.length + 1];
  if (result === undefined || results.length !== opening.length + 3) {
    throw new Error(
      `expected ${opening.length + 3} results from the transaction's query, got ${results.length}`,
    );
  }
  const command = result.command;
  const counts = command === undefined || command === null || CHANGING_COMMANDS.has(command);
  return {
    rows: Array.isArray(result.rows) ? (result.rows as R[]) : [],
    affected: counts ? (result.rowCount ?? 0) : 0,
  };
}

/**
 * PostgreSQL's 26000 (no such prepared statement): the connection no longer holds it (a
 * pooler switched or reset the server connection).
 */
export function statementGone(error: unknown): boolean {
  const e = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  return e?.code === '26000' || e?.driverError?.code === '26000';
}
