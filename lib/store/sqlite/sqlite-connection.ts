/** The part of better-sqlite3 the dispatcher's transactions use. */
export interface SqliteStatement {
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): { changes: number };
}
export interface SqliteConnection {
  prepare(sql: string): SqliteStatement;
  transaction<T>(fn: () => T): { immediate(): T };
  pragma(source: string): unknown;
  close(): unknown;
}
type SqliteConstructor = new (file: string, options: { timeout: number }) => SqliteConnection;

/**
 * Opens the dispatcher's own better-sqlite3 (or libSQL, which has its API) connection to the
 * app's database file, whatever ORM the app writes through: in WAL mode, so that readers never wait for the writer, and with a busy
 * timeout of 0, so that it never waits for a lock inside SQLite (see `SqliteOutboxStore`).
 */
export function openSqliteConnection(
  file: string,
  driver: 'better-sqlite3' | 'libsql' = 'better-sqlite3',
  load: (name: string) => unknown = defaultLoad,
): SqliteConnection {
  const Database = load(driver) as SqliteConstructor;
  const connection = new Database(file, { timeout: 0 });
  try {
    connection.pragma('journal_mode = WAL');
  } catch (error) {
    connection.close();
    throw error;
  }
  return connection;
}

function defaultLoad(name: string): unknown {
  // An optional peer: loaded only when an app on SQLite runs the dispatcher.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(name);
}
