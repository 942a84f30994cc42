import type { DataSource } from 'typeorm';
import {
  createOutboxArchiveTable,
  createOutboxTable,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import { typeormSqlPort } from './typeorm.sql-port';

/** Creates the outbox table if it does not exist, e.g. in tests or at the start of a sample app. */
export function ensureOutboxTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  return createOutboxTable(typeormSqlPort(dataSource), options);
}

/**
 * Creates the archive `<table>_archive` the cleaner moves rows into with `cleaner.archive` on, if
 * it does not exist.
 */
export function ensureOutboxArchiveTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  return createOutboxArchiveTable(typeormSqlPort(dataSource), options);
}
