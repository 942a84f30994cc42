import type { OutboxTableNames } from '../../internal/sql-identifier';
import { hashKey } from '../rows/outbox-row.mapper';

/**
 * The `'leases'` mode's lock of a table (PostgreSQL advisory lock, two-key form): each
 * dispatcher of that mode holds it shared on its owner-lock session while it may claim; a
 * dispatcher of the `'partitions'` mode starts delivering only when it can take it exclusively
 * for a moment, so the two modes never deliver from one table at once (a rolling deploy that
 * switches the mode passes through both).
 */
export interface LeasesModeLock {
  readonly lockClass: number;
  readonly key: number;
}

const LEASES_MODE_LOCK_CLASS = hashKey('nestjs-outbox-leases-mode');

/** The table's `'leases'` mode lock. */
export function leasesModeLockOf(names: OutboxTableNames): LeasesModeLock {
  return {
    lockClass: LEASES_MODE_LOCK_CLASS,
    key: hashKey(`${names.schema ?? ''}.${names.tableName}`),
  };
}
