import type { SqlPort, SqlResult, SqlRow, SqlRunner } from '../../store/ports/sql-port';
import { statementShape } from '../statement-shape';

/**
 * The part of `@libsql/client` the port uses, typed here so that the outbox compiles and loads
 * without it: a `Client` of `createClient({ url: 'file:…' })` fits.
 */
export interface LibsqlClient {
  /** `file` for a local database; `http`, `ws`… for a server. */
  readonly protocol: string;
  readonly closed: boolean;
  execute(statement: { sql: string; args: unknown[] }): Promise<LibsqlResultSet>;
  /** A transaction on a connection of its own; `write` begins it IMMEDIATE. */
  transaction(mode: 'write'): Promise<LibsqlTransaction>;
}

/** An open libSQL transaction. */
export interface LibsqlTransaction {
  execute(statement: { sql: string; args: unknown[] }): Promise<LibsqlResultSet>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
  close(): void;
}

/** What libSQL answers: rows as arrays indexed like `columns`, and the rows a write changed. */
export interface LibsqlResultSet {
  readonly columns: readonly string[];
  readonly rows: readonly ArrayLike<unknown>[];
  readonly rowsAffected: number;
}

// Every connection of a libSQL client waits for no lock (its busy timeout is 0 unless the app
// sets one), so a write that meets the app's open transaction fails at once; it did nothing,
// and is tried again after an asynchronous pause, never by waiting inside SQLite (which would
// freeze the event loop the app's transaction needs to commit).
const BUSY_WAIT_MS = 5_000;
const MAX_BUSY_STEP_MS = 50;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A libSQL answer in the port's terms. libSQL counts no changed rows for a statement that
 * answers rows, so a write with RETURNING counts the rows it answered.
 */
export function libsqlResult<R>(sql: string, result: LibsqlResultSet): SqlResult<R> {
  const rows = result.rows.map((row) => {
    const record: SqlRow = {};
    result.columns.forEach((column, i) => (record[column] = row[i]));
    return record as R;
  });
  const shape = statementShape(sql);
  const affected = shape === 'read' ? 0 : shape === 'returning' ? rows.length : result.rowsAffected;
  return { rows, affected };
}

/**
 * The outbox's own work on a local libSQL database (`file:`): its statements on the client's
 * pooled connections and short transactions of their own (`BEGIN IMMEDIATE`), each begun again
 * while the app's transaction holds the write lock. The database file, where the dispatcher
 * opens its own connection, is read from the database at the first statement (the bootstrap's
 * table check). No `listen`.
 */
export function libsqlSqlPort(client: LibsqlClient): SqlPort {
  let file: string | undefined;
  let fileRead: Promise<void> | undefined;
  const readFile = (): Promise<void> =>
    (fileRead ??= client
      .execute({ sql: "SELECT file FROM pragma_database_list WHERE name = 'main'", args: [] })
      .then((result) => {
        const found = result.rows[0]?.[0];
        file = typeof found === 'string' ? found : '';
      })
      .catch((error: unknown) => {
        fileRead = undefined;
        throw error;
      }));
  return {
    databaseType: 'sqlite',
    // libSQL bundles its own SQLite: the dispatcher's connection must be one of libSQL's too.
    sqliteDriver: 'libsql',
    get isConnected() {
      return !client.closed;
    },
    get closed() {
      return client.closed;
    },
    get databaseFile() {
      return file;
    },
    async query<R>(sql: string, params?: readonly unknown[]) {
      await readFile();
      const result = await whenFree(() => client.execute({ sql, args: [...(params ?? [])] }));
      return libsqlResult<R>(sql, result);
    },
    async transaction(work) {
      await readFile();
      const tx = await whenFree(() => client.transaction('write'));
      try {
        const value = await work({
          query: async <R>(sql: string, params?: readonly unknown[]) =>
            libsqlResult<R>(sql, await tx.execute({ sql, args: [...(params ?? [])] })),
        } satisfies SqlRunner);
        await tx.commit();
        return value;
      } catch (error) {
        await tx.rollback().catch(() => undefined);
        throw error;
      } finally {
        tx.close();
      }
    },
  };
}

async function whenFree<T>(attempt: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + BUSY_WAIT_MS;
  for (let step = 1; ; step = Math.min(step * 2, MAX_BUSY_STEP_MS)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isBusy(error) || Date.now() >= deadline) throw error;
    }
    await sleep(step);
  }
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}
