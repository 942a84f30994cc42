/** Day-partitioned outbox tables with a partition for a past day (P7, P11; docs/partitioning.md). */
import type { DataSource } from 'typeorm';
import { ensureOutboxTable } from '../../lib/schema';
import { partitionSuffix, periodStart } from '../../lib/store/partitions/partition-range';
import { dialectOf, dropOutboxTable, quoteTable } from './databases';

const DAY = 86_400_000;

/** The past day's partition of a table made by {@link partitionedTableWithPast}. */
export interface PastPartition {
  /** `p<YYYYMMDD>`, the partition's suffix (its name on MariaDB, `<table>_<suffix>` on PostgreSQL). */
  readonly suffix: string;
  /** Rows the partition holds now (a full count of that partition only). */
  rows(): Promise<number>;
}

/** A fresh, empty table partitioned by day: today's partition and tomorrow's (and the catch-all). */
export async function resetPartitionedTable(ds: DataSource, table: string): Promise<void> {
  await dropOutboxTable(ds, table);
  await ensureOutboxTable(ds, {
    tableName: table,
    partitioning: { interval: 'day', premake: 1 },
  });
}

/**
 * A fresh table partitioned by day (today's partition and tomorrow's), plus the partition of the
 * day `ageDays` ago, where rows seeded with `seedOutbox(…, { ageDays })` land: the shape of a
 * table whose history sits in older partitions.
 */
export async function partitionedTableWithPast(
  ds: DataSource,
  table: string,
  ageDays: number,
): Promise<PastPartition> {
  await resetPartitionedTable(ds, table);
  const today = periodStart('day', new Date());
  const day = new Date(today.getTime() - ageDays * DAY);
  const next = new Date(day.getTime() + DAY);
  const suffix = partitionSuffix(day);
  if (dialectOf(ds) === 'postgres') {
    await ds.query(
      `CREATE TABLE "${table}_${suffix}" PARTITION OF "${table}" FOR VALUES FROM ('${day.toISOString()}') TO ('${next.toISOString()}')`,
    );
  } else {
    const stamp = (at: Date): string => at.toISOString().slice(0, 19).replace('T', ' ');
    // The first partition holds everything below its bound: split the past day off it.
    await ds.query(
      `ALTER TABLE \`${table}\` REORGANIZE PARTITION ${partitionSuffix(today)} INTO (PARTITION ${suffix} VALUES LESS THAN ('${stamp(next)}'), PARTITION ${partitionSuffix(today)} VALUES LESS THAN ('${stamp(new Date(today.getTime() + DAY))}'))`,
    );
  }
  const from =
    dialectOf(ds) === 'postgres'
      ? quoteTable(ds, `${table}_${suffix}`)
      : `${quoteTable(ds, table)} PARTITION (${suffix})`;
  return {
    suffix,
    rows: async () => {
      const [row] = await ds.query<{ n: string | number }[]>(`SELECT count(*) AS n FROM ${from}`);
      return Number(row?.n ?? 0);
    },
  };
}
