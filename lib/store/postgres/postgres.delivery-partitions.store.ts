import type {
  EndingMember,
  OutboxPartitionOwner,
  OutboxDeliveryPartitionsPort,
  OutboxQueuePolicy,
  OwnedRead,
  OwnedReadRange,
  PartitionBeat,
  PartitionFence,
  PartitionMember,
  OwnedSettle,
  Settlement,
  TakenPartition,
} from '../ports/outbox-store.port';
import {
  leasesModeHolder,
  leasesModeLockOf,
  type LeasesModeLock,
} from '../shared-sql/leases-mode-lock';
import type { SqlResult } from '../ports/sql-port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  namesEveryPartition,
  partitionOwnerOf,
  type PartitionOwnerRow,
} from '../shared-sql/delivery-partitions';
import { blockingCondition } from '../shared-sql/dead-blocking';
import { toClaimedRecords, type ClaimedRow } from '../rows/outbox-row.mapper';
import { cachedStatement } from '../shared-sql/sql-values';
import { POSTGRES_OWNER_LOCK_CLASS } from '../shared-sql/owner-leases';
import { POSTGRES_CLAIMED_COLUMNS, postgresSettlementValues } from './postgres.sql';
import {
  POSTGRES_LEASES_MODE_HOLDERS,
  postgresBeat,
  postgresEndGoneMembers,
  postgresHoldOwned,
  postgresLeave,
  postgresOwners,
  postgresReadOwned,
  postgresRelease,
  postgresSettleOwned,
  postgresTake,
  type OwnedSettleGroups,
} from './postgres.delivery-partitions-sql';

/**
 * Runs one statement: in a transaction of the store's dispatch settings (after the dispatch locks
 * of `lockKeys`, when given), or on its own.
 */
export type PartitionStatement = <R>(
  sql: string,
  params: readonly unknown[],
  lockKeys?: readonly string[],
) => Promise<SqlResult<R>>;

/** How many parked rows of a key a settle that moved the key on gives back: all of them. */
const PROMOTE_ALL = 2_147_483_647;

type OwnedRow = ClaimedRow & {
  partition: number;
  prev_id: string | null;
  snap_xmin: string;
  snap_xid: string;
};

/**
 * Partitioned delivery on PostgreSQL (OutboxDeliveryPartitionsPort): the statements of
 * postgres.delivery-partitions-sql.ts, run in the store's dispatch transactions (its timeout
 * and planner settings) by `transact`, or on their own by `run`.
 */
export class PostgresDeliveryPartitionsStore implements OutboxDeliveryPartitionsPort {
  private readonly readSql: string;
  /** The read of a process owning every partition: no list of them sent (`postgresReadOwned`). */
  private readonly readEverySql: string;
  private readonly settleSql = new Map<string, string>();
  private readonly leasesMode: LeasesModeLock;

  constructor(
    private readonly names: OutboxTableNames,
    private readonly policy: OutboxQueuePolicy,
    private readonly transact: PartitionStatement,
    private readonly run: PartitionStatement,
    /** Whether the attempt history takes 'fallback' rows (schema step 8). */
    private readonly fallbackHistory: boolean,
    /** Whether the table has the index of waiting rows (schema step 5): promotions use it. */
    private readonly hasWaitingIndex: () => Promise<boolean>,
    /** The store's promotion of orphaned waiting rows (OutboxUpkeepPort.promoteOrphans). */
    readonly promoteOrphans: (limit: number) => Promise<number>,
    /** Sends the members notice on the table's wake-up channel (OutboxStore.listen). */
    readonly announce: () => Promise<void>,
  ) {
    // The attempt a delivery of the row would make: the read writes none, the settle counts it.
    const columns = POSTGRES_CLAIMED_COLUMNS.replace('o.attempts,', 'o.attempts + 1 AS attempts,');
    const blocking = policy.ordered ? blockingCondition('e', policy) : null;
    this.readSql = postgresReadOwned(names, blocking, columns);
    this.readEverySql = postgresReadOwned(names, blocking, columns, true);
    this.leasesMode = leasesModeLockOf(names);
  }

  async refreshStatistics(): Promise<void> {
    await this.run(`ANALYZE ${this.names.table}`, []);
  }

  async beat(member: PartitionMember, stayWorking: boolean): Promise<PartitionBeat> {
    const { rows } = await this.run<{
      working: boolean;
      live: string[];
      label_shared: boolean;
      owned: number[];
      generations: string[];
    }>(postgresBeat(this.names), [
      member.id,
      member.label,
      member.validMs,
      stayWorking,
      this.leasesMode.lockClass,
      this.leasesMode.key,
      member.lockKey ?? null,
    ]);
    const row = rows[0];
    const owned = new Map<number, string>();
    (row?.owned ?? []).forEach((p, i) => owned.set(Number(p), String(row?.generations[i])));
    return {
      working: row?.working === true,
      live: row?.live ?? [],
      labelShared: row?.label_shared === true,
      owned,
    };
  }

