import { resolve } from 'node:path';
import { redactUrl } from './redact-url';

export type DatabaseConfig =
  | { readonly type: 'sqlite'; readonly path: string }
  | { readonly type: 'postgres'; readonly url: string; readonly schema: string | undefined }
  | { readonly type: 'mysql' | 'mariadb'; readonly url: string };

export type TransportConfig =
  | { readonly type: 'tcp'; readonly host: string; readonly port: number }
  | { readonly type: 'rmq'; readonly url: string; readonly queue: string }
  | { readonly type: 'nats' | 'redis' | 'mqtt'; readonly url: string };

export type TransportName = TransportConfig['type'];

const TRANSPORTS: readonly TransportName[] = ['tcp', 'rmq', 'nats', 'redis', 'mqtt'];
const DEFAULT_SQLITE_PATH = '.tmp/sample.sqlite';
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Thrown at startup for a bad environment variable, naming it and saying what it accepts. */
export class SampleConfigError extends Error {
  override readonly name = 'SampleConfigError';
}

function port(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0 || value > 65_535) {
    throw new SampleConfigError(`${name}=${raw} is not a port number (0 to 65535)`);
  }
  return value;
}

function database(env: NodeJS.ProcessEnv): DatabaseConfig {
  const url = env.DATABASE_URL ?? '';
  if (url === '') return { type: 'sqlite', path: resolve(DEFAULT_SQLITE_PATH) };
  const scheme = url.slice(0, url.indexOf(':') + 1).toLowerCase();
  switch (scheme) {
    case 'sqlite:': {
      // sqlite:relative/file.sqlite, sqlite:/absolute/file.sqlite or sqlite:///absolute/file.sqlite
      const path = url.slice('sqlite:'.length).replace(/^\/\//, '');
      if (path === '' || path === ':memory:') {
        throw new SampleConfigError(
          'DATABASE_URL=sqlite:<path> needs a file: the outbox dispatcher opens a second connection to it',
        );
      }
      return { type: 'sqlite', path: resolve(path) };
    }
    case 'postgres:':
    case 'postgresql:': {
      const schema = env.DATABASE_SCHEMA === '' ? undefined : env.DATABASE_SCHEMA;
      if (schema !== undefined && !IDENTIFIER.test(schema)) {
        throw new SampleConfigError(
          `DATABASE_SCHEMA=${schema} is not a plain SQL identifier (letters, digits, underscores)`,
        );
      }
      return { type: 'postgres', url, schema };
    }
    case 'mysql:':
      return { type: 'mysql', url };
    case 'mariadb:':
      // The driver (mysql2) reads the URL; only the TypeORM type differs.
      return { type: 'mariadb', url: `mysql:${url.slice('mariadb:'.length)}` };
    default:
      throw new SampleConfigError(
        `DATABASE_URL has an unsupported scheme "${scheme || redactUrl(url)}": use postgres://, mysql://, mariadb:// or sqlite:<path>, or leave it unset for ./${DEFAULT_SQLITE_PATH}`,
      );
  }
}

function transport(env: NodeJS.ProcessEnv): TransportConfig {
  const name = (env.OUTBOX_TRANSPORT ?? 'tcp').toLowerCase() || 'tcp';
  switch (name) {
    case 'tcp':
      return {
        type: 'tcp',
        host: env.OUTBOX_TCP_HOST || '127.0.0.1',
        port: port(env, 'OUTBOX_TCP_PORT', 3001),
      };
    case 'rmq':
      return {
        type: 'rmq',
        url: env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672',
        queue: env.OUTBOX_QUEUE || 'orders',
      };
    case 'nats':
      return { type: 'nats', url: env.NATS_URL || 'nats://127.0.0.1:4222' };
    case 'redis':
      return { type: 'redis', url: env.REDIS_URL || 'redis://127.0.0.1:6379' };
    case 'mqtt':
      return { type: 'mqtt', url: env.MQTT_URL || 'mqtt://127.0.0.1:1883' };
    default:
      throw new SampleConfigError(
        `OUTBOX_TRANSPORT=${name} is not supported: use one of ${TRANSPORTS.join(', ')}`,
      );
  }
}

function consoleToken(env: NodeJS.ProcessEnv): string | undefined {
  const token = env.OUTBOX_CONSOLE_TOKEN ?? '';
  if (token === '') return undefined;
  // A short token is guessed; the console can purge messages.
  if (token.length < 16) {
    throw new SampleConfigError(
      'OUTBOX_CONSOLE_TOKEN must be at least 16 characters (e.g. from `openssl rand -hex 16`), or unset to leave the console off',
    );
  }
  return token;
}

/**
 * The sample's settings, read from the environment once at startup. With no variables set it runs
 * embedded: a SQLite file and a TCP microservice in the same process.
 */
export class SampleConfig {
  constructor(
    /** HTTP port (`PORT`, default 3000; 0 picks a free one). */
    readonly port: number,
    /** `DATABASE_URL` (default: SQLite at ./.tmp/sample.sqlite) and `DATABASE_SCHEMA` (PostgreSQL). */
    readonly database: DatabaseConfig,
    /** `OUTBOX_TRANSPORT` and its broker settings. */
    readonly transport: TransportConfig,
    /** `OUTBOX_CONSOLE_TOKEN`: the outbox console at /outbox is on, behind this token, when set. */
    readonly consoleToken: string | undefined = undefined,
  ) {}

  static fromEnv(env: NodeJS.ProcessEnv = process.env): SampleConfig {
    return new SampleConfig(
      port(env, 'PORT', 3000),
      database(env),
      transport(env),
      consoleToken(env),
    );
  }

  /** The database for logs, without credentials. */
  describeDatabase(): string {
    const db = this.database;
    if (db.type === 'sqlite') return `sqlite ${db.path}`;
    const schema =
      db.type === 'postgres' && db.schema !== undefined ? ` (schema ${db.schema})` : '';
    return `${db.type} ${redactUrl(db.url)}${schema}`;
  }

  /** The transport for logs, without credentials. */
  describeTransport(): string {
    const t = this.transport;
    switch (t.type) {
      case 'tcp':
        return `tcp ${t.host}:${t.port}`;
      case 'rmq':
        return `rmq ${redactUrl(t.url)} queue ${t.queue}`;
      default:
        return `${t.type} ${redactUrl(t.url)}`;
    }
  }
}
