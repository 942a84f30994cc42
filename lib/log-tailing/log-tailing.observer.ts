import type { ClientConfig } from 'pg';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { assertIdentifier } from '../internal/sql-identifier';
import type {
  OutboxLogObserver,
  OutboxLogSource,
  OutboxLogSourceContext,
} from '../store/ports/outbox-log-source.port';
import { isSlotName, postgresLogNames } from './postgres/postgres-log-tailing.sql';
import type { LogTailingOptions } from './log-tailing.options';
import type { MysqlBinlogConnectionSettings } from './mysql/mysql-binlog-client';
import { MysqlBinlogSource } from './mysql/mysql-binlog.source';
import { PostgresLogSource } from './postgres/postgres-log.source';

const DEFAULT_STANDBY_RETRY_MS = 1_000;
const DEFAULT_SWEEP_INTERVAL_MS = 5_000;
const DEFAULT_MAX_QUEUED = 50_000;
// About 2.5 MB of ids and keys per transaction; a transaction past it is a backfill, which the
// sweep delivers as fast as the log path would (it claims full batches back to back).
const DEFAULT_MAX_TRANSACTION_INSERTS = 10_000;
const DEFAULT_READER_TIMEOUT_MS = 5_000;
const DEFAULT_CREATE_SLOT_TIMEOUT_MS = 10_000;

/**
 * The dispatcher's log observer: `OutboxModule.forRoot({ …, dispatcher: { observe:
 * logTailing() } })` makes the dispatcher learn of new messages from the database's log
 * (PostgreSQL logical replication; MySQL/MariaDB's binlog) instead of polling for them. The
 * table stays the record; see docs/log-tailing.md. Throws `OutboxOptionsError` for a bad option.
 */
export function logTailing(options: LogTailingOptions = {}): OutboxLogObserver {
  const { slotName, publicationName, connectionString } = options;
  if (slotName !== undefined && !isSlotName(slotName)) {
    throw new OutboxOptionsError(
      `logTailing({ slotName }): ${JSON.stringify(slotName)} is not a replication slot name. Use 1 to 63 lower-case letters, digits or underscores.`,
      'dispatcher.observe.slotName',
    );
  }
  if (publicationName !== undefined) {
    assertIdentifier(publicationName, 'dispatcher.observe.publicationName');
  }
  const standbyRetryMs = positive(
    options.standbyRetryMs,
    DEFAULT_STANDBY_RETRY_MS,
    'standbyRetryMs',
  );
  const sweepIntervalMs = positive(
    options.sweepIntervalMs,
    DEFAULT_SWEEP_INTERVAL_MS,
    'sweepIntervalMs',
  );
  const maxQueued = positive(options.maxQueued, DEFAULT_MAX_QUEUED, 'maxQueued');
  const maxTransactionInserts = positive(
    options.maxTransactionInserts,
    DEFAULT_MAX_TRANSACTION_INSERTS,
    'maxTransactionInserts',
  );
  const readerTimeoutMs = positive(
    options.readerTimeoutMs,
    DEFAULT_READER_TIMEOUT_MS,
    'readerTimeoutMs',
  );
  const createSlotTimeoutMs = positive(
    options.createSlotTimeoutMs,
    DEFAULT_CREATE_SLOT_TIMEOUT_MS,
    'createSlotTimeoutMs',
  );
  const serverId =
    options.serverId === undefined
      ? undefined
      : positive(options.serverId, options.serverId, 'serverId');
  return {
    kind: 'log',
    sweepIntervalMs,
    create(context: OutboxLogSourceContext): OutboxLogSource {
      // One source per database: lib/log-tailing/postgres/ and lib/log-tailing/mysql/.
      switch (context.database) {
        case 'postgres': {
          const schema = context.names.schema ?? 'public';
          // The database is part of the slot's default name; the source reads it at check().
          const { publication } = postgresLogNames(schema, context.names.tableName, '');
          return new PostgresLogSource(context, {
            slot: slotName,
            publication: publicationName ?? publication,
            connection: replicationConnection(context, connectionString),
            standbyRetryMs,
            readerTimeoutMs,
            createSlotTimeoutMs,
            maxQueued,
            maxTransactionInserts,
            log: context.log ?? (() => undefined),
          });
        }
        case 'mysql': {
          // Refused rather than ignored: a name given for a slot that is never made would
          // leave its author looking for it.
          const postgresOnly =
            slotName !== undefined
              ? 'slotName'
              : publicationName !== undefined
                ? 'publicationName'
                : options.createSlotTimeoutMs !== undefined
                  ? 'createSlotTimeoutMs'
                  : undefined;
          if (postgresOnly !== undefined) {
            throw new OutboxOptionsError(
              `logTailing({ ${postgresOnly} }) is for PostgreSQL; MySQL/MariaDB's binlog has no slot or publication (its position is kept in the table <table>_log_position). Remove the option.`,
              `dispatcher.observe.${postgresOnly}`,
            );
          }
          return new MysqlBinlogSource(context, {
            connection: binlogConnection(context, connectionString),
            serverId,
            client: options.binlogClient,
            retryMs: standbyRetryMs,
            timeoutMs: readerTimeoutMs,
            maxTransactionInserts,
            logger: {
              warn: (message) => context.log?.('warn', message),
              log: (message) => context.log?.('log', message),
            },
          });
        }
        case 'sqlite':
          throw sqliteRefused();
      }
    },
  };
}

