import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  outboxDialectOf,
  outboxTableDdl,
  outboxTableDropDdl,
  type OutboxTableOptions,
} from './outbox-dialect';

/**
 * Returns a TypeORM migration class that creates the outbox table on PostgreSQL, MySQL/MariaDB or
 * SQLite (whichever the DataSource uses). Add it to the DataSource's `migrations`.
 *
 * @example
 * new DataSource({ ..., migrations: [createOutboxMigration({ tableName: 'outbox' })] })
 */
export function createOutboxMigration(
  options: OutboxTableOptions = {},
  timestamp = 1_763_800_000_000,
): new () => MigrationInterface {
  // Validate at definition time so a bad name fails before any migration runs.
  outboxTableDdl('postgres', options);
  const migrationName = `CreateOutboxTable${timestamp}`;
  return class CreateOutboxTable implements MigrationInterface {
    readonly name = migrationName;

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const sql of outboxTableDdl(
        outboxDialectOf(queryRunner.connection.options.type),
        options,
      )) {
        await queryRunner.query(sql);
      }
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      for (const sql of outboxTableDropDdl(
        outboxDialectOf(queryRunner.connection.options.type),
        options,
      )) {
        await queryRunner.query(sql);
      }
    }
  };
}
