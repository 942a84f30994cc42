import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { outboxTableNames } from '../../internal/sql-identifier';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { outboxDatabaseOf } from '../../store/outbox-databases';
import {
  DEFAULT_LOG_SWEEP_INTERVAL_MS,
  type OutboxLogConnectionSettings,
  type OutboxLogObserver,
  type OutboxLogSource,
  type OutboxLogSourceContext,
} from '../../store/ports/outbox-log-source.port';
import type { SourceContext } from '../delivery-source';

/** The log each dialect's reader reads, for the start line; null where a dispatcher can read none. */
const LOG_READERS = {
  postgres: 'PostgreSQL logical replication',
  mysql: 'MySQL/MariaDB binlog',
  sqlite: null,
} as const satisfies Record<OutboxLogSourceContext['database'], string | null>;

/** Each dialect's name, for the refusal. */
const DIALECT_NAMES = {
  postgres: 'PostgreSQL',
  mysql: 'MySQL/MariaDB',
  sqlite: 'SQLite',
} as const satisfies Record<OutboxLogSourceContext['database'], string>;

/** The dialects with a log to read. */
export type LogDialect = {
  [D in keyof typeof LOG_READERS]: (typeof LOG_READERS)[D] extends null ? never : D;
}[keyof typeof LOG_READERS];

/** Which log `dialect`'s reader reads, for the start's line ('database log' before it is known). */
export function logReaderName(dialect: LogDialect | undefined): string {
  return dialect === undefined ? 'database log' : LOG_READERS[dialect];
}

/** How often the table is swept beside `observer`'s log. */
export function logSweepIntervalMs(observer: OutboxLogObserver): number {
  return observer.sweepIntervalMs ?? DEFAULT_LOG_SWEEP_INTERVAL_MS;
}

/** A log source made and checked, and the dialect it reads. */
export interface OpenedLogSource {
  readonly source: OutboxLogSource;
  readonly dialect: LogDialect;
}

/** What the dispatcher asks of the log besides its rows. */
export interface LogSourceNeeds {
  /** Whether the store must lease by id what the log hands over (the row leases' reader). */
  readonly leasesById: boolean;
  /** Told when this process becomes the log's one reader and when it stops being it. */
  readonly reading?: (reading: boolean) => void;
}

/**
 * Makes the observer's source for the instance's database and checks the server (settings,
 * grants, publication or position table): a missing setting fails the app's start, naming it.
 */
export async function openLogSource(
  observer: OutboxLogObserver,
  context: SourceContext,
  needs: LogSourceNeeds,
): Promise<OpenedLogSource> {
  const { sql, store, options, log } = context;
  const database = sql === undefined ? undefined : outboxDatabaseOf(sql.databaseType);
  if (sql === undefined || database === undefined) {
    throw new OutboxOptionsError(
      "delivery: the instance's database is unknown to log tailing; use 'poll'.",
      'delivery',
    );
  }
  const dialect = database.dialect as OutboxLogSourceContext['database'];
  const reader = LOG_READERS[dialect];
  const leases = !needs.leasesById || store.claimIds !== undefined;
  if (reader === null || !leases) {
    throw new OutboxOptionsError(
      `delivery: log tailing needs PostgreSQL or MySQL/MariaDB, and this instance runs on ${DIALECT_NAMES[dialect]}, ${reader === null ? 'which has no replication log' : 'whose store cannot lease by id yet'}. Use delivery: 'poll' (the default).`,
      'delivery',
    );
  }
  const { tableName, schema, instanceId } = options;
  const logDialect = dialect as LogDialect;
  const source = observer.create({
    database: logDialect,
    names: outboxTableNames(tableName, schema, database.quoting),
    sql,
    owner: instanceId,
    connection: connectionSettings(options.dataSource),
    log: (level, message) => (level === 'warn' ? log.warn(message) : log.log(message)),
    ...(needs.reading !== undefined && { reading: needs.reading }),
  });
  await source.check();
  return { source, dialect: logDialect };
}

/**
 * The connection settings of a TypeORM DataSource given as `dataSource`, for the log's
 * replication connection; undefined for anything else (a connection of another library, a
 * DataSource named by string), where `logTailing({ connectionString })` says how.
 */
function connectionSettings(
  dataSource: ResolvedOutboxOptions['dataSource'],
): OutboxLogConnectionSettings | undefined {
  if (typeof dataSource !== 'object') return undefined;
  const o = dataSource.options as {
    url?: string;
    host?: string;
    port?: number;
    username?: string;
    password?: unknown;
    database?: unknown;
    ssl?: boolean | object;
  };
  return {
    connectionString: o.url,
    host: o.host,
    port: o.port,
    user: o.username,
    // A password given as a function (rotating credentials) is left to connectionString.
    password: typeof o.password === 'string' ? o.password : undefined,
    database: typeof o.database === 'string' ? o.database : undefined,
    ssl: o.ssl,
  };
}
