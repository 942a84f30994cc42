import type { PartitionInterval } from '../../options/resolve-partitioning-options';

/** How an outbox table is laid out, as read from the database's catalog. */
export type OutboxTableLayout =
  | { readonly kind: 'missing' }
  | { readonly kind: 'plain' }
  | { readonly kind: 'partitioned'; readonly interval: PartitionInterval }
  /** Partitioned, but not as the outbox makes it: the maintainer leaves it alone. */
  | { readonly kind: 'unrecognised'; readonly problem: string };

/** What the maintainer keeps and makes. */
export interface OutboxPartitionPolicy {
  /** Partitions kept created ahead of the current one. */
  readonly premake: number;
  /** How long delivered rows are kept (`partitioning.retention`). */
  readonly retentionMs: number;
  /** How long dead rows are kept (`cleaner.deadRetentionMs`); null: until an operator acts. */
  readonly deadRetentionMs: number | null;
}

/** Rows of one partition by status. */
export type OutboxPartitionRows = Readonly<
  Record<'pending' | 'waiting' | 'delivered' | 'dead', number>
>;

/** One partition of a partitioned outbox table. */
export interface OutboxPartition {
  readonly name: string;
  /** Its range, [from, to) in UTC; both null for the catch-all partition. */
  readonly from: Date | null;
  readonly to: Date | null;
  /** On disk, indexes included (as the database reports it). */
  readonly bytes: number;
  /** Rows by status (read in full: `status` counts, `maintain` does not). */
  readonly rows: OutboxPartitionRows | null;
  readonly droppable: boolean;
  /** Why it is kept, in words; null when it may be dropped. */
  readonly keptBecause: string | null;
}

/** Where a partitioned outbox table stands. */
export interface OutboxPartitionsStatus {
  /** The quoted table. */
  readonly table: string;
  readonly layout: OutboxTableLayout;
  /** Oldest first; the catch-all partition last. */
  readonly partitions: readonly OutboxPartition[];
  /** Partitions the policy wants ahead that are missing: `maintain` creates them. */
  readonly missing: readonly string[];
  /** The database's clock when it was read. */
  readonly now: Date;
}

/** What one maintainer run did (or, dry, would do). */
export interface OutboxPartitionsReport {
  readonly dryRun: boolean;
  /** Why the run changed nothing (another instance holds the lock, an unknown layout); null when it ran. */
  readonly skipped: string | null;
  readonly created: readonly string[];
  readonly dropped: readonly string[];
  /** Partitions past retention that stay, and why. */
  readonly kept: readonly { readonly name: string; readonly reason: string }[];
  /**
   * Partitions it could not create, and why (PostgreSQL: rows of their range already sit in
   * the catch-all partition, which the maintainer never moves by itself).
   */
  readonly notCreated: readonly { readonly name: string; readonly reason: string }[];
}

/** The partition operations of one database (PostgreSQL, MySQL/MariaDB). */
export interface OutboxPartitionsPort {
  status(policy: OutboxPartitionPolicy, countRows: boolean): Promise<OutboxPartitionsStatus>;
  maintain(policy: OutboxPartitionPolicy, dryRun: boolean): Promise<OutboxPartitionsReport>;
}

/** What keeps a partition past its retention, found by index probes. */
export interface PartitionBlockers {
  readonly pending: boolean;
  readonly leased: boolean;
  readonly waiting: boolean;
  readonly retainedDead: boolean;
  readonly recentDelivered: boolean;
}

/**
 * Why a partition stays, or null when it may be dropped: its whole range must be past the
 * retention, and every row in it final (delivered before the retention, or dead past its own).
 */
export function keptBecause(
  range: { from: Date | null; to: Date | null },
  now: Date,
  policy: OutboxPartitionPolicy,
  blockers: PartitionBlockers | null,
): string | null {
  if (range.to === null) return 'the catch-all partition is never dropped';
  if (range.to.getTime() > now.getTime() - policy.retentionMs) return 'within retention';
  if (blockers === null) return null;
  const reasons = [
    ...(blockers.pending
      ? [
          blockers.leased
            ? 'holds pending messages, some leased (being published)'
            : 'holds pending messages',
        ]
      : []),
    ...(blockers.waiting ? ['holds waiting messages (queued behind their key)'] : []),
    ...(blockers.retainedDead
      ? [
          policy.deadRetentionMs === null
            ? 'holds dead letters, kept until an operator retries or purges them (cleaner.deadRetentionMs is null)'
            : 'holds dead letters within cleaner.deadRetentionMs',
        ]
      : []),
    ...(blockers.recentDelivered ? ['holds messages delivered within the retention'] : []),
  ];
  return reasons.length === 0 ? null : reasons.join(', ');
}

/** Why the maintainer leaves a table alone, in words. */
export function describeLayout(table: string, layout: OutboxTableLayout): string {
  switch (layout.kind) {
    case 'missing':
      return `the table ${table} does not exist`;
    case 'plain':
      return `the table ${table} is not partitioned (docs/partitioning.md: converting a plain table)`;
    case 'unrecognised':
      return `the table ${table} is not laid out as the outbox partitions it (${layout.problem}): the maintainer never touches it`;
    case 'partitioned':
      return `the table ${table} is partitioned by ${layout.interval}`;
  }
}
