import type { ClientConfig } from 'pg';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { assertIdentifier } from '../../internal/sql-identifier';
import type { OutboxLogSourceContext } from '../../store/ports/outbox-log-source.port';
import type { LogTailingDatabase } from '../log-tailing.database';
import { positiveOption } from '../log-tailing.settings';
import { postgresLogCommands } from './postgres-log.commands';
import { PostgresLogSource } from './postgres-log.source';
import {
  isSlotName,
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
} from './postgres-log-tailing.sql';

const DEFAULT_MAX_QUEUED = 50_000;
const DEFAULT_CREATE_SLOT_TIMEOUT_MS = 10_000;

/** PostgreSQL's logical replication (`pgoutput`), read through `pg-logical-replication`. */
export const postgresLogTailing: LogTailingDatabase = {
  title: 'PostgreSQL',
  source(settings) {
    const { slotName, publicationName, connectionString } = settings.options;
    if (slotName !== undefined && !isSlotName(slotName)) {
      throw new OutboxOptionsError(
        `logTailing({ slotName }): ${JSON.stringify(slotName)} is not a replication slot name. Use 1 to 63 lower-case letters, digits or underscores.`,
        'delivery.slotName',
      );
    }
    if (publicationName !== undefined) {
      assertIdentifier(publicationName, 'delivery.publicationName');
    }
    const maxQueued = positiveOption(settings.options.maxQueued, DEFAULT_MAX_QUEUED, 'maxQueued');
    const createSlotTimeoutMs = positiveOption(
      settings.options.createSlotTimeoutMs,
      DEFAULT_CREATE_SLOT_TIMEOUT_MS,
      'createSlotTimeoutMs',
    );
    return (context) => {
      const schema = context.names.schema ?? 'public';
      // The database is part of the slot's default name; the source reads it at check().
      const { publication } = postgresLogNames(schema, context.names.tableName, '');
      return new PostgresLogSource(context, {
        slot: slotName,
        publication: publicationName ?? publication,
        connection: replicationConnection(context, connectionString),
        standbyRetryMs: settings.standbyRetryMs,
        readerTimeoutMs: settings.readerTimeoutMs,
        createSlotTimeoutMs,
        maxQueued,
        maxTransactionInserts: settings.maxTransactionInserts,
        log: context.log ?? (() => undefined),
      });
    };
  },
  ddl: (names, { publicationName }) =>
    postgresLogTailingDdl(names, publicationName ?? defaultPublication(names)),
  dropDdl: (names, { publicationName }) => [
    postgresDropPublication(publicationName ?? defaultPublication(names)),
  ],
  commands: postgresLogCommands,
};

function defaultPublication(names: { schema: string | null; tableName: string }): string {
  return postgresLogNames(names.schema ?? 'public', names.tableName, '').publication;
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
      'delivery.connectionString',
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
