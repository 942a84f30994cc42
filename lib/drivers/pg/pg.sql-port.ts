import type {
  OneTripStatement,
  SqlListenLost,
  SqlPort,
  SqlQueryOptions,
  SqlResult,
  SqlRunner,
  SqlSession,
} from '../../store/ports/sql-port';
import {
  pgInOpenTransaction,
  type PgPool,
  type PgPoolClient,
  type PgQueryable,
  type PgQueryResult,
} from './pg-client';
import { hearIdleClientErrors } from './pg-pool-errors';
import {
  heldStatement,
  holdsStatement,
  oneTripQuery,
  oneTripResult,
  statementGone,
} from '../postgres-one-trip';

// node-postgres counts the rows a SELECT returned in `rowCount` too; the port's `affected` is
// the rows a statement changed, so only these statement tags report a count.
const CHANGING_COMMANDS: ReadonlySet<string> = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/**
 * The statements of the caller's transaction: the client they opened `BEGIN` on. `prepares`
 * when `client` is node-postgres' own (a wrapper that takes only text, such as Drizzle's
 * session, is not): statements the store names then run prepared.
 */
export function pgSqlRunner(client: PgQueryable, prepares = false): SqlRunner {
  return {
    query: (sql, params, options) => {
      const checked = options?.inTransaction;
      // Checked here, and `run` sends the statement before its first await.
      if (prepares && checked !== undefined && pgInOpenTransaction(client)) {
        const named = checked.prepare === undefined ? undefined : { prepare: checked.prepare };
        return run(client, checked.text, params, named);
      }
      return run(client, sql, params, prepares ? options : undefined);
    },
  };
}

/** The outbox's own work on a node-postgres pool: pooled statements, short transactions, LISTEN. */
export function pgSqlPort(pool: PgPool): SqlPort {
  hearIdleClientErrors(pool);
  return {
    databaseType: 'postgres',
    get isConnected() {
      return pool.ending !== true;
    },
    get closed() {
      return pool.ending === true;
    },
    query: (sql, params, options) => run(pool, sql, params, options),
    transaction: (work) => pgTransaction(pool, '', work),
    // Without parameters node-postgres sends a simple query, which may hold several statements.
    transactionOpening: (opening, work) =>
      pgTransaction(pool, opening.map((statement) => `; ${statement}`).join(''), work),
    transactionStatement: (opening, statement, onSent) =>
      pgStatementTransaction(pool, opening, statement, onSent),
    listen: (channel, onNotify, onLost) => pgListen(pool, channel, onNotify, onLost),
    session: () => pgSession(pool),
  };
}

/** `pg.Pool.connect` in its callback form, which `PgPool` does not type. */
interface PgCallbackPool {
  connect(callback: (error: Error | undefined | null, client?: PgPoolClient) => void): unknown;
}

/**
 * A client of `pool` with `onError` listening from the moment the pool hands it over. The
 * callback form is used because a new connection the server ends as soon as it is ready
 * (pg_terminate_backend during a reconnect, a failover) brings its FATAL in the same read as the
 * ReadyForQuery that completes the connect: node-postgres hands the client over and parses on at
 * once, before a promise's continuation could add a listener, and a client with none ends the
 * process. A pool-like object whose `connect` takes no callback is listened to on its promise.
 */
function checkOut(pool: PgPool, onError: (error: Error) => void): Promise<PgPoolClient> {
  return new Promise((resolve, reject) => {
    let taken = false;
    const take = (client: PgPoolClient): void => {
      if (taken) return;
      taken = true;
      client.on('error', onError);
      resolve(client);
    };
    const answer = (pool as unknown as PgCallbackPool).connect((error, client) => {
      if (client !== undefined && (error === undefined || error === null)) take(client);
      else reject(error ?? new Error('node-postgres gave no client'));
    });
    if (typeof (answer as { then?: unknown } | undefined)?.then === 'function') {
      (answer as Promise<PgPoolClient>).then(take, reject);
    }
  });
}

/** A pool client kept for the outbox (`SqlPort.session`): the dispatcher's owner lock lives on it. */
async function pgSession(pool: PgPool): Promise<SqlSession> {
  let lost: Error | undefined;
  // A held client has no listener of the pool's: the server ending its connection would end
  // the process. Heard, the next statement fails instead and the lock is known to be gone.
  const failed = (error: Error): void => {
    lost ??= error;
  };
  const client = await checkOut(pool, failed);
  let released = false;
  return {
    query: (sql, params) => (lost === undefined ? run(client, sql, params) : Promise.reject(lost)),
    release(broken) {
      if (!released) {
        released = true;
        client.removeListener('error', failed);
        // With an error the pool closes the connection, and the session's locks with it.
        client.release(
          broken || lost !== undefined ? (lost ?? new Error('outbox session closed')) : undefined,
        );
      }
      return Promise.resolve();
    },
  };
}

/** A READ COMMITTED transaction on a pool client; `opening` rides on its BEGIN. */
async function pgTransaction<T>(
  pool: PgPool,
  opening: string,
  work: (tx: SqlRunner) => Promise<T>,
): Promise<T> {
  const guard = new ClientLoss();
  const client = await checkOut(pool, guard.heard);
  return onClient(client, guard, async () => {
    await client.query(`BEGIN ISOLATION LEVEL READ COMMITTED${opening}`);
    const value = await work(pgSqlRunner(client, true));
    await client.query('COMMIT');
    return value;
  });
}

/**
 * One named statement in a transaction of its own (`SqlPort.transactionStatement`): one simple
 * query on a client that holds the statement, else the opening, the statement prepared by name
 * and COMMIT, after which the client is known to hold it.
 */
