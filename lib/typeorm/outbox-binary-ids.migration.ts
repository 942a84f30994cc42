import type { MigrationInterface } from 'typeorm';
import {
  refuseUnknownBinaryIdsOptions,
  type OutboxBinaryIdsOptions,
} from '../store/schema/binary-message-ids';
import { tableNamesFor } from '../store/schema/outbox-table-ddl';
import { tableMigration } from './table-migration';

/**
 * The TypeORM migration that converts the message ids of a MySQL/MariaDB outbox table made
 * before 0.3 from CHAR(36) to BINARY(16) in place, every row kept, with its attempt history,
 * archive and guard (see `migrateOutboxToBinaryIds`); `down` converts them back. Not a step of
 * `outboxMigrations()`: it rewrites the tables, so it is run on purpose, with the app stopped
 * (docs/outbox-table.md, "Message ids on MySQL and MariaDB"). Tables already binary (every
 * table made since) are left alone, and on PostgreSQL and SQLite it does nothing, so one list
 * of migrations serves every database.
 *
 * @param timestamp where the migration sorts among the DataSource's migrations (ms since 1970).
 *   @default 1763800000200
 *
 * @example
 * new DataSource({ ..., migrations: [...outboxMigrations(), createOutboxBinaryIdsMigration()] })
 */
export function createOutboxBinaryIdsMigration(
  options: OutboxBinaryIdsOptions = {},
  timestamp = 1_763_800_000_200,
): new () => MigrationInterface {
  // Validate at definition time so a bad name (or an option it does not read) fails before any
  // migration runs.
  refuseUnknownBinaryIdsOptions('createOutboxBinaryIdsMigration()', options);
  tableNamesFor('postgres', options);
  return tableMigration(
    'ConvertOutboxIdsToBinary',
    'createOutboxBinaryIdsMigration()',
    options,
    timestamp,
    async (database, names, run) => {
      await database.schema.convertMessageIds?.(run, names, 'binary');
    },
    async (database, names, run) => {
      await database.schema.convertMessageIds?.(run, names, 'text');
    },
  );
}
