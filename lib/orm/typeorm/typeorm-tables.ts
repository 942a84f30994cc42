import type { DataSource } from 'typeorm';
import { createOutboxTable, type OutboxTableOptions } from '../../store/outbox-dialect';
import { typeormSqlPort } from './typeorm.sql-port';

/** Creates the outbox table if it does not exist, e.g. in tests or at the start of a sample app. */
export function ensureOutboxTable(
  dataSource: DataSource,
  options: OutboxTableOptions = {},
): Promise<void> {
  return createOutboxTable(typeormSqlPort(dataSource), options);
}
