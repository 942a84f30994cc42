import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import {
  keptBecause,
  type OutboxPartition,
  type OutboxPartitionPolicy,
  type OutboxPartitionRows,
  type OutboxPartitionsReport,
  type PartitionBlockers,
} from '../ports/outbox-partitions.port';
import { rangesAhead, type PartitionRange } from './partition-range';

// What the maintainer should do, decided without a database: the runner reads the partitions
// and probes them, these functions decide, and the runner carries the decision out.

/** One partition as the database lists it. */
export interface ListedPartition {
  readonly name: string;
  /** Null for the catch-all partition. */
  readonly range: PartitionRange | null;
  readonly bytes: number;
}

/**
 * Where new partitions may go: PostgreSQL fills any gap; MySQL/MariaDB only adds above the last
 * one (it splits the catch-all, which sits above every range).
 */
export type PartitionPlacement = 'any-gap' | 'above-last';

/** What the plan starts from: the table's partitions, the policy and the database's clock. */
export interface PartitionFrame {
  /** Oldest first; the catch-all last. */
  readonly listed: readonly ListedPartition[];
  readonly interval: PartitionInterval;
  readonly policy: OutboxPartitionPolicy;
  readonly now: Date;
  readonly placement: PartitionPlacement;
  /** The name the database gives the partition of a range. */
  readonly nameOf: (range: PartitionRange) => string;
}

/** What one maintenance run creates and drops. */
export interface PartitionPlan {
  readonly create: readonly PartitionRange[];
  readonly notCreated: readonly { readonly name: string; readonly reason: string }[];
  readonly drop: readonly ListedPartition[];
  /** Past retention, yet kept. */
  readonly kept: readonly { readonly name: string; readonly reason: string }[];
}

/** The ranges the policy wants (the current period and `premake` ahead) that are not there. */
export function missingRanges(frame: PartitionFrame): PartitionRange[] {
  const wanted = rangesAhead(frame.interval, frame.now, frame.policy.premake);
  if (frame.placement === 'above-last') {
    const last = frame.listed.reduce(
      (max, p) => Math.max(max, p.range?.to.getTime() ?? -Infinity),
      -Infinity,
    );
    return wanted.filter((r) => r.from.getTime() >= last);
  }
  return wanted.filter(
    (r) => !frame.listed.some((p) => p.range?.from.getTime() === r.from.getTime()),
  );
}

/** The partitions whose whole range is past the retention: those to probe for blockers. */
export function pastRetention(
  listed: readonly ListedPartition[],
  now: Date,
  policy: OutboxPartitionPolicy,
): ListedPartition[] {
  return listed.filter((p) => keptBecause(rangeOf(p), now, policy, null) === null);
}

/** Splits partitions past retention into those to drop and those kept, by their blockers. */
export function sortDrops(
  candidates: readonly ListedPartition[],
  blockers: ReadonlyMap<string, PartitionBlockers>,
  now: Date,
  policy: OutboxPartitionPolicy,
): Pick<PartitionPlan, 'drop' | 'kept'> {
  const drop: ListedPartition[] = [];
  const kept: { name: string; reason: string }[] = [];
  for (const p of candidates) {
    const reason = reasonToKeep(p, blockers, now, policy);
    if (reason === null) drop.push(p);
    else kept.push({ name: p.name, reason });
  }
  return { drop, kept };
}

/**
 * The run's plan: create the missing ranges (except those whose rows already sit in the
 * catch-all, named in `heldByCatchAll`), drop the partitions past retention that nothing keeps.
 */
export function planMaintenance(
  frame: PartitionFrame,
  blockers: ReadonlyMap<string, PartitionBlockers>,
  heldByCatchAll: ReadonlySet<string> = new Set(),
): PartitionPlan {
  const catchAll = frame.listed.find((p) => p.range === null)?.name ?? 'the catch-all partition';
  const create: PartitionRange[] = [];
  const notCreated: { name: string; reason: string }[] = [];
  for (const r of missingRanges(frame)) {
    const name = frame.nameOf(r);
    if (heldByCatchAll.has(name)) {
      notCreated.push({
        name,
        reason: `${catchAll} holds rows of its range (the maintainer fell behind): move them by hand (docs/partitioning.md)`,
      });
    } else create.push(r);
  }
  const candidates = pastRetention(frame.listed, frame.now, frame.policy);
  return { create, notCreated, ...sortDrops(candidates, blockers, frame.now, frame.policy) };
}

/**
 * The plan after the drops were checked again under the table's lock: a partition that gained a
 * blocker in between is kept instead.
 */
export function recheckDrops(
  plan: PartitionPlan,
  blockers: ReadonlyMap<string, PartitionBlockers>,
  now: Date,
  policy: OutboxPartitionPolicy,
): PartitionPlan {
  const checked = sortDrops(plan.drop, blockers, now, policy);
  return { ...plan, drop: checked.drop, kept: [...plan.kept, ...checked.kept] };
}

/** The report of a plan carried out (or, dry, not). */
export function maintenanceReport(
  plan: PartitionPlan,
  dryRun: boolean,
  nameOf: (range: PartitionRange) => string,
): OutboxPartitionsReport {
  return {
    dryRun,
    skipped: null,
    created: plan.create.map(nameOf),
    dropped: plan.drop.map((p) => p.name),
    kept: plan.kept,
    notCreated: plan.notCreated,
  };
}

/** The report of a run that changed nothing, and why. */
export function skippedReport(dryRun: boolean, skipped: string): OutboxPartitionsReport {
  return { dryRun, skipped, created: [], dropped: [], kept: [], notCreated: [] };
}

/** Each partition as `status` shows it, and the names of the missing ones. */
export function planStatus(
  frame: PartitionFrame,
  blockers: ReadonlyMap<string, PartitionBlockers>,
  counts: ReadonlyMap<string, OutboxPartitionRows> | null,
): { partitions: OutboxPartition[]; missing: string[] } {
  const partitions = frame.listed.map((p): OutboxPartition => {
    const reason = reasonToKeep(p, blockers, frame.now, frame.policy);
    return {
      name: p.name,
      ...rangeOf(p),
      bytes: p.bytes,
      rows: counts?.get(p.name) ?? null,
      droppable: reason === null,
      keptBecause: reason,
    };
  });
  return { partitions, missing: missingRanges(frame).map(frame.nameOf) };
}

// A partition past retention that was not probed is kept: dropping it could lose messages.
function reasonToKeep(
  p: ListedPartition,
  blockers: ReadonlyMap<string, PartitionBlockers>,
  now: Date,
  policy: OutboxPartitionPolicy,
): string | null {
  const probed = blockers.get(p.name);
  if (probed === undefined && keptBecause(rangeOf(p), now, policy, null) === null)
    return 'not checked for the messages it holds';
  return keptBecause(rangeOf(p), now, policy, probed ?? null);
}

function rangeOf(p: ListedPartition): { from: Date | null; to: Date | null } {
  return { from: p.range?.from ?? null, to: p.range?.to ?? null };
}
