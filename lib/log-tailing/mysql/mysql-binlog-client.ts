/**
 * The parts of `@vlasky/zongji` (the binlog reader) and `mysql2/promise` (the lock connection)
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
  /** The binlog connection (paused while the source has too many inserts waiting). */
  readonly connection: { pause(): void; resume(): void } | null;
}

/** `@vlasky/zongji`'s default export. */
export type BinlogClientClass = new (settings: Record<string, unknown>) => BinlogClient;

/** A mysql2 promise connection: the lock holder, the checks and the lag. */
export interface MysqlLockConnection {
  readonly threadId: number | null;
  query(sql: string, values?: unknown[]): Promise<readonly [unknown, unknown]>;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  end(): Promise<void>;
  destroy(): void;
}

interface Mysql2PromiseModule {
  createConnection(options: Record<string, unknown>): Promise<MysqlLockConnection>;
}

// Held in variables so that TypeScript resolves neither package: both are optional peers.
const ZONGJI = '@vlasky/zongji';
const MYSQL2 = 'mysql2/promise';

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

export async function openLockConnection(
  settings: MysqlBinlogConnectionSettings,
): Promise<MysqlLockConnection> {
  const mysql2 = (await load(MYSQL2)) as Mysql2PromiseModule;
  const connection = await mysql2.createConnection(connectionOptions(settings));
  // mysql2 emits a connection lost between statements as 'error'; unheard, it would crash the
  // process. The next statement on it fails, and that is where the source notices.
  connection.on('error', () => undefined);
  return connection;
}

/** The options both connections are opened with (never logged: they hold the password). */
export function connectionOptions(
  settings: MysqlBinlogConnectionSettings,
): Record<string, unknown> {
  return {
    host: settings.host,
    port: settings.port ?? 3306,
    user: settings.user,
    password: settings.password,
    ...(settings.ssl === undefined ? {} : { ssl: settings.ssl }),
    // Binlog and lag arithmetic need the offsets and sizes as numbers.
    supportBigNumbers: true,
  };
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