/** SQLite has no log to read: the refusal the dispatcher also gives at bootstrap. */
function sqliteRefused(): OutboxOptionsError {
  return new OutboxOptionsError(
    "dispatcher.observe: log tailing needs PostgreSQL or MySQL/MariaDB; SQLite has no replication log. Use dispatcher.observe: 'poll' (the default).",
    'dispatcher.observe',
  );
}

/** The replication connection: the string given, else the instance's own settings. */
function replicationConnection(
  context: OutboxLogSourceContext,
  connectionString: string | undefined,
): ClientConfig {
  if (connectionString !== undefined) return { connectionString };
  const own = context.connection;
  if (own === undefined) {
    throw new OutboxOptionsError(
      "logTailing() cannot tell how this instance reaches PostgreSQL (only a TypeORM DataSource's settings are read): pass logTailing({ connectionString: 'postgres://user@host/db' }), a role with REPLICATION.",
      'dispatcher.observe.connectionString',
    );
  }
  return {
    connectionString: own.connectionString,
    host: own.host,
    port: own.port,
    user: own.user,
    password: own.password,
    database: own.database,
    ssl: own.ssl,
  };
}

/**
 * The binlog connection: the `mysql://` URL given, else the instance's own settings. Errors
 * never quote the URL, which holds the password.
 */
function binlogConnection(
  context: OutboxLogSourceContext,
  connectionString: string | undefined,
): MysqlBinlogConnectionSettings {
  if (connectionString !== undefined) {
    return mysqlUrl(
      connectionString,
      'dispatcher.observe.connectionString',
      'logTailing({ connectionString })',
    );
  }
  const own = context.connection;
  if (own?.connectionString !== undefined) {
    return mysqlUrl(own.connectionString, 'dataSource.url', "the DataSource's url");
  }
  if (own?.host === undefined || own.user === undefined) {
    throw new OutboxOptionsError(
      "logTailing() cannot tell how this instance reaches MySQL/MariaDB (only a TypeORM DataSource's host and username are read): pass logTailing({ connectionString: 'mysql://user:password@host:3306/db' }), a user with REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB).",
      'dispatcher.observe.connectionString',
    );
  }
  return {
    host: own.host,
    port: own.port,
    user: own.user,
    password: own.password,
    ssl: mysqlSsl(own.ssl),
  };
}

/** `mysql://user:password@host:port/db` (or `mariadb://`); `?ssl=true` asks for TLS. */
function mysqlUrl(text: string, option: string, what: string): MysqlBinlogConnectionSettings {
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    url = undefined;
  }
  if (
    url === undefined ||
    !/^(mysql|mariadb):$/.test(url.protocol) ||
    url.hostname === '' ||
    url.username === ''
  ) {
    throw new OutboxOptionsError(
      `${what} is not a MySQL URL with a user (mysql://user:password@host:3306/db); it is not shown here, as it may hold a password.`,
      option,
    );
  }
  const ssl = url.searchParams.get('ssl');
  return {
    // URL keeps IPv6 hosts in brackets; mysql2 wants them bare.
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port === '' ? undefined : Number(url.port),
    user: decodeURIComponent(url.username),
    password: url.password === '' ? undefined : decodeURIComponent(url.password),
    ssl: ssl === 'true' || ssl === '1' ? {} : undefined,
  };
}

/** TypeORM's `ssl` as mysql2 takes it: `true` is TLS with the defaults. */
function mysqlSsl(ssl: boolean | object | undefined): MysqlBinlogConnectionSettings['ssl'] {
  if (ssl === true) return {};
  if (ssl === false || ssl === undefined) return undefined;
  return ssl as Readonly<Record<string, unknown>>;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new OutboxOptionsError(
      `logTailing({ ${name} }): ${String(value)} is not a positive whole number.`,
      `dispatcher.observe.${name}`,
    );
  }
  return value;
}
