import type { ResolvedPartitioningOptions } from '../../options/resolve-partitioning-options';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { OutboxDatabase } from '../outbox-database';
import { rangesAhead } from '../partitions/partition-range';
import type { MessageIdLayout } from '../rows/message-id-codec';
import { partitionedTablesOf } from './table-layout';

/** The layout a table is made in: plain (null), or partitioned by an interval. */
export type TablePartitioning = Pick<ResolvedPartitioningOptions, 'interval' | 'premake'> | null;

/**
 * The statements that create the outbox table alone, in the layout asked: plain, or
 * partitioned with its first partitions made ahead from now.
 */
export function outboxTableStatements(
  database: OutboxDatabase,
  names: OutboxTableNames,
  partitioning: TablePartitioning,
  /** How message ids are stored (MySQL/MariaDB): see `layoutForNewTables`. */
  ids?: MessageIdLayout,
): string[] {
  return partitioning === null
    ? database.schema.createTable(names, ids)
    : partitionedTablesOf(database).createTable(
        names,
        partitioning.interval,
        rangesAhead(partitioning.interval, new Date(), partitioning.premake),
        ids,
      );
}
