import type { DataSource } from 'typeorm';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { SqlPort } from '../store/ports/sql-port';
import {
  auditSqlOf,
  auditTableNames,
  type OutboxAuditTableOptions,
} from '../store/shared-sql/audit-table';
import {
  createOutboxArchiveTable,
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
  refuseUnknownTableOptions,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { typeormSqlPort } from './typeorm.sql-port';

/** Creates the outbox table if it does not exist, e.g. in tests or at the start of a sample app. */
export async function ensureOutboxTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  refuseUnknownTableOptions('ensureOutboxTable()', options);
  return createOutboxTable(typeormSqlPort(dataSource), options);
}

/**
 * Creates the archive `<table>_archive` the cleaner moves rows into with `cleaner.archive` on, if
 * it does not exist.
 */
export async function ensureOutboxArchiveTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  refuseUnknownTableOptions('ensureOutboxArchiveTable()', options);
  return createOutboxArchiveTable(typeormSqlPort(dataSource), options);
}

/** Which outbox table `dropOutboxTables` removes, and whether an audit table goes with it. */
export interface OutboxTableDropOptions extends Omit<OutboxTableOptions, 'partitioning'> {
  /**
   * An audit table to drop too (the console's, which re-drives write to). Every outbox table of
   * a database shares it, so it is dropped only when named here.
   * @default none
   */
  auditTable?: OutboxAuditTableOptions;
}

/**
 * Drops the outbox table and every table the outbox made for it, rows and all: its attempt
 * history `<table>_attempts`, sequence counters `<table>_key_seq`, archive `<table>_archive`,
 * partition guard `<table>_ids`, delivery partitions' `<table>_dispatchers` and `<table>_owners`,
 * claim checks `<table>_claim_checks`, the erasure's `<table>_subject_keys` and
 * `<table>_subject_uses`, MySQL/MariaDB's key locks `<table>_key_lock` and binlog position
 * `<table>_log_position` (each only if it exists; indexes and partitions go with their table),
 * and `options.auditTable` if given. For tests and tear-downs: `target` is the TypeORM
 * DataSource, a connection (`pgOutbox(pool)`, …) or its SQL port. Names are validated like the
 * module's. A log-tailing slot and publication on PostgreSQL are not tables: `outbox log drop
 * --yes` removes them.
 */
export async function dropOutboxTables(
  target: DataSource | OutboxConnection<never> | SqlPort,
  options: OutboxTableDropOptions = {},
): Promise<void> {
  refuseUnknownTableOptions('dropOutboxTables()', options, true);
  const sql = sqlPortOf(target);
  const dialect = outboxDialectOf(sql.databaseType);
  const statements = [
    ...outboxTableDropDdl(dialect, options, 'all'),
    ...(options.auditTable === undefined
      ? []
      : auditSqlOf(dialect).dropTable(auditTableNames(dialect, options.auditTable))),
  ];
  for (const statement of statements) await sql.query(statement);
}

/** The SQL port of a port, a connection or a TypeORM DataSource. */
function sqlPortOf(target: DataSource | OutboxConnection<never> | SqlPort): SqlPort {
  if ('databaseType' in target) return target;
  // A DataSource's `sql` is TypeORM's tagged template (0.3.21+), a connection's is its port.
  if ('join' in target && typeof target.sql === 'object') return target.sql;
  return typeormSqlPort(target as DataSource);
}
