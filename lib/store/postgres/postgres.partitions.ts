import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import { hashKey } from '../rows/outbox-row.mapper';
import {
  describeLayout,
  keptBecause,
  type OutboxPartition,
  type OutboxPartitionPolicy,
  type OutboxPartitionRows,
  type OutboxPartitionsPort,
  type OutboxPartitionsReport,
  type OutboxPartitionsStatus,
  type OutboxTableLayout,
  type PartitionBlockers,
} from '../ports/outbox-partitions.port';
import type { StatementRunner } from '../outbox-database';
import {
  intervalOfTag,
  partitionSuffix,
  rangeOfPartition,
  rangesAhead,
  type PartitionRange,
} from '../partitions/partition-range';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort, SqlRunner } from '../ports/sql-port';
import {
  POSTGRES_PARTITIONS,
  POSTGRES_TABLE_LAYOUT,
  postgresCreatePartition,
  postgresPartitionBlockers,
  postgresPartitionCounts,
  postgresPruneIds,
  postgresPruneOrphanAttempts,
  postgresRowsInRange,
} from './postgres.partition-sql';

/**
 * How long maintain waits for the table's ACCESS EXCLUSIVE lock (to create or drop a
 * partition): a queued request holds up every enqueue and claim behind it, so it gives up soon
 * and the next run tries again.
 */
const LOCK_TIMEOUT_MS = 2_000;

