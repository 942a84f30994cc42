import type {
  OutboxPartitionPolicy,
  OutboxPartitionRows,
  OutboxTableLayout,
  PartitionBlockers,
} from '../ports/outbox-partitions.port';
import type { SqlPort, SqlRunner } from '../ports/sql-port';
import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import type { ListedPartition, PartitionPlacement } from './partition-plan';
import type { PartitionRange } from './partition-range';

/**
 * What the partition runner needs from one database: reading the table's partitions and
 * carrying out a plan. The planning itself is shared (`partition-plan.ts`).
 */
export interface PartitionSql {
  /** The quoted table, for reports. */
  readonly table: string;
  readonly placement: PartitionPlacement;
  nameOf(range: PartitionRange): string;
  /** Settings of every partition transaction; answers the database's clock. */
  begin(tx: SqlRunner): Promise<Date>;
  layout(tx: SqlRunner): Promise<OutboxTableLayout>;
  /** Oldest first, the catch-all last; or what keeps the maintainer from recognising them. */
  list(tx: SqlRunner, interval: PartitionInterval): Promise<ListedPartition[] | string>;
  blockers(
    tx: SqlRunner,
    p: ListedPartition,
    policy: OutboxPartitionPolicy,
  ): Promise<PartitionBlockers>;
  count(tx: SqlRunner, p: ListedPartition): Promise<OutboxPartitionRows>;
  /** Whether the catch-all holds rows of a range, where that keeps the range from being created. */
  catchAllHolds?(tx: SqlRunner, catchAll: ListedPartition, range: PartitionRange): Promise<boolean>;
  /** Runs `work` as the only maintainer of the table; null when another one holds the lock. */
  exclusively<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T | null>;
  /** Runs the DDL of one maintenance run under the database's settings for it. */
  altering<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T>;
  create(tx: SqlRunner, ranges: readonly PartitionRange[]): Promise<void>;
  /** Runs `work` holding the table's lock, so no row can change between a check and a drop. */
  lockedForDrop<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T>;
  drop(tx: SqlRunner, partitions: readonly ListedPartition[]): Promise<void>;
  /** After the drop's commit: the guard rows and attempt history of the dropped rows. */
  pruneDropped(sql: SqlPort, ranges: readonly PartitionRange[]): Promise<void>;
}
