import type {
  OutboxPartitionOwner,
  OutboxPartitionStore,
  OutboxQueuePolicy,
  OwnedRead,
  OwnedReadRange,
  PartitionFence,
  Settlement,
} from '../ports/outbox-store.port';
import type { SqlResult } from '../ports/sql-port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { blockingCondition } from '../shared-sql/dead-blocking';
import { toClaimedRecords, type ClaimedRow } from '../rows/outbox-row.mapper';
import { cachedStatement } from '../shared-sql/sql-values';
import { POSTGRES_CLAIMED_COLUMNS, postgresSettlementValues } from './postgres.sql';
import {
  postgresBeat,
  postgresLeave,
  postgresOwned,
  postgresOwners,
  postgresReadOwned,
  postgresRelease,
  postgresSettleOwned,
  postgresTake,
  type OwnedSettleGroups,
} from './postgres.delivery-partitions-sql';

/** Runs one statement: in a transaction of the store's dispatch settings, or on its own. */
export type PartitionStatement = <R>(
  sql: string,
  params: readonly unknown[],
) => Promise<SqlResult<R>>;

type OwnedRow = ClaimedRow & {
  partition: number;
  prev_id: string | null;
  snap_xmin: string;
  snap_xmax: string;
};

/**
 * Partitioned delivery on PostgreSQL (OutboxPartitionStore): the statements of
 * postgres.delivery-partitions-sql.ts, run in the store's dispatch transactions (its timeout
 * and planner settings) by `transact`, or on their own by `run`.
 */
export class PostgresPartitionStore implements OutboxPartitionStore {
  private readonly readSql: string;
  private readonly settleSql = new Map<string, string>();

  constructor(
    private readonly names: OutboxTableNames,
    policy: OutboxQueuePolicy,
    private readonly transact: PartitionStatement,
    private readonly run: PartitionStatement,
    /** Whether the attempt history takes 'fallback' rows (schema step 8). */
    private readonly fallbackHistory: boolean,
  ) {
    // The attempt a delivery of the row would make: the read writes none, the settle counts it.
    const columns = POSTGRES_CLAIMED_COLUMNS.replace('o.attempts,', 'o.attempts + 1 AS attempts,');
    this.readSql = postgresReadOwned(names, blockingCondition('e', policy), columns);
  }

  async beat(instance: string, timeoutMs: number): Promise<readonly string[]> {
    const { rows } = await this.run<{ live: string[] }>(postgresBeat(this.names), [
      instance,
      timeoutMs,
    ]);
    return rows[0]?.live ?? [instance];
  }

  async take(
    instance: string,
    partitions: readonly number[],
    timeoutMs: number,
  ): Promise<PartitionFence> {
    if (partitions.length === 0) return new Map();
    const { rows } = await this.transact<{ partition: number; generation: string }>(
      postgresTake(this.names),
      [instance, partitions, timeoutMs],
    );
    return new Map(rows.map((r) => [Number(r.partition), String(r.generation)]));
  }

  async release(instance: string, partitions: readonly number[]): Promise<void> {
    if (partitions.length === 0) return;
    await this.run(postgresRelease(this.names), [instance, partitions]);
  }

  async owners(timeoutMs: number): Promise<readonly OutboxPartitionOwner[]> {
    const { rows } = await this.run<{
      owner: string | null;
      partitions: number;
      heartbeat_age_ms: number | string | null;
      live: boolean | null;
    }>(postgresOwners(this.names), [timeoutMs]);
    return rows.map((r) => ({
      owner: r.owner,
      partitions: Number(r.partitions),
      heartbeatAgeMs: r.heartbeat_age_ms === null ? null : Math.round(Number(r.heartbeat_age_ms)),
      live: r.live === true,
    }));
  }

  async owned(instance: string): Promise<PartitionFence> {
    const { rows } = await this.run<{ partition: number; generation: string }>(
      postgresOwned(this.names),
      [instance],
    );
    return new Map(rows.map((r) => [Number(r.partition), String(r.generation)]));
  }

  async leave(instance: string): Promise<void> {
    for (const statement of postgresLeave(this.names)) await this.run(statement, [instance]);
  }

  async readOwned(
    partitions: readonly number[],
    limit: number,
    range: OwnedReadRange,
  ): Promise<OwnedRead> {
    const { rows } = await this.run<OwnedRow>(this.readSql, [
      partitions,
      Math.max(0, limit),
      range.after,
      range.ids,
      range.keys,
    ]);
    const first = rows[0];
    const snapshot = {
      xmin: BigInt(first?.snap_xmin ?? 0),
      xmax: BigInt(first?.snap_xmax ?? 0),
    };
    // A row of nulls carries the snapshot when no row is due.
    const found = rows.filter((row) => row.id !== null);
    const partitionOf = new Map<string, number>();
    const previous = new Map<string, string>();
    // By id, not by position: the mapper sorts the records by id numerically.
    for (const row of found) {
      const id = String(row.id);
      partitionOf.set(id, Number(row.partition));
      if (row.prev_id !== null) previous.set(id, row.prev_id);
    }
    return { records: toClaimedRecords(found), partitions: partitionOf, previous, snapshot };
  }

  async settleOwned(
    instance: string,
    fence: PartitionFence,
    s: Settlement,
    deleteDelivered: boolean,
  ): Promise<number> {
    const fallback = this.fallbackHistory && !deleteDelivered ? (s.fallback ?? []) : [];
    const groups: OwnedSettleGroups = {
      delivered: s.delivered.length > 0,
      retry: s.retry.length > 0,
      dead: s.dead.length > 0,
      release: s.release.length > 0,
      fallback: fallback.length > 0,
    };
    if (!groups.delivered && !groups.retry && !groups.dead && !groups.release) return 0;
    const shape = `${groups.delivered}:${groups.retry}:${groups.dead}:${groups.release}:${groups.fallback}:${deleteDelivered}`;
    const sql = cachedStatement(this.settleSql, shape, () =>
      postgresSettleOwned(this.names, groups, deleteDelivered),
    );
    const params: unknown[] = [instance, [...fence.keys()], [...fence.values()]];
    params.push(...postgresSettlementValues(s, fallback));
    const { rows } = await this.transact<{ changed: number }>(sql, params);
    return rows[0]?.changed ?? 0;
  }
}
