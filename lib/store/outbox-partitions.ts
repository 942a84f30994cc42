import type { OutboxPartitionsPort } from './outbox-partitions.port';
import { outboxDatabase, tableNamesFor, outboxDialectOf } from './outbox-dialect';
import type { SqlPort } from './sql-port';
import { partitionedTablesOf } from './table-layout';

/**
 * The partitions of a partitioned outbox table: their status, and the maintenance the
 * `OutboxPartitionMaintainer` runs. Throws a typed error on a database without partitioned
 * tables (SQLite); on a table that is not partitioned as the outbox makes it, `status` says
 * so and `maintain` changes nothing.
 */
export function outboxPartitions(
  sql: SqlPort,
  table: { tableName?: string; schema?: string | null } = {},
): OutboxPartitionsPort {
  const names = tableNamesFor(outboxDialectOf(sql.databaseType), {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  return partitionedTablesOf(outboxDatabase(sql.databaseType)).partitions(sql, names);
}
