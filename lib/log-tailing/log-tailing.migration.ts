import type { MigrationInterface } from 'typeorm';
import type { OutboxTableOptions } from '../store/schema/outbox-table-ddl';
import {
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
} from './postgres/postgres-log-tailing.sql';
import { mysqlLogTailingDdl, mysqlLogTailingDrop } from './mysql/mysql-log-tailing.sql';
import { tableMigration } from '../typeorm/table-migration';
import { assertIdentifier } from '../internal/sql-identifier';

/**
 * A TypeORM migration that makes what log tailing needs in the database (the same SQL as
 * `outbox schema migrate --log-tailing`): the publication PostgreSQL reads, or MySQL/MariaDB's
 * binlog position table `<table>_log_position`. Add it after `...outboxMigrations(…)` with the
 * same table options; on SQLite it does nothing. `down` drops the publication (drop the slot
 * with `outbox log drop --yes`) or the position table.
 */
export function logTailingMigration(
  options: OutboxTableOptions & { readonly publicationName?: string } = {},
  timestamp = 1_764_100_000_000,
): new () => MigrationInterface {
  const { publicationName, ...table } = options;
  const publication =
    publicationName ??
    postgresLogNames(table.schema ?? 'public', table.tableName ?? 'outbox', '').publication;
  assertIdentifier(publication, 'publicationName');
  return tableMigration(
    'AddOutboxLogTailingPublication',
    'logTailingMigration()',
    table,
    timestamp,
    async (database, names, run) => {
      const statements =
        database.dialect === 'postgres'
          ? postgresLogTailingDdl(names, publication)
          : database.dialect === 'mysql'
            ? mysqlLogTailingDdl(names)
            : [];
      for (const statement of statements) await run(statement);
    },
    async (database, names, run) => {
      if (database.dialect === 'postgres') await run(postgresDropPublication(publication));
      if (database.dialect === 'mysql') {
        for (const statement of mysqlLogTailingDrop(names)) await run(statement);
      }
    },
  );
}
