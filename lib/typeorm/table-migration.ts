import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { OutboxDatabase, StatementRunner } from '../store/outbox-database';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../internal/sql-identifier';
import { tableMigrationName } from './migration-name';

/** What one direction of a table migration does, on the DataSource's database. */
export type TableMigrationWork = (
  database: OutboxDatabase,
  names: OutboxTableNames,
  run: StatementRunner,
) => Promise<void>;

/** Runs each statement in order. */
export async function runAll(run: StatementRunner, statements: readonly string[]): Promise<void> {
  for (const sql of statements) await run(sql);
}

/**
 * A TypeORM migration of one outbox table's schema: named `<prefix>_<schema.>table_<timestamp>`
 * (see tableMigrationName), its `up` and `down` given the database of the DataSource it runs
 * on, the table's names and the migration's query runner.
 */
export function tableMigration(
  prefix: string,
  subject: string,
  options: OutboxTableOptions,
  timestamp: number,
  up: TableMigrationWork,
  down: TableMigrationWork,
): new () => MigrationInterface {
  const name = tableMigrationName(
    prefix,
    { tableName: options.tableName ?? 'outbox', schema: options.schema },
    timestamp,
    subject,
  );
  const work = (direction: TableMigrationWork, queryRunner: QueryRunner): Promise<void> => {
    const dialect = outboxDialectOf(queryRunner.connection.options.type);
    return direction(outboxDatabase(dialect), tableNamesFor(dialect, options), (sql, params) =>
      queryRunner.query(sql, params),
    );
  };
  const migration = class implements MigrationInterface {
    readonly name = name;

    up(queryRunner: QueryRunner): Promise<void> {
      return work(up, queryRunner);
    }

    down(queryRunner: QueryRunner): Promise<void> {
      return work(down, queryRunner);
    }
  };
  // TypeORM and stack traces show the class name: keep it the step's own.
  Object.defineProperty(migration, 'name', { value: prefix });
  return migration;
}
