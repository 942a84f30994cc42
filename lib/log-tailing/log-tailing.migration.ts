import { refuseUnknownCallOptions } from '../internal/known-keys';
import type { MigrationInterface } from 'typeorm';
import type { OutboxTableOptions } from '../store/schema/outbox-table-ddl';
import { tableMigration } from '../typeorm/table-migration';
import { assertIdentifier } from '../internal/sql-identifier';
import { logTailingOf } from './log-tailing.databases';

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
  refuseUnknownCallOptions('logTailingMigration()', options, {
    '': {
      tableName: true,
      schema: true,
      partitioning: true,
      with: true,
      online: true,
      publicationName: true,
    } satisfies Record<keyof typeof options, true>,
  });
  const { publicationName, ...table } = options;
  if (publicationName !== undefined) assertIdentifier(publicationName, 'publicationName');
  return tableMigration(
    'AddOutboxLogTailingPublication',
    'logTailingMigration()',
    table,
    timestamp,
    async (database, names, run) => {
      for (const statement of logTailingOf(database.dialect)?.ddl(names, { publicationName }) ?? [])
        await run(statement);
    },
    async (database, names, run) => {
      for (const statement of logTailingOf(database.dialect)?.dropDdl(names, {
        publicationName,
      }) ?? [])
        await run(statement);
    },
  );
}
