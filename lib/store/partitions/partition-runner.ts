import {
  describeLayout,
  type OutboxPartitionPolicy,
  type OutboxPartitionRows,
  type OutboxPartitionsPort,
  type OutboxPartitionsReport,
  type OutboxPartitionsStatus,
  type PartitionBlockers,
} from '../ports/outbox-partitions.port';
import type { SqlPort, SqlRunner } from '../ports/sql-port';
import {
  maintenanceReport,
  missingRanges,
  pastRetention,
  planMaintenance,
  planStatus,
  recheckDrops,
  skippedReport,
  type ListedPartition,
  type PartitionFrame,
  type PartitionPlan,
} from './partition-plan';
import type { PartitionSql } from './partition-sql';

/** The partitions of a table, and the maintainer that keeps them, on any database. */
export class PartitionRunner implements OutboxPartitionsPort {
  constructor(
    private readonly sql: SqlPort,
    private readonly db: PartitionSql,
  ) {}

  status(policy: OutboxPartitionPolicy, countRows: boolean): Promise<OutboxPartitionsStatus> {
    return this.sql.transaction(async (tx) => {
      const now = await this.db.begin(tx);
      const layout = await this.db.layout(tx);
      const empty = { table: this.db.table, partitions: [], missing: [], now };
      if (layout.kind !== 'partitioned') return { ...empty, layout };
      const listed = await this.db.list(tx, layout.interval);
      if (typeof listed === 'string')
        return { ...empty, layout: { kind: 'unrecognised', problem: listed } };
      const frame = this.frame(listed, layout.interval, policy, now);
      const blockers = await this.probe(tx, pastRetention(listed, now, policy), policy);
      const counts = countRows ? await this.count(tx, listed) : null;
      return { ...empty, layout, ...planStatus(frame, blockers, counts) };
    });
  }

  async maintain(policy: OutboxPartitionPolicy, dryRun: boolean): Promise<OutboxPartitionsReport> {
    const { report, dropped } = await this.sql.transaction(async (tx) => {
      const now = await this.db.begin(tx);
      // One maintainer at a time; a second one skips its run instead of waiting behind it.
      const ran = await this.db.exclusively(tx, () => this.maintainLocked(tx, policy, dryRun, now));
      return (
        ran ?? {
          report: skippedReport(
            dryRun,
            `another instance is maintaining the partitions of ${this.db.table}`,
          ),
          dropped: [],
        }
      );
    });
    // After the commit, outside the lock: until then the guard rows only keep dropped ids from
    // being enqueued again.
    const ranges = dropped.flatMap((p) => (p.range === null ? [] : [p.range]));
    if (dropped.length > 0) await this.db.pruneDropped(this.sql, ranges);
    return report;
  }

  private async maintainLocked(
    tx: SqlRunner,
    policy: OutboxPartitionPolicy,
    dryRun: boolean,
    now: Date,
  ): Promise<{ report: OutboxPartitionsReport; dropped: readonly ListedPartition[] }> {
    const skip = (why: string) => ({ report: skippedReport(dryRun, why), dropped: [] });
    const layout = await this.db.layout(tx);
    if (layout.kind !== 'partitioned') return skip(describeLayout(this.db.table, layout));
    const listed = await this.db.list(tx, layout.interval);
    if (typeof listed === 'string') return skip(listed);
    const frame = this.frame(listed, layout.interval, policy, now);
    const blockers = await this.probe(tx, pastRetention(listed, now, policy), policy);
    const plan = planMaintenance(frame, blockers, await this.heldByCatchAll(tx, frame));
    if (dryRun) return { report: maintenanceReport(plan, dryRun, frame.nameOf), dropped: [] };
    const done = await this.db.altering(tx, () => this.carryOut(tx, plan, policy, now));
    return { report: maintenanceReport(done, dryRun, frame.nameOf), dropped: done.drop };
  }

  private async carryOut(
    tx: SqlRunner,
    plan: PartitionPlan,
    policy: OutboxPartitionPolicy,
    now: Date,
  ): Promise<PartitionPlan> {
    if (plan.create.length > 0) await this.db.create(tx, plan.create);
    if (plan.drop.length === 0) return plan;
    return this.db.lockedForDrop(tx, async () => {
      // Under the table's lock nothing can change a row of the partition between the check and
      // the drop (an operator's retry, a resequenced dead letter): check again.
      const checked = recheckDrops(plan, await this.probe(tx, plan.drop, policy), now, policy);
      if (checked.drop.length > 0) await this.db.drop(tx, checked.drop);
      return checked;
    });
  }

  private frame(
    listed: readonly ListedPartition[],
    interval: PartitionFrame['interval'],
    policy: OutboxPartitionPolicy,
    now: Date,
  ): PartitionFrame {
    const placement = this.db.placement;
    return { listed, interval, policy, now, placement, nameOf: (r) => this.db.nameOf(r) };
  }

  private async probe(
    tx: SqlRunner,
    partitions: readonly ListedPartition[],
    policy: OutboxPartitionPolicy,
  ): Promise<Map<string, PartitionBlockers>> {
    const found = new Map<string, PartitionBlockers>();
    for (const p of partitions) found.set(p.name, await this.db.blockers(tx, p, policy));
    return found;
  }

  private async count(
    tx: SqlRunner,
    partitions: readonly ListedPartition[],
  ): Promise<Map<string, OutboxPartitionRows>> {
    const found = new Map<string, OutboxPartitionRows>();
    for (const p of partitions) found.set(p.name, await this.db.count(tx, p));
    return found;
  }

  /** The missing ranges whose rows already sit in the catch-all, by name. */
  private async heldByCatchAll(tx: SqlRunner, frame: PartitionFrame): Promise<Set<string>> {
    const held = new Set<string>();
    const catchAll = frame.listed.find((p) => p.range === null);
    if (catchAll === undefined || this.db.catchAllHolds === undefined) return held;
    for (const r of missingRanges(frame)) {
      if (await this.db.catchAllHolds(tx, catchAll, r)) held.add(frame.nameOf(r));
    }
    return held;
  }
}
