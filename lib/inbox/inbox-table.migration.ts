import type { MigrationInterface, QueryRunner } from 'typeorm';
import { tableMigrationName } from '../typeorm/migration-name';
import { outboxDialectOf } from '../store/schema/outbox-table-ddl';
import type { InboxTableOptions } from './inbox.interfaces';
import { INBOX_DEFAULT_TABLE } from './inbox.constants';
import { inboxTableDdl, inboxTableDropDdl } from './inbox-table';
import { refuseUnknownInboxTableOptions } from './inbox-option-keys';

/**
 * Returns a TypeORM migration class that creates the inbox table on PostgreSQL, MySQL/MariaDB or
 * SQLite (whichever the DataSource uses). Add it to the consumer's DataSource `migrations`, once
 * per inbox table. It is named after its table (`CreateInboxTable_inbox_1763900000000`), so
 * several inbox tables can share one DataSource.
 *
 * @param timestamp where the migration sorts among the DataSource's other migrations, in
 *   milliseconds since 1970 (TypeORM orders migrations by it). @default 1763900000000
 *
 * @example
 * new DataSource({ ..., migrations: [createInboxMigration({ tableName: 'inbox' })] })
 */
export function createInboxMigration(
  options: InboxTableOptions = {},
  timestamp = 1_763_900_000_000,
): new () => MigrationInterface {
  // Validate at definition time so a bad name (or an unknown key) fails before any migration runs.
  refuseUnknownInboxTableOptions('createInboxMigration()', options);
  inboxTableDdl('postgres', options);
  const migrationName = tableMigrationName(
    'CreateInboxTable',
    { tableName: options.tableName ?? INBOX_DEFAULT_TABLE, schema: options.schema },
    timestamp,
    'createInboxMigration()',
  );
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
