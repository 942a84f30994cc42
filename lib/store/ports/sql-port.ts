/**
 * The SQL port: the few things the outbox needs from a database connection, and all it asks of
 * an ORM or driver. TypeORM is one implementation (`lib/typeorm/`); another ORM or a plain
 * driver is another, and the stores, the admin and the table checks run unchanged on top.
 *
 * Statements arrive finished: written by the database's folder (`lib/store/<database>/`) in that
 * database's placeholder style (`$1` on PostgreSQL, `?` elsewhere), names validated and quoted,
 * every value bound through `params`. A port passes them to its driver as they are.
 *
 * Glossary of the terms the stores use (ARCHITECTURE.md has the long form):
 * - **claim**: lease a batch of due messages to one dispatcher (`lock_token`, `locked_until`).
 * - **claim window**: the bounded run of due rows a claim looks at, so its cost does not grow
 *   with a backlog queued behind a stuck key.
 * - **fencing**: a settle changes only rows still holding the claim's token, so a dispatcher
 *   whose lease expired cannot overwrite the work of the one that took over.
 * - **waiting / park**: with ordering on, the followers of a key whose head is not delivered
 *   are parked (`waiting`) out of the claim's path.
 * - **promote**: when a key's head leaves the queue, its next waiting message becomes `pending`.
 * - **orphan**: a waiting message with no earlier undelivered message of its key (the safety
 *   net `promoteOrphans` promotes it).
 * - **outage**: the broker or database is down; the batch is released with its attempt given
 *   back and claims pause.
 */

/** A row as the driver answered it, keyed by column name. */
export type SqlRow = Record<string, unknown>;

/** What one statement answered. */
export interface SqlResult<R = SqlRow> {
  /** The rows of a SELECT, or of a statement with `RETURNING`; empty for the others. */
  readonly rows: R[];
  /** Rows an INSERT, UPDATE or DELETE changed, as the driver counts them (0 for a SELECT). */
  readonly affected: number;
  /**
   * MySQL/MariaDB: the auto-increment id a one-row INSERT generated, 0 when it wrote none (a
   * duplicate left alone). Undefined where the driver does not report one.
   */
  readonly insertId?: number;
}

/** How the store asks a port to run one statement. */
export interface SqlQueryOptions {
  /**
   * A name for this statement's text; a store gives one text one name, and never that name to
   * another text. A port whose driver keeps prepared statements per connection may prepare the
   * text once under the name and then execute it by name: PostgreSQL parses and plans it once
   * per connection instead of on every call (bench P5: most of what a one-message enqueue cost
   * over a hand-written INSERT). A port that cannot runs the text as usual. Left out when the
   * user turned prepared statements off (`preparedStatements: false`).
   */
  readonly prepare?: string;
  /**
   * PostgreSQL, the enqueue: the statement as it may run where the driver knows, in the same
   * synchronous step as it sends it, that the connection is inside an open transaction block with
   * nothing sent ahead of it (node-postgres: ready for a query, its last transaction status
   * `'T'`). The statement's own text checks that it runs inside the caller's transaction, and is
   * refused in one that has not written yet, to be sent again after giving it an id (three round
   * trips); this form needs no such check, and writes in one. A port that cannot tell sends the
   * statement's own text.
   */
  readonly inTransaction?: { readonly text: string; readonly prepare?: string };
}

/** Runs statements on one connection: the caller's transaction, or one of the port's own. */
export interface SqlRunner {
  query<R = SqlRow>(
    sql: string,
    params?: readonly unknown[],
    options?: SqlQueryOptions,
  ): Promise<SqlResult<R>>;
}

/** A named statement for `SqlPort.transactionStatement`. */
export interface OneTripStatement {
  readonly text: string;
  readonly params: readonly unknown[];
  /** The name it is prepared under (`SqlQueryOptions.prepare`). */
  readonly name: string;
  /** `EXECUTE <name>(<its params as constants>)`, finished by the store. */
  readonly executed: string;
}

/**
 * A connection held by the outbox for as long as it likes (`SqlPort.session`), not returned to
 * the pool between statements: what a session lock (the dispatcher's owner lock) lives on.
 */
