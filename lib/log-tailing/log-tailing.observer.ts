import type { ClientConfig } from 'pg';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { assertIdentifier } from '../internal/sql-identifier';
import type {
  OutboxLogObserver,
  OutboxLogSource,
  OutboxLogSourceContext,
} from '../store/ports/outbox-log-source.port';
import { isSlotName, postgresLogNames } from '../store/postgres/postgres.log-tailing-sql';
import type { LogTailingOptions } from './log-tailing.options';
import { PostgresLogSource } from './postgres/postgres-log.source';

const DEFAULT_STANDBY_RETRY_MS = 1_000;
const DEFAULT_SWEEP_INTERVAL_MS = 5_000;
const DEFAULT_MAX_QUEUED = 50_000;

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
  return {
    kind: 'log',
    sweepIntervalMs,
    create(context: OutboxLogSourceContext): OutboxLogSource {
      // One source per database; MySQL/MariaDB's binlog source joins here (lib/log-tailing/mysql/).
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
            maxQueued,
            log: context.log ?? (() => undefined),
          });
        }
        case 'mysql':
          throw new OutboxOptionsError(
            "Log tailing on MySQL/MariaDB is not available in this build. Use dispatcher.observe: 'poll'.",
            'dispatcher.observe',
          );
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