async function pgStatementTransaction<R>(
  pool: PgPool,
  opening: readonly string[],
  statement: OneTripStatement,
  onSent?: () => void,
): Promise<SqlResult<R>> {
  const guard = new ClientLoss();
  const client = await checkOut(pool, guard.heard);
  const held = holdsStatement(client, statement.name);
  return onClient(client, guard, async () => {
    if (held) {
      const answer = client.query(oneTripQuery(opening, statement)).catch((error: unknown) => {
        if (statementGone(error)) heldStatement(client, statement.name, false);
        throw error;
      });
      onSent?.();
      return oneTripResult<R>(await answer, opening);
    }
    await client.query(['BEGIN ISOLATION LEVEL READ COMMITTED', ...opening].join('; '));
    const answer = run<R>(client, statement.text, statement.params, { prepare: statement.name });
    onSent?.();
    const result = await answer;
    await client.query('COMMIT');
    heldStatement(client, statement.name, true);
    return result;
  });
}

/**
 * What was heard of a checked-out client's connection. A checked-out client has no listener of
 * the pool's: when the server ends its connection (pg_terminate_backend, a failover, a proxy's
 * idle timeout) between two statements, its 'error' event would end the process. Heard here, the
 * next statement fails instead, as in an outage, and the client is closed rather than pooled.
 */
class ClientLoss {
  error: Error | undefined;
  readonly heard = (error: Error): void => {
    this.error ??= error;
  };
}

/**
 * Runs `work` on `client` and releases it: on a failure, with a ROLLBACK first (a failure
 * before COMMIT leaves the transaction open; after it, there is none and the ROLLBACK only
 * warns), and the client closed by the pool if even that failed.
 */
async function onClient<T>(
  client: PgPoolClient,
  loss: ClientLoss,
  work: () => Promise<T>,
): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (loss.error === undefined) {
      await client.query('ROLLBACK').catch((rollbackError: unknown) => {
        loss.error =
          rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
    }
    throw error;
  } finally {
    client.removeListener('error', loss.heard);
    client.release(loss.error);
  }
}

/** node-postgres' query config: with a `name`, prepared once per connection, then run by name. */
interface PgNamedQueryable {
  query(config: { name: string; text: string; values: unknown[] }): Promise<PgQueryResult>;
}

async function run<R>(
  target: PgQueryable,
  sql: string,
  params: readonly unknown[] | undefined,
  options?: SqlQueryOptions,
): Promise<SqlResult<R>> {
  const values = params === undefined ? [] : [...params];
  const result: PgQueryResult =
    options?.prepare === undefined
      ? await target.query(sql, values)
      : // Only a node-postgres client or pool gets options (`prepares`); PgQueryable types
        // the text form alone so that wrappers taking only text fit it too.
        await (target as unknown as PgNamedQueryable).query({
          name: options.prepare,
          text: sql,
          values,
        });
  const counts =
    result.command === undefined ||
    result.command === null ||
    CHANGING_COMMANDS.has(result.command);
  return {
    rows: Array.isArray(result.rows) ? (result.rows as R[]) : [],
    affected: counts ? (result.rowCount ?? 0) : 0,
  };
}

/**
 * LISTEN on a pool client held for it. `onLost` once when the connection goes while listening;
 * not while LISTEN is being set up (the returned promise rejects instead) nor once stopping.
 */
async function pgListen(
  pool: PgPool,
  channel: string,
  onNotify: (payload: string) => void,
  onLost: SqlListenLost,
): Promise<() => Promise<void>> {
  let lostStarting: Error | undefined;
  const early = (error: Error): void => {
    lostStarting ??= error;
  };
  const client = await checkOut(pool, early);
  let state: 'starting' | 'listening' | 'stopping' | 'released' = 'starting';
  // Read through a function: the event handlers change it while the LISTEN is awaited.
  const current = (): typeof state => state;
  const notify = (message: unknown): void => {
    const payload = (message as { payload?: unknown } | undefined)?.payload;
    onNotify(typeof payload === 'string' ? payload : '');
  };
  const failed = (error: Error): void => lose(error);
  // A connection the server closes cleanly (pg_terminate_backend, a restart, an idle timeout)
  // may end without an 'error': without this, wake-ups would stop for good.
  const ended = (): void => lose(new Error('LISTEN connection ended'));
  const release = (error: Error | boolean): void => {
    if (state === 'released') return;
    state = 'released';
    client.removeListener('notification', notify);
    client.removeListener('error', failed);
    client.removeListener('end', ended);
    // With an error (or true) the pool closes the connection rather than hand it out again.
    client.release(error);
  };
  const lose = (error: Error): void => {
    const report = state === 'listening';
    release(error);
    if (report) onLost(error);
  };
  client.on('notification', notify);
  client.on('error', failed);
  client.on('end', ended);
  client.removeListener('error', early);
  if (lostStarting !== undefined) {
    release(lostStarting);
    throw lostStarting;
  }
  try {
    await client.query(`LISTEN ${channel}`);
  } catch (error) {
    release(error instanceof Error ? error : true);
    throw error;
  }
  // The connection may have gone between the LISTEN's answer and now.
  if (current() === 'released') throw new Error('LISTEN connection lost while starting');
  state = 'listening';
  return async () => {
    if (state !== 'listening') return;
    state = 'stopping';
    // A connection that could not UNLISTEN would go on receiving: closed instead of pooled.
    const clean = await client.query(`UNLISTEN ${channel}`).then(
      () => true,
      () => false,
    );
    release(!clean);
  };
}
