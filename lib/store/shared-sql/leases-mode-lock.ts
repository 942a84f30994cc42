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

/**
 * A session holding the `'leases'` mode lock as a log line names it: its id, then where it comes
 * from (an application name, a user, a host) where the server shows it.
 */
export function leasesModeHolder(
  session: number | string,
  from: readonly (string | null)[],
): string {
  const known = from.filter((v) => v !== null && v !== '');
  return `session ${session}${known.length > 0 ? ` (${known.join(', ')})` : ''}`;
}

/**
 * MySQL/MariaDB: how many named locks stand for the table's `'leases'` mode lock. Named locks
 * are exclusive only, so each `'leases'` dispatcher takes one of these slots where PostgreSQL's
 * take the one lock shared; a `'partitions'` heartbeat reads them all. A 65th `'leases'`
 * dispatcher of one table finds no free slot and claims nothing until one is given up.
 */
export const MYSQL_LEASES_MODE_SLOTS = 64;

/**
 * MySQL/MariaDB: the names of the table's `'leases'` mode slots (bound as values, never written
 * into a statement). `database` is the table's database when its names are not qualified: named
 * locks are global to the server, and two databases may each have a table `outbox`.
 */
export function mysqlLeasesModeSlots(names: OutboxTableNames, database: string): string[] {
  const table = hashKey(`${names.schema ?? database}.${names.tableName}`);
  const hex = table.toString(16).padStart(8, '0');
  return Array.from(
    { length: MYSQL_LEASES_MODE_SLOTS },
    (_, i) => `nestjs-outbox-leases-${hex}-${i}`,
  );
}
