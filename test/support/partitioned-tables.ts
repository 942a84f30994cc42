import type { DataSource } from 'typeorm';
import type { OutboxPartitioningOptions } from '../../lib';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { outboxPartitions } from '../../lib/store/partitions/outbox-partitions';

// OUTBOX_TEST_PARTITIONED=day|week|month makes the tables the test helpers create partitioned
// (PostgreSQL, MariaDB), so that the dispatch suites run unchanged on
// the partitioned layout: `OUTBOX_TEST_PARTITIONED=day npx jest test/dispatch/ordering.spec.ts`.

const INTERVALS = ['day', 'week', 'month'] as const;

function selectedInterval(): OutboxPartitioningOptions['interval'] | undefined {
  const raw = process.env.OUTBOX_TEST_PARTITIONED?.trim();
  if (raw === undefined || raw === '') return undefined;
  const interval = INTERVALS.find((i) => i === raw);
  // A typo must not quietly run the plain layout.
  if (interval === undefined) {
    throw new Error(`OUTBOX_TEST_PARTITIONED: ${raw} is not day, week or month`);
  }
  return interval;
}

const interval = selectedInterval();

/** PostgreSQL and MySQL/MariaDB have partitioned tables; SQLite does not. */
function partitionable(ds: DataSource): boolean {
  return ['postgres', 'mysql', 'mariadb'].includes(ds.options.type);
}

/** The table options that make a test table partitioned on `ds`, when the variable asks. */
export function testPartitioning(ds: DataSource): { partitioning?: OutboxPartitioningOptions } {
  return interval === undefined || !partitionable(ds) ? {} : { partitioning: { interval } };
}

/** The module option matching how `table` was made (the helpers' tables or a spec's own). */
export async function partitioningOf(
  ds: DataSource,
  table: string,
  schema?: string,
): Promise<OutboxPartitioningOptions | undefined> {
  if (!partitionable(ds)) return undefined;
  const where = { tableName: table, schema };
  const { layout } = await outboxPartitions(typeormSqlPort(ds), where).status(
    { premake: 0, retentionMs: 1, deadRetentionMs: null },
    false,
  );
  return layout.kind === 'partitioned' ? { interval: layout.interval } : undefined;
}
