import { existsSync } from 'node:fs';
import type { DataSourceOptions } from 'typeorm';
import type { OutboxDialect } from '../../store/schema/outbox-table-ddl';
import { outboxDatabaseOfScheme } from '../../store/outbox-databases';
import { OutboxError } from '../../errors/outbox.error';
import { CliUsageError } from './cli-usage.error';

/** What the CLI connects to, read from DATABASE_URL. */
export interface CliDatabase {
  readonly dialect: OutboxDialect;
  /** A SQLite file, for messages; null for servers (their URL may hold a password). */
  readonly file: string | null;
  options(createFile: boolean): DataSourceOptions;
}

const CONNECT_TIMEOUT_MS = 10_000;
// No user:password example: the redactor would mask it in the message anyway.
const SCHEMES =
  'postgres://…, mysql://…, mariadb://…, sqlite:path/to/file.db, or a SQLite file path';

/**
 * The scheme of a URL, or null for a file path. A single letter before the colon is a Windows
 * drive (C:\outbox.db), not a scheme.
 */
function schemeOf(url: string): string | null {
  const match = /^([A-Za-z][A-Za-z0-9+.-]+):/.exec(url);
  return match === null ? null : (match[1] as string).toLowerCase();
}

/** The dialect a DATABASE_URL names, without connecting; null when it names none we know. */
export function dialectOfUrl(url: string): OutboxDialect | null {
  const scheme = schemeOf(url);
  // A bare path names a SQLite file.
  if (scheme === null) return 'sqlite';
  return (outboxDatabaseOfScheme(scheme)?.dialect as OutboxDialect | undefined) ?? null;
}

function parseServerUrl(url: string): URL {
  try {
    return new URL(url);
  } catch {
    // Never echo the URL: it may hold a password.
    throw new CliUsageError(`DATABASE_URL is not a valid URL. Expected ${SCHEMES}.`);
  }
}

function decode(part: string, what: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new CliUsageError(`DATABASE_URL has a badly percent-encoded ${what}.`);
  }
}

/** Reads DATABASE_URL; throws a `CliUsageError` that never contains the URL. */
export function databaseFromUrl(url: string | undefined): CliDatabase {
  if (url === undefined || url.trim() === '') {
    throw new CliUsageError(`DATABASE_URL is not set. Set it to ${SCHEMES}.`);
  }
  const scheme = schemeOf(url);
  const dialect = dialectOfUrl(url);
  if (dialect === null) {
    throw new CliUsageError(
      `DATABASE_URL has the unsupported scheme "${scheme ?? ''}:". Expected ${SCHEMES}.`,
    );
  }
  if (dialect === 'sqlite') {
    // sqlite:file.db, sqlite:///absolute/file.db, sqlite://file.db, or a plain path.
    const path = scheme === null ? url : url.slice('sqlite:'.length).replace(/^\/\//, '');
    if (path === '' || path === ':memory:') {
      throw new CliUsageError(
        'DATABASE_URL names no SQLite file (an in-memory database has no outbox to manage).',
      );
    }
    return {
      dialect,
      file: path,
      options: (createFile) => {
        if (!createFile && !existsSync(path)) {
          throw new OutboxError(
            `The SQLite database file ${path} does not exist (create it with "outbox schema migrate").`,
          );
        }
        return { type: 'better-sqlite3', database: path, enableWAL: true, logging: false };
      },
    };
  }
  const parsed = parseServerUrl(url);
  if (parsed.hostname === '' && dialect === 'mysql') {
    throw new CliUsageError('DATABASE_URL names no host.');
  }
  if (dialect === 'postgres') {
    // node-postgres reads the URL itself (sslmode, host=/socket/dir, options …).
    return {
      dialect,
      file: null,
      options: () => ({
        type: 'postgres',
        url,
        connectTimeoutMS: CONNECT_TIMEOUT_MS,
        applicationName: 'nestjs-outbox-cli',
        poolSize: 2,
        logging: false,
      }),
    };
  }
  const database = decode(parsed.pathname.replace(/^\//, ''), 'database name');
  if (database === '') {
    throw new CliUsageError(
      'DATABASE_URL names no database: add it as the path, e.g. mysql://user@host:3306/app.',
    );
  }
  return {
    dialect,
    file: null,
    options: () => ({
      type: scheme === 'mariadb' ? 'mariadb' : 'mysql',
      host: parsed.hostname,
      port: parsed.port === '' ? 3306 : Number(parsed.port),
      username: decode(parsed.username, 'user name'),
      password: decode(parsed.password, 'password'),
      database,
      connectTimeout: CONNECT_TIMEOUT_MS,
      poolSize: 2,
      logging: false,
    }),
  };
}
