/**
 * The part of node-postgres (`pg`) the port uses, typed here so that neither the library nor its
 * types are needed to compile or load the outbox: a `pg.Pool` and its `PoolClient` fit these.
 */

/** A statement's result as node-postgres answers it. */
export interface PgQueryResult {
  /** The statement's tag: `SELECT`, `INSERT`, `UPDATE`, `DELETE`, `MERGE`, … */
  readonly command?: string | null;
  readonly rowCount: number | null;
  readonly rows: readonly unknown[];
}

/** Anything that runs a statement: a `Pool`, a `PoolClient` or a `Client`. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
}

/** A `PoolClient`: a connection checked out of the pool until `release`. */
export interface PgPoolClient extends PgQueryable {
  /** Back to the pool; with an error (or `true`) the pool closes the connection instead. */
  release(error?: Error | boolean): void;
  on(event: 'notification', listener: (message: unknown) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeListener(event: 'notification', listener: (message: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
  removeListener(event: 'end', listener: () => void): unknown;
  /**
   * `'I'` idle, `'T'` inside a transaction block, `'E'` in a failed one; null before the
   * connection is ready and always on the native client. Added in node-postgres 8.21.
   */
  getTransactionStatus?(): string | null;
}

/**
 * Whether a statement sent to `client` now runs inside its open transaction block: node-postgres'
 * own client (not pipelining) ready for a query, so nothing is in flight or queued ahead, and
 * the server's last word was `'T'`. Read in the same synchronous step as the statement is sent,
 * nothing the app does later can come between. False where it cannot tell (another client, the
 * native one, node-postgres before 8.21).
 */
export function pgInOpenTransaction(client: unknown): boolean {
  if (typeof client !== 'object' || client === null) return false;
  const c = client as {
    readyForQuery?: unknown;
    pipeline?: unknown;
    getTransactionStatus?: unknown;
  };
  return (
    c.readyForQuery === true &&
    c.pipeline !== true &&
    typeof c.getTransactionStatus === 'function' &&
    (c.getTransactionStatus as () => unknown).call(client) === 'T'
  );
}

/** A `pg.Pool`. */
export interface PgPool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
  /** Set by `pg.Pool` once `end()` was called. */
  readonly ending?: boolean;
}