  async take(
    id: string,
    partitions: readonly number[],
  ): Promise<ReadonlyMap<number, TakenPartition>> {
    if (partitions.length === 0) return new Map();
    const { rows } = await this.transact<{
      partition: number;
      generation: string;
      previous: string | null;
    }>(postgresTake(this.names), [id, partitions]);
    return new Map(
      rows.map((r) => [
        Number(r.partition),
        { generation: String(r.generation), previous: r.previous },
      ]),
    );
  }

  async release(id: string, partitions: readonly number[]): Promise<void> {
    if (partitions.length === 0) return;
    await this.run(postgresRelease(this.names), [id, partitions]);
  }

  async owners(): Promise<readonly OutboxPartitionOwner[]> {
    const { rows } = await this.run<PartitionOwnerRow>(postgresOwners(this.names), []);
    return rows.map(partitionOwnerOf);
  }

  async leasesModeHolders(): Promise<readonly string[]> {
    const { rows } = await this.run<{
      pid: number;
      application_name: string | null;
      client_addr: string | null;
    }>(POSTGRES_LEASES_MODE_HOLDERS, [this.leasesMode.lockClass, this.leasesMode.key]);
    return rows.map((r) => leasesModeHolder(r.pid, [r.application_name, r.client_addr]));
  }

  async holdOwned(
    id: string,
    fence: PartitionFence,
    ids: readonly string[],
    leaseMs: number,
    token: string,
  ): Promise<number> {
    if (ids.length === 0) return 0;
    const params = [id, [...fence.keys()], [...fence.values()], ids, token, leaseMs];
    return (await this.transact(postgresHoldOwned(this.names), params)).affected;
  }

  async endGoneMembers(id: string, graceMs: number): Promise<readonly EndingMember[]> {
    const { rows } = await this.run<{ label: string; cut: boolean; ends_in_ms: number | string }>(
      postgresEndGoneMembers(this.names),
      [id, POSTGRES_OWNER_LOCK_CLASS, graceMs],
    );
    return rows.map((r) => ({ label: r.label, cut: r.cut, endsInMs: Number(r.ends_in_ms) }));
  }

  async leave(id: string): Promise<void> {
    for (const statement of postgresLeave(this.names)) await this.run(statement, [id]);
  }

  async readOwned(
    partitions: readonly number[],
    limit: number,
    range: OwnedReadRange,
  ): Promise<OwnedRead> {
    const rest = [Math.max(0, limit), range.after, range.ids, range.keys];
    const { rows } = namesEveryPartition(partitions)
      ? await this.run<OwnedRow>(this.readEverySql, rest)
      : await this.run<OwnedRow>(this.readSql, [partitions, ...rest]);
    const first = rows[0];
    const snapshot = {
      xmin: BigInt(first?.snap_xmin ?? 0),
      xid: BigInt(first?.snap_xid ?? 0),
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
    id: string,
    fence: PartitionFence,
    s: Settlement,
    deleteDelivered: boolean,
    token: string,
  ): Promise<OwnedSettle> {
    const fallback = this.fallbackHistory && !deleteDelivered ? (s.fallback ?? []) : [];
    const groups: OwnedSettleGroups = {
      delivered: s.delivered.length > 0,
      retry: s.retry.length > 0,
      dead: s.dead.length > 0,
      release: s.release.length > 0,
      fallback: fallback.length > 0,
    };
    if (!groups.delivered && !groups.retry && !groups.dead && !groups.release) {
      return { changed: 0, promoted: 0 };
    }
    const keys = this.policy.ordered ? s.advancedKeys : [];
    const promote = keys.length > 0;
    const waiting = promote && (await this.hasWaitingIndex());
    const shape = `${groups.delivered}:${groups.retry}:${groups.dead}:${groups.release}:${groups.fallback}:${deleteDelivered}:${promote}:${waiting}`;
    const sql = cachedStatement(this.settleSql, shape, () =>
      postgresSettleOwned(
        this.names,
        groups,
        deleteDelivered,
        promote ? this.policy : undefined,
        waiting,
      ),
    );
    const params: unknown[] = [id, [...fence.keys()], [...fence.values()], token];
    params.push(...postgresSettlementValues(s, fallback));
    if (promote) {
      if (groups.dead) params.push(s.dead.filter((d) => d.advancesKey === true).map((d) => d.id));
      // Every parked row of the key: the owner reads them back in order, as any backlog.
      params.push(keys, PROMOTE_ALL);
    }
    // The dispatch locks first, as a park takes them: the promotion sees every park committed
    // before it, and a park after it sees this settle.
    const { rows } = await this.transact<{ changed: number; promoted: number }>(
      sql,
      params,
      promote ? keys : undefined,
    );
    return { changed: rows[0]?.changed ?? 0, promoted: rows[0]?.promoted ?? 0 };
  }
}