export interface SqlSession extends SqlRunner {
  /**
   * Gives the connection up. `broken`: a statement on it failed or did not answer, so it is
   * closed rather than handed back to the pool with whatever it holds.
   */
  release(broken: boolean): Promise<void>;
}

/** Called when a LISTEN connection is lost (an error, or the server closed it). */
export type SqlListenLost = (error: Error) => void;

/** The database connection the outbox owns its work through (not the app's transactions). */
export interface SqlPort extends SqlRunner {
  /**
   * The database behind the port: `postgres`, `mysql` (MySQL and MariaDB) or `sqlite`; a
   * TypeORM driver type (`mariadb`, `better-sqlite3`) names its database too (the keys of
   * `OUTBOX_DATABASES`).
   */
  readonly databaseType: string;
  /** Whether statements can run now: false until the application's connection is open. */
  readonly isConnected: boolean;
  /**
   * True once the application's handle was ended for good (an ended pool, a closed Database):
   * unlike a connection not open yet, it will never run a statement, so the app must not start
   * on it. Left out where the library cannot tell the two apart.
   */
  readonly closed?: boolean;
  /**
   * SQLite: the database file. The dispatcher opens a connection of its own to it, since an ORM
   * shares one connection for every transaction of the app on SQLite.
   */
  readonly databaseFile?: string;
  /**
   * SQLite: the better-sqlite3-compatible module the dispatcher opens its connection with,
   * `better-sqlite3` when left out, `libsql` for an app on libSQL. It must be the library of the
   * app's own connection: two copies of SQLite in one process on one file break each other's
   * file locks (closing either one's connection drops the other's), and the dispatcher's claims
   * then stop seeing the app's commits.
   */
  readonly sqliteDriver?: 'better-sqlite3' | 'libsql';
  /**
   * Runs `work` in a short READ COMMITTED transaction on a pooled connection of its own:
   * committed when `work` resolves, rolled back when it throws, the connection released either
   * way. Never inside the application's transactions.
   */
  transaction<T>(work: (tx: SqlRunner) => Promise<T>): Promise<T>;
  /**
   * PostgreSQL: `transaction`, with the `opening` statements (no parameters: settings, locks)
   * sent in the same simple query as its BEGIN, in one round trip. A port offers it only where
   * its driver takes several statements in one simple query; without it the store runs them
   * one by one as the transaction's first statements. On a busy machine each round trip of the
   * dispatcher's short transactions is time its batch waits for the CPU (bench P1).
   */
  transactionOpening?<T>(
    opening: readonly string[],
    work: (tx: SqlRunner) => Promise<T>,
  ): Promise<T>;
  /**
   * PostgreSQL: `transactionOpening` for a transaction of one named statement, in one round trip
   * on a connection that has prepared it: BEGIN, `opening`, `statement.executed` (the store's
   * `EXECUTE` of it by name, its values written in as constants) and COMMIT go in one simple
   * query. On a connection that has not, the statement runs prepared under `statement.name`
   * between the opening and COMMIT, and the port remembers that the connection holds it.
   * `onSent` is called once the statement has been sent. Answers the statement's result. Only
   * a port whose driver prepares named statements and takes several statements in one simple
   * query offers it; the store's claim and settle are then one round trip each, not three.
   */
  transactionStatement?<R>(
    opening: readonly string[],
    statement: OneTripStatement,
    onSent?: () => void,
  ): Promise<SqlResult<R>>;
  /**
   * PostgreSQL and MySQL/MariaDB: a connection of the port's own, held until released. The
   * dispatcher holds its owner lock on it (fast takeover after a crash, ARCHITECTURE.md
   * "Takeover after a crash"). Left out: the leases of a crashed process wait out `leaseMs`.
   */
  session?(): Promise<SqlSession>;
  /**
   * PostgreSQL LISTEN on a dedicated connection, for wake-ups between polls. `channel` arrives
   * quoted. Resolves once listening, to a function that stops and releases the connection;
   * `onLost` is called once if the connection goes before that. `onNotify` gets each
   * notification's payload ('' for none). Ports without notifications leave it out, and the
   * dispatcher polls.
   */
  listen?(
    channel: string,
    onNotify: (payload: string) => void,
    onLost: SqlListenLost,
  ): Promise<() => Promise<void>>;
}
