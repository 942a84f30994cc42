import type { OutboxDialect } from '../../store/schema/outbox-table-ddl';
import { outboxDatabaseOfScheme } from '../../store/outbox-databases';
import { CliUsageError } from './cli-usage.error';

/** A MySQL or MariaDB server, as mysql2's `createPool` takes it. */
export interface CliMysqlServer {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly password: string;
  readonly database: string;
}

/**
 * What the CLI connects to, read from DATABASE_URL. `file` is the SQLite file, for messages;
 * null for servers, whose URL may hold a password and is never shown.
 */
export type CliDatabase =
  | { readonly dialect: 'postgres'; readonly file: null; readonly url: string }
  | { readonly dialect: 'mysql'; readonly file: null; readonly server: CliMysqlServer }
  | { readonly dialect: 'sqlite'; readonly file: string };
// No user:password example: the redactor would mask it in the message anyway.
const SCHEMES =
  'postgres://…, mysql://…, mariadb://…, sqlite:path/to/file.db, file:path/to/file.db, or a SQLite file path';

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
  // A bare path names a SQLite file, and so does `file:` (Prisma's SQLite URLs).
  if (scheme === null || scheme === 'file') return 'sqlite';
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

/** A percent-encoded part of DATABASE_URL, decoded; a `CliUsageError` that names it otherwise. */
export function decodeUrlPart(part: string, what: string): string {
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
  return FROM_URL[dialect](url, scheme);
}

/** How DATABASE_URL names a database of each dialect. `scheme`: null for a bare file path. */
const FROM_URL: {
  readonly [D in OutboxDialect]: (
    url: string,
    scheme: string | null,
  ) => Extract<CliDatabase, { readonly dialect: D }>;
} = {
  // node-postgres reads the URL itself (sslmode, host=/socket/dir, options …).
  postgres: (url) => {
    parseServerUrl(url);
    return { dialect: 'postgres', file: null, url };
  },
  mysql: (url) => {
    const parsed = parseServerUrl(url);
    if (parsed.hostname === '') throw new CliUsageError('DATABASE_URL names no host.');
    const database = decodeUrlPart(parsed.pathname.replace(/^\//, ''), 'database name');
    if (database === '') {
      throw new CliUsageError(
        'DATABASE_URL names no database: add it as the path, e.g. mysql://user@host:3306/app.',
      );
    }
    return {
      dialect: 'mysql',
      file: null,
      server: {
        host: parsed.hostname,
        port: parsed.port === '' ? 3306 : Number(parsed.port),
        user: decodeUrlPart(parsed.username, 'user name'),
        password: decodeUrlPart(parsed.password, 'password'),
        database,
      },
    };
  },
  // sqlite:file.db, sqlite:///absolute/file.db, sqlite://file.db, file:… alike, or a plain
  // path. A `file:` URL may carry Prisma's options (?connection_limit=1): not part of the path.
  sqlite: (url, scheme) => {
    const rest = scheme === null ? url : url.slice(scheme.length + 1).replace(/^\/\//, '');
    const path = scheme === 'file' ? rest.replace(/\?.*$/, '') : rest;
    if (path === '' || path === ':memory:') {
      throw new CliUsageError(
        'DATABASE_URL names no SQLite file (an in-memory database has no outbox to manage).',
      );
    }
    return { dialect: 'sqlite', file: path };
  },
};
