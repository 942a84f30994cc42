import type { MigrationInterface, QueryRunner } from 'typeorm';
import { OutboxTableMissingError } from '../errors/outbox-table-missing.error';
import { tableMigrationName } from './migration-name';
import { OutboxMessages } from '../outbox.messages';
import {
  outboxDatabase,
  outboxDialectOf,
  outboxTableDdl,
  refuseUnknownTableOptions,
  tableNamesFor,
  tablePartitioning,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { outboxTableStep as tableStep } from '../store/schema/schema-steps';

/**
 * Returns the first step of `outboxMigrations()`: the TypeORM migration class that creates the
 * outbox table as 0.3 made it, on PostgreSQL, MySQL/MariaDB or SQLite (whichever the
 * DataSource uses). It does not create the attempt history `<table>_attempts`, which this
 * version needs: use `...outboxMigrations()` in the DataSource's `migrations`, which starts
 * with this same migration (same name, so TypeORM knows it ran) and goes on with the later
 * steps. Kept for DataSources that list it already.
 *
 * The migration is named after its table (`CreateOutboxTable_outbox_1763800000000`,
 * `CreateOutboxTable_events.orders_outbox_…` with a schema), so several outbox tables can share
 * one DataSource. It refuses to complete over a table made by 0.1, which lacks columns this
 * version uses, so TypeORM does not record it and runs it again once that table is dropped.
 *
 * @param timestamp where the migration sorts among the DataSource's other migrations, in
 *   milliseconds since 1970 (TypeORM orders migrations by it). @default 1763800000000
 *
 * @example
 * new DataSource({ ..., migrations: [...outboxMigrations({ tableName: 'outbox' })] })
 */
export function createOutboxMigration(
  options: OutboxTableOptions = {},
  timestamp = 1_763_800_000_000,
): new () => MigrationInterface {
  // Validate at definition time so a bad name (or an unknown key) fails before any migration runs.
  refuseUnknownTableOptions('createOutboxMigration()', options);
  outboxTableDdl('postgres', options);
  const tableName = options.tableName ?? 'outbox';
  const migrationName = tableMigrationName(
    'CreateOutboxTable',
    { tableName, schema: options.schema },
    timestamp,
    'createOutboxMigration()',
  );
  return class CreateOutboxTable implements MigrationInterface {
    readonly name = migrationName;

    async up(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      const database = outboxDatabase(dialect);
      // A table made by 0.1 lacks columns the index statements below name: refuse it before
      // they fail on it with the database's bare error (asked through TypeORM's metadata, since
      // a failed probe would abort the migration's transaction on PostgreSQL).
      const path =
        database.schemas && options.schema !== undefined
          ? `${options.schema}.${tableName}`
          : tableName;
      if (await queryRunner.hasTable(path)) {
        const missing: string[] = [];
        for (const column of ['last_attempt_at', 'dead_at']) {
          if (!(await queryRunner.hasColumn(path, column))) missing.push(column);
        }
        if (missing.length > 0) {
          const { table } = tableNamesFor(dialect, options);
          throw new OutboxTableMissingError(
            OutboxMessages.tableOutdated(table, `no column ${missing.join(', ')}`, {
              tableName,
              schema: options.schema,
              keyLock: database.keyLockTable,
            }),
            table,
            { cause: undefined },
          );
        }
      }
      // The table alone, as this step always made it: the attempt history is the next step.
      // Time-partitioned when the options say so; a plain table already there is refused, not
      // converted (the error lists the manual steps).
      await tableStep.apply({
        database,
        names: tableNamesFor(dialect, options),
        run: (sql, params) => queryRunner.query(sql, params),
        partitioning: tablePartitioning(options),
      });
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      await tableStep.revert({
        database: outboxDatabase(dialect),
        names: tableNamesFor(dialect, options),
        run: (sql, params) => queryRunner.query(sql, params),
        partitioning: tablePartitioning(options),
      });
    }
  };
}
