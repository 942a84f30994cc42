import { refuseUnknownCallOptions } from '../../internal/known-keys';
import {
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
  tableNamesFor,
  type OutboxTableOptions,
} from '../../store/schema/outbox-table-ddl';
import { kyselyOutbox, type KyselyInstance, type KyselyOutboxOptions } from './kysely.connection';

/** A Kysely migration (`Migration` of `kysely`): what `Migrator` runs. */
export interface OutboxKyselyMigration {
  up(db: KyselyInstance): Promise<void>;
  down(db: KyselyInstance): Promise<void>;
}

/**
 * The outbox table (with its attempt history, indexes and the rest of the current schema) as a
 * Kysely migration, for the migrations your `Migrator` runs:
 *
 * @example
 * // migrations/2026_11_23_outbox.ts
 * import { outboxKyselyMigration } from 'nestjs-outbox/kysely';
 * export const { up, down } = outboxKyselyMigration();
 *
 * `up` creates what is missing and brings an older table up to date in place (rows kept), as
 * `outbox schema migrate` does; `down` drops the table, its history and its lock table.
 * The database is read from the dialect's adapter, as `kyselyOutbox` does.
 */
export function outboxKyselyMigration(
  options: OutboxTableOptions & Pick<KyselyOutboxOptions, 'databaseType'> = {},
): OutboxKyselyMigration {
  // Validate at definition time, so a bad name (or an unknown key) fails before the Migrator
  // runs anything.
  refuseUnknownCallOptions('outboxKyselyMigration()', options, {
    '': {
      tableName: true,
      schema: true,
      partitioning: true,
      with: true,
      online: true,
      databaseType: true,
    } satisfies Record<keyof typeof options, true>,
  });
  const { databaseType, ...table } = options;
  tableNamesFor('postgres', table);
  return {
    async up(db) {
      await createOutboxTable(kyselyOutbox(db, { databaseType }).sql, table);
    },
    async down(db) {
      const { sql } = kyselyOutbox(db, { databaseType });
      for (const statement of outboxTableDropDdl(outboxDialectOf(sql.databaseType), table)) {
        await sql.query(statement);
      }
    },
  };
}
