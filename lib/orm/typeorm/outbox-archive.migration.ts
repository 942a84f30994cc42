import type { MigrationInterface, QueryRunner } from 'typeorm';
import { tableMigrationName } from './migration-name';
import {
  outboxArchiveTableDdl,
  outboxDialectOf,
  type OutboxTableOptions,
} from '../../store/outbox-dialect';

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
  // Validate at definition time so a bad name fails before any migration runs.
  outboxArchiveTableDdl('postgres', options);
  const name = tableMigrationName(
    'CreateOutboxArchive',
    { tableName: options.tableName ?? 'outbox', schema: options.schema },
    timestamp,
    'createOutboxArchiveMigration()',
  );
  return class CreateOutboxArchive implements MigrationInterface {
    readonly name = name;

    async up(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      for (const sql of outboxArchiveTableDdl(dialect, options)) await queryRunner.query(sql);
    }

    async down(): Promise<void> {
      // Deliberately nothing: reverting must not destroy an audit trail.
    }
  };
}
