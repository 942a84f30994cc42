/**
 * The parts of `@vlasky/zongji` (the binlog reader) and `mysql2` (the lock connection)
 * the source uses, typed here so that the outbox compiles and loads without either: they are
 * loaded when a MySQL log source first runs, never by the entry point.
 */
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { describeError } from '../../internal/describe-error';
import { MysqlLogTailingMessages } from './mysql-log-tailing.messages';

/** How the source logs in for the binlog, its lock and its checks (mysql2 connection options). */
export interface MysqlBinlogConnectionSettings {
  readonly host: string;
  /** @default 3306 */
  readonly port?: number;
  /** A user with REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB). */
  readonly user: string;
  readonly password?: string;
  /** mysql2's `ssl` option, passed as it is. */
  readonly ssl?: string | Readonly<Record<string, unknown>>;
}

/** One event of the binlog as zongji decodes it; only what the source reads. */
export interface BinlogClientEvent {
  getEventName(): string;
  /** The offset after this event in the current file (0 on the rotate zongji starts with). */
  readonly nextPosition: number;
  /** rotate: the file the following events are in. */
  readonly binlogName?: string;
  /** tablemap, through writerows' table id. */
  readonly schemaName?: string;
  readonly tableName?: string;
  /**
   * writerows: the rows inserted, each an object by column name. Typed `object` so that
   * zongji's own typings (rows of an update are `{ before, after }`) fit this interface.
   */
  readonly rows?: readonly object[];
  readonly tableId?: number;
  readonly tableMap?: Readonly<
    Record<number, { readonly parentSchema: string; readonly tableName: string }>
  >;
  /** query: its text (`BEGIN`, `COMMIT`, DDL). */
  readonly query?: string;
}

export interface BinlogClientStartOptions {
  serverId: number;
  filename: string;
  position: number;
  includeEvents: string[];
  includeSchema: Record<string, string[]>;
}

/** A zongji instance: one binlog connection and its control connection. */
export interface BinlogClient {
  on(event: 'binlog', listener: (event: BinlogClientEvent) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  once(event: 'stopped', listener: () => void): unknown;
  start(options: BinlogClientStartOptions): void;
  stop(): void;
  /**
   * The binlog connection (a mysql2 connection, made by `start`): paused while the source has
   * too many inserts waiting, and asked for heartbeats before the dump begins.
   */
  readonly connection: {
    pause(): void;
    resume(): void;
    query?(sql: string, callback: (error: Error | null) => void): unknown;
  } | null;
}

/** `@vlasky/zongji`'s default export. */
export type BinlogClientClass = new (settings: Record<string, unknown>) => BinlogClient;

/**
 * The reader's own mysql2 connection (the lock holder, the checks and the lag). Every statement
 * is bounded: one the server does not answer in time drops the connection and rejects.
 */
export interface MysqlLockConnection {
  readonly threadId: number | null;
  /** Rejects after `timeoutMs` (the connection's bound unless given) without an answer. */
  query(sql: string, values?: unknown[], timeoutMs?: number): Promise<readonly [unknown, unknown]>;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  /** Says goodbye (COM_QUIT); dropped instead after `timeoutMs` without an answer. */
  end(timeoutMs?: number): Promise<void>;
  /** Closes the socket at once, and rejects every statement still waiting for an answer. */
  destroy(): void;
}

/** How the reader bounds a connection of its own. */
export interface MysqlReaderBounds {
  /** Longest wait for a connect or a statement's answer before the link is taken for dead. */
  readonly timeoutMs: number;
  /**
   * The session's `wait_timeout`, in seconds: the server ends a session that sent nothing for
   * this long, and with it any lock the session held (a frozen process, a link cut silently).
   */
  readonly idleSeconds?: number;
  /** Aborts the connect: the half-open connection is closed, not awaited. */
  readonly signal?: AbortSignal;
}

/** mysql2's own connection (`mysql2`, not `mysql2/promise`): the parts the reader uses. */
interface Mysql2Connection {
  readonly threadId: number | null;
  readonly stream?: { destroy(): void };
  once(event: 'connect', listener: () => void): unknown;
  once(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  removeListener(event: 'connect' | 'error', listener: (...args: never[]) => void): unknown;
  promise(): {
    query(sql: string, values?: unknown[]): Promise<readonly [unknown, unknown]>;
    end(): Promise<void>;
  };
  destroy(): void;
}

interface Mysql2Module {
  createConnection(options: Record<string, unknown>): Mysql2Connection;
}

// Held in variables so that TypeScript resolves neither package: both are optional peers.
const ZONGJI = '@vlasky/zongji';
const MYSQL2 = 'mysql2';

/**
 * zongji is an ES module; Node 20.19+ `require`s it from the CommonJS build, answering the
 * namespace (its class under `default`); an ESM build gets the namespace as well.
 */
export async function loadBinlogClient(): Promise<BinlogClientClass> {
  const loaded = await load(ZONGJI);
  const namespace = loaded as { default?: unknown };
  const candidate = typeof loaded === 'function' ? loaded : namespace.default;
  const unwrapped =
    typeof candidate === 'function' ? candidate : (candidate as { default?: unknown }).default;
  if (typeof unwrapped !== 'function') {
    throw new OutboxOptionsError(
      MysqlLogTailingMessages.clientMissing('it has no default export'),
      'logTailing.client',
    );
  }
  return unwrapped as BinlogClientClass;
}

/**
 * Opens a connection of the reader's own, bounded by `bounds` (see MysqlLockConnection). Its
 * socket has TCP keep-alive on, so that an idle link through a firewall or NAT is not dropped
 * silently and a dead one is found even between statements.
 */
export async function openLockConnection(
  settings: MysqlBinlogConnectionSettings,
  bounds: MysqlReaderBounds,
): Promise<MysqlLockConnection> {
  const mysql2 = (await load(MYSQL2)) as Mysql2Module;
  const core = mysql2.createConnection(connectionOptions(settings, bounds.timeoutMs));
  // mysql2 emits a connection lost between statements as 'error'; unheard, it would crash the
  // process. The next statement on it fails, and that is where the source notices.
  core.on('error', () => undefined);
  const connection = new BoundedConnection(core, bounds.timeoutMs);
  await connected(core, connection, bounds.signal);
  if (bounds.idleSeconds !== undefined) {
    try {
      await connection.query('SET SESSION wait_timeout = ?', [bounds.idleSeconds]);
    } catch (error) {
      connection.destroy();
      throw error;
    }
  }
  return connection;
}

/**
 * The options both connections are opened with (never logged: they hold the password), zongji's
 * too: a connect bounded by `timeoutMs`, TCP keep-alive probes after that long idle.
 */
export function connectionOptions(
  settings: MysqlBinlogConnectionSettings,
  timeoutMs: number,
): Record<string, unknown> {
  return {
    host: settings.host,
    port: settings.port ?? 3306,
    user: settings.user,
    password: settings.password,
    ...(settings.ssl === undefined ? {} : { ssl: settings.ssl }),
    // Binlog and lag arithmetic need the offsets and sizes as numbers.
    supportBigNumbers: true,
    connectTimeout: timeoutMs,
    enableKeepAlive: true,
    keepAliveInitialDelay: timeoutMs,
  };
}

/** Resolves once `core` has logged in; an abort closes it at once. */
async function connected(
  core: Mysql2Connection,
  connection: BoundedConnection,
  signal: AbortSignal | undefined,
): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const settle = (): void => {
      signal?.removeEventListener('abort', onAbort);
      core.removeListener('connect', onConnect);
      core.removeListener('error', onError);
    };
    const onConnect = (): void => {
      settle();
      resolve();
    };
    const onError = (error: Error): void => {
      settle();
      reject(error);
    };
    const onAbort = (): void => {
      settle();
      connection.destroy();
      reject(new Error('stopped while connecting'));
    };
    if (signal?.aborted === true) {
      onAbort();
      return;
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    core.once('connect', onConnect);
    core.once('error', onError);
  });
}

