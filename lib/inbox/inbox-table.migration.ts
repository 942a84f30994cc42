import type { MigrationInterface, QueryRunner } from 'typeorm';
import { outboxDialectOf } from '../store/outbox-dialect';
import type { InboxTableOptions } from './inbox.interfaces';
import { inboxTableDdl, inboxTableDropDdl } from './inbox-table';

/**
 * Returns a TypeORM migration class that creates the inbox table on PostgreSQL, MySQL/MariaDB or
 * SQLite (whichever the DataSource uses). Add it to the consumer's DataSource `migrations`.
 *
 * @example
 * new DataSource({ ..., migrations: [createInboxMigration({ tableName: 'inbox' })] })
 */
export function createInboxMigration(
  options: InboxTableOptions = {},
  timestamp = 1_763_900_000_000,
): new () => MigrationInterface {
  // Validate at definition time so a bad name fails before any migration runs.
  inboxTableDdl('postgres', options);
  const migrationName = `CreateInboxTable${timestamp}`;
  return class CreateInboxTable implements MigrationInterface {
    readonly name = migrationName;

    async up(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      for (const sql of inboxTableDdl(dialect, options)) await queryRunner.query(sql);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      for (const sql of inboxTableDropDdl(dialect, options)) await queryRunner.query(sql);
    }
  };
}
