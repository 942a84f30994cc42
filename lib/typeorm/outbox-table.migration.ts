import type { MigrationInterface, QueryRunner } from 'typeorm';
import { OutboxTableMissingError } from '../errors/outbox-table-missing.error';
import { describeError } from '../internal/describe-error';
import { tableMigrationName } from './migration-name';
import { OutboxMessages } from '../outbox.messages';
import {
  outboxDatabase,
  outboxDialectOf,
  outboxTableDdl,
  outboxTableStatements,
  tableNamesFor,
  tablePartitioning,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { checkTableLayout } from '../store/schema/table-layout';
import { layoutForNewTables } from '../store/schema/message-id-layout';

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
  // Validate at definition time so a bad name fails before any migration runs.
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
      const names = tableNamesFor(dialect, options);
      const partitioning = tablePartitioning(options);
      await checkTableLayout(
        {
          isConnected: true,
          query: async <R>(sql: string, params?: readonly unknown[]) => ({
            rows: (await queryRunner.query(sql, params === undefined ? [] : [...params])) as R[],
            affected: 0,
          }),
        },
        database,
        names,
        partitioning,
        { creating: true },
      );
      const run = (sql: string, params?: unknown[]): Promise<unknown> =>
        queryRunner.query(sql, params);
      const ids = await layoutForNewTables(database, run, names);
      for (const sql of outboxTableStatements(database, names, partitioning, ids)) {
        await queryRunner.query(sql);
      }
      // e.g. MySQL tables made before 0.3, which compare keys ignoring trailing spaces.
      await database.afterCreateTable?.((sql, params) => queryRunner.query(sql, params), names);
      // CREATE TABLE IF NOT EXISTS leaves an older table as it is: fail rather than record a
      // migration whose table this version cannot use (the app start would fail on it anyway).
      const { table } = tableNamesFor(dialect, options);
      try {
        await queryRunner.query(
          `SELECT 1 FROM ${table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`,
        );
      } catch (error) {
        throw new OutboxTableMissingError(
          OutboxMessages.tableOutdated(table, describeError(error), {
            tableName,
            schema: options.schema,
            keyLock: database.keyLockTable,
          }),
          table,
          { cause: error },
        );
      }
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(queryRunner.connection.options.type);
      const database = outboxDatabase(dialect);
      const names = tableNamesFor(dialect, options);
      for (const sql of [
        ...database.dropTable(names),
        ...(database.partitioned?.dropTable(names) ?? []),
      ]) {
        await queryRunner.query(sql);
      }
    }
  };
}
