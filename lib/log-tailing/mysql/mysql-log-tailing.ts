import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxLogSourceContext } from '../../store/ports/outbox-log-source.port';
import type { LogTailingDatabase } from '../log-tailing.database';
import { positiveOption } from '../log-tailing.settings';
import type { MysqlBinlogConnectionSettings } from './mysql-binlog-client';
import { MysqlBinlogSource } from './mysql-binlog.source';
import { mysqlLogCommands } from './mysql-log.commands';
import { mysqlLogTailingDdl, mysqlLogTailingDrop } from './mysql-log-tailing.sql';

/** MySQL/MariaDB's binlog (ROW format), read through `@vlasky/zongji`. */
export const mysqlLogTailing: LogTailingDatabase = {
  title: 'MySQL/MariaDB',
  source(settings) {
    const { options } = settings;
    const serverId =
      options.serverId === undefined
        ? undefined
        : positiveOption(options.serverId, options.serverId, 'serverId');
    return (context) => {
      // Refused rather than ignored: a name given for a slot that is never made would leave its
      // author looking for it.
      const postgresOnly =
        options.slotName !== undefined
          ? 'slotName'
          : options.publicationName !== undefined
            ? 'publicationName'
            : options.createSlotTimeoutMs !== undefined
              ? 'createSlotTimeoutMs'
              : undefined;
      if (postgresOnly !== undefined) {
        throw new OutboxOptionsError(
          `logTailing({ ${postgresOnly} }) is for PostgreSQL; MySQL/MariaDB's binlog has no slot or publication (its position is kept in the table <table>_log_position). Remove the option.`,
          `delivery.${postgresOnly}`,
        );
      }
      return new MysqlBinlogSource(context, {
        connection: binlogConnection(context, options.connectionString),
        serverId,
        client: options.binlogClient,
        retryMs: settings.standbyRetryMs,
        timeoutMs: settings.readerTimeoutMs,
        maxTransactionInserts: settings.maxTransactionInserts,
        logger: {
          warn: (message) => context.log?.('warn', message),
          log: (message) => context.log?.('log', message),
        },
      });
    };
  },
  ddl: (names) => mysqlLogTailingDdl(names),
  dropDdl: (names) => mysqlLogTailingDrop(names),
  commands: mysqlLogCommands,
};

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
      'delivery.connectionString',
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
      'delivery.connectionString',
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
