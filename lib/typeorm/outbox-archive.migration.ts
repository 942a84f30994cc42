import type { MigrationInterface } from 'typeorm';
import {
  outboxArchiveTableDdl,
  refuseUnknownTableOptions,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { runAll, tableMigration } from './table-migration';
import { layoutForNewTables } from '../store/schema/message-id-layout';

/**
 * The TypeORM migration that creates the archive `<table>_archive` for `cleaner.archive`. Not a
 * step of `outboxMigrations()`: only apps that archive need the table. Its `down` keeps the
 * table, since it holds the app's archived messages; drop it yourself when you mean to.
 *
 * @param timestamp where the migration sorts among the DataSource's migrations (ms since 1970).
 *   @default 1763800000100
 *
 * @example
 * new DataSource({ ..., migrations: [...outboxMigrations(), createOutboxArchiveMigration()] })
 */
export function createOutboxArchiveMigration(
  options: OutboxTableOptions = {},
  timestamp = 1_763_800_000_100,
): new () => MigrationInterface {
  // Validate at definition time so a bad name (or an unknown key) fails before any migration runs.
  refuseUnknownTableOptions('createOutboxArchiveMigration()', options);
  outboxArchiveTableDdl('postgres', options);
  return tableMigration(
    'CreateOutboxArchive',
    'createOutboxArchiveMigration()',
    options,
    timestamp,
    async (database, names, run) =>
      runAll(
        run,
        database.schema.createArchiveTable(names, await layoutForNewTables(database, run, names)),
      ),
    // Deliberately nothing: reverting must not destroy an audit trail.
    () => Promise.resolve(),
  );
}