/** How the table is laid out: plain, partitioned as the outbox makes it, or neither. */
export async function postgresTableLayout(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<OutboxTableLayout> {
  const [row] = (await run(POSTGRES_TABLE_LAYOUT, [n.table])) as {
    kind: string;
    partition_key: string | null;
    comment: string | null;
  }[];
  if (row === undefined) return { kind: 'missing' };
  if (row.kind === 'r') return { kind: 'plain' };
  if (row.kind !== 'p')
    return { kind: 'unrecognised', problem: `it is not a table (relkind ${row.kind})` };
  const interval = intervalOfTag(row.comment);
  if (row.partition_key !== 'RANGE (created_at)' || interval === undefined) {
    return {
      kind: 'unrecognised',
      problem: `it is partitioned by ${row.partition_key ?? '?'} with the comment ${JSON.stringify(row.comment)}, not as the outbox partitions it`,
    };
  }
  return { kind: 'partitioned', interval };
}

interface ListedPartition {
  readonly name: string;
  readonly quoted: string;
  readonly range: PartitionRange | null;
  readonly bytes: number;
}

const BOUND =
  /^FOR VALUES FROM \('(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\+00'\) TO \('(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\+00'\)$/;
const utc = (text: string): number => Date.parse(`${text.replace(' ', 'T')}Z`);

/** The partitions of the table on PostgreSQL, and the maintainer that keeps them. */
export class PostgresPartitions implements OutboxPartitionsPort {
  private readonly lock: [number, number];

  constructor(
    private readonly sql: SqlPort,
    private readonly n: OutboxTableNames,
  ) {
    this.lock = [hashKey('nestjs-outbox-partitions'), hashKey(`${n.schema ?? ''}.${n.tableName}`)];
  }

  status(policy: OutboxPartitionPolicy, countRows: boolean): Promise<OutboxPartitionsStatus> {
    return this.sql.transaction(async (tx) => {
      const now = await this.begin(tx);
      const layout = await postgresTableLayout((s, p) => rows(tx, s, p), this.n);
      if (layout.kind !== 'partitioned') {
        return { table: this.n.table, layout, partitions: [], missing: [], now };
      }
      const listed = await this.list(tx, layout.interval);
      if (typeof listed === 'string') {
        return {
          table: this.n.table,
          layout: { kind: 'unrecognised', problem: listed },
          partitions: [],
          missing: [],
          now,
        };
      }
      const partitions: OutboxPartition[] = [];
      for (const p of listed) {
        const past = keptBecause(rangeOf(p), now, policy, null) === null;
        const reason = keptBecause(
          rangeOf(p),
          now,
          policy,
          past ? await this.blockers(tx, p, policy) : null,
        );
        partitions.push({
          name: p.name,
          ...rangeOf(p),
          bytes: p.bytes,
          rows: countRows ? await this.count(tx, p) : null,
          droppable: reason === null,
          keptBecause: reason,
        });
      }
      return {
        table: this.n.table,
        layout,
        partitions,
        missing: this.missing(listed, layout.interval, now, policy),
        now,
      };
    });
  }

  maintain(policy: OutboxPartitionPolicy, dryRun: boolean): Promise<OutboxPartitionsReport> {
    const skip = (skipped: string): OutboxPartitionsReport => ({
      dryRun,
      skipped,
      created: [],
      dropped: [],
      kept: [],
      notCreated: [],
    });
    return this.sql
      .transaction(async (tx) => {
        const now = await this.begin(tx);
        // One maintainer at a time; a second one skips its run instead of waiting behind it.
        const [got] = await rows<{ got: boolean }>(
          tx,
          `SELECT pg_try_advisory_xact_lock($1::int4, $2::int4) AS got`,
          this.lock,
        );
        if (got?.got !== true)
          return {
            report: skip(`another instance is maintaining the partitions of ${this.n.table}`),
            dropped: [],
          };
        const layout = await postgresTableLayout((s, p) => rows(tx, s, p), this.n);
        if (layout.kind !== 'partitioned') {
          return { report: skip(describeLayout(this.n.table, layout)), dropped: [] };
        }
        const listed = await this.list(tx, layout.interval);
        if (typeof listed === 'string') return { report: skip(listed), dropped: [] };
        const missing = rangesAhead(layout.interval, now, policy.premake).filter(
          (r) => !listed.some((p) => p.range?.from.getTime() === r.from.getTime()),
        );
        const candidates = listed.filter(
          (p) => keptBecause(rangeOf(p), now, policy, null) === null,
        );
        const kept: { name: string; reason: string }[] = [];
        let droppable: ListedPartition[] = [];
        for (const p of candidates) {
          const reason = keptBecause(rangeOf(p), now, policy, await this.blockers(tx, p, policy));
          if (reason === null) droppable.push(p);
          else kept.push({ name: p.name, reason });
        }
        // A range whose rows already sit in the catch-all cannot be created (PostgreSQL refuses
        // a partition whose rows the default partition holds): say so instead of failing the
        // whole run on every run.
        const catchAll = listed.find((p) => p.range === null);
        const creatable: PartitionRange[] = [];
        const notCreated: { name: string; reason: string }[] = [];
        for (const r of missing) {
          const name = `${this.n.tableName}_${partitionSuffix(r.from)}`;
          const [held] =
            catchAll === undefined
              ? []
              : await rows<{ held: boolean }>(tx, postgresRowsInRange(catchAll.quoted), [
                  r.from.toISOString(),
                  r.to.toISOString(),
                ]);
          if (held?.held === true) {
            notCreated.push({
              name,
              reason: `${catchAll?.name ?? 'the catch-all partition'} holds rows of its range (the maintainer fell behind): move them by hand (docs/partitioning.md)`,
            });
          } else creatable.push(r);
        }
        const created = creatable.map((r) => `${this.n.tableName}_${partitionSuffix(r.from)}`);
        const report = (dropped: readonly ListedPartition[]) => ({
          dryRun,
          skipped: null,
          created,
          dropped: dropped.map((p) => p.name),
          kept,
          notCreated,
        });
        if (dryRun) return { report: report(droppable), dropped: [] };
        for (const r of creatable) await tx.query(postgresCreatePartition(this.n, r));
        if (droppable.length > 0) {
          // Under the table's exclusive lock nothing can change a row of the partition between
          // the check and the drop (an operator's retry, a resequenced dead letter): check again.
          await tx.query(`LOCK TABLE ${this.n.table} IN ACCESS EXCLUSIVE MODE`);
          const still: ListedPartition[] = [];
          for (const p of droppable) {
            const reason = keptBecause(rangeOf(p), now, policy, await this.blockers(tx, p, policy));
            if (reason === null) still.push(p);
            else kept.push({ name: p.name, reason });
          }
          droppable = still;
          for (const p of droppable) await tx.query(`DROP TABLE ${p.quoted}`);
        }
        return { report: report(droppable), dropped: droppable };
      })
      .then(async ({ report, dropped }) => {
        // After the commit, outside the lock: the guard rows and the attempt history of the
        // dropped rows. Until then they only keep dropped ids from being enqueued again.
        for (const p of dropped) {
          if (p.range !== null)
            await this.sql.query(postgresPruneIds(this.n), [
              p.range.from.toISOString(),
              p.range.to.toISOString(),
            ]);
        }
        if (dropped.length > 0) await this.sql.query(postgresPruneOrphanAttempts(this.n));
        return report;
      });
  }

  /** Settings of every partition transaction; answers the database's clock. */
  private async begin(tx: SqlRunner): Promise<Date> {
    // UTC, so partition bounds read back as written; a short lock wait (LOCK_TIMEOUT_MS).
    const [row] = await rows<{ now: Date | string }>(
      tx,
      `SELECT set_config('TimeZone', 'UTC', true), set_config('lock_timeout', $1, true), now() AS now`,
      [String(LOCK_TIMEOUT_MS)],
    );
    return new Date(row?.now ?? Date.now());
  }

  /** The partitions, or what keeps the maintainer from recognising them. */
  private async list(
    tx: SqlRunner,
    interval: PartitionInterval,
  ): Promise<ListedPartition[] | string> {
    const found = await rows<{ name: string; bound: string; bytes: string | number }>(
      tx,
      POSTGRES_PARTITIONS,
      [this.n.table],
    );
    const listed: ListedPartition[] = [];
    for (const p of found) {
      const quoted = this.n.qualify(p.name);
      if (p.bound === 'DEFAULT' && p.name === `${this.n.tableName}_pdefault`) {
        listed.push({ name: p.name, quoted, range: null, bytes: Number(p.bytes) });
        continue;
      }
      const expected = rangeOfPartition(this.n.tableName, p.name, interval);
      const match = BOUND.exec(p.bound);
      if (
        expected === undefined ||
        match === null ||
        utc(match[1] ?? '') !== expected.from.getTime() ||
        utc(match[2] ?? '') !== expected.to.getTime()
      ) {
        return `the partition ${p.name} (${p.bound}) is not one the outbox makes for a ${interval} interval: the maintainer leaves the table alone`;
      }
      listed.push({ name: p.name, quoted, range: expected, bytes: Number(p.bytes) });
    }
    return listed.sort(
      (a, b) => (a.range?.from.getTime() ?? Infinity) - (b.range?.from.getTime() ?? Infinity),
    );
  }

  private missing(
    listed: readonly ListedPartition[],
    interval: PartitionInterval,
    now: Date,
    policy: OutboxPartitionPolicy,
  ): string[] {
    return rangesAhead(interval, now, policy.premake)
      .filter((r) => !listed.some((p) => p.range?.from.getTime() === r.from.getTime()))
      .map((r) => `${this.n.tableName}_${partitionSuffix(r.from)}`);
  }

  private async blockers(
    tx: SqlRunner,
    p: ListedPartition,
    policy: OutboxPartitionPolicy,
  ): Promise<PartitionBlockers> {
    const [row] = await rows<
      Record<'pending' | 'waiting' | 'leased' | 'retained_dead' | 'recent_delivered', boolean>
    >(tx, postgresPartitionBlockers(p.quoted), [policy.retentionMs, policy.deadRetentionMs]);
    return {
      pending: row?.pending ?? true,
      waiting: row?.waiting ?? true,
      leased: row?.leased ?? true,
      retainedDead: row?.retained_dead ?? true,
      recentDelivered: row?.recent_delivered ?? true,
    };
  }

  private async count(tx: SqlRunner, p: ListedPartition): Promise<OutboxPartitionRows> {
    const counts = { pending: 0, waiting: 0, delivered: 0, dead: 0 };
    for (const r of await rows<{ status: keyof typeof counts; n: number }>(
      tx,
      postgresPartitionCounts(p.quoted),
    )) {
      counts[r.status] = Number(r.n);
    }
    return counts;
  }
}

function rangeOf(p: ListedPartition): { from: Date | null; to: Date | null } {
  return { from: p.range?.from ?? null, to: p.range?.to ?? null };
}

async function rows<R>(tx: SqlRunner, sql: string, params: readonly unknown[] = []): Promise<R[]> {
  return (await tx.query<R>(sql, params)).rows;
}
