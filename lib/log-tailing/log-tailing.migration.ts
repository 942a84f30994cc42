import type { MigrationInterface } from 'typeorm';
import type { OutboxTableOptions } from '../store/schema/outbox-table-ddl';
import {
  postgresDropPublication,
  postgresLogNames,
  postgresLogTailingDdl,
} from '../store/postgres/postgres.log-tailing-sql';
import { tableMigration } from '../typeorm/table-migration';
import { assertIdentifier } from '../internal/sql-identifier';

/**
 * A TypeORM migration that creates the publication PostgreSQL log tailing reads (the same
 * SQL as `outbox schema migrate --log-tailing`); add it after `...outboxMigrations(…)` with the
 * same table options. On another database it does nothing (the binlog needs no publication).
 * `down` drops the publication; drop the slot with `outbox log drop --yes`.
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
      if (database.dialect !== 'postgres') return;
      for (const statement of postgresLogTailingDdl(names, publication)) await run(statement);
    },
    async (database, _names, run) => {
      if (database.dialect === 'postgres') await run(postgresDropPublication(publication));
    },
  );
}