/** A mysql2 connection whose every statement is bounded; see MysqlLockConnection. */
class BoundedConnection implements MysqlLockConnection {
  private readonly promised: ReturnType<Mysql2Connection['promise']>;
  /** Fails a statement still waiting for its answer. */
  private readonly waiting = new Set<() => void>();

  constructor(
    private readonly core: Mysql2Connection,
    private readonly timeoutMs: number,
  ) {
    this.promised = core.promise();
  }

  get threadId(): number | null {
    return this.core.threadId ?? null;
  }

  query(sql: string, values?: unknown[], timeoutMs = this.timeoutMs) {
    return this.bounded(this.promised.query(sql, values), sql, timeoutMs);
  }

  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown {
    return this.core.on(event, listener);
  }

  async end(timeoutMs = this.timeoutMs): Promise<void> {
    await this.bounded(this.promised.end(), 'the goodbye (COM_QUIT)', timeoutMs);
  }

  destroy(): void {
    // mysql2's destroy only half-closes the socket (FIN) and waits for the server's: on a dead
    // link that socket would linger, holding the process open. Closed here at once.
    this.core.destroy();
    this.core.stream?.destroy();
    for (const fail of [...this.waiting]) fail();
  }

  private bounded<T>(work: Promise<T>, what: string, timeoutMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const settle = (): void => {
        clearTimeout(timer);
        this.waiting.delete(dropped);
      };
      const dropped = (): void => {
        settle();
        reject(new Error(`the connection was closed before the server answered ${short(what)}`));
      };
      const timer = setTimeout(() => {
        settle();
        reject(
          new Error(
            `the server did not answer ${short(what)} within ${timeoutMs} ms: the connection is dropped`,
          ),
        );
        this.destroy();
      }, timeoutMs);
      this.waiting.add(dropped);
      work.then(
        (value) => {
          settle();
          resolve(value);
        },
        (error: unknown) => {
          settle();
          reject(error instanceof Error ? error : new Error(describeError(error)));
        },
      );
    });
  }
}

/** A statement as an error names it: its first words, never its values. */
function short(sql: string): string {
  const text = sql.replace(/\s+/g, ' ').trim();
  return text.length <= 40 ? text : `${text.slice(0, 40)}…`;
}

async function load(specifier: string): Promise<unknown> {
  try {
    return (await import(specifier)) as unknown;
  } catch (error) {
    throw new OutboxOptionsError(
      MysqlLogTailingMessages.clientMissing(describeError(error)),
      'logTailing.client',
    );
  }
}
