import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import { hashKey } from '../rows/outbox-row.mapper';
import type {
  OutboxPartitionPolicy,
  OutboxPartitionRows,
  OutboxTableLayout,
  PartitionBlockers,
} from '../ports/outbox-partitions.port';
import type { StatementRunner } from '../outbox-database';
import type { ListedPartition } from '../partitions/partition-plan';
import { PartitionRunner } from '../partitions/partition-runner';
import type { PartitionSql } from '../partitions/partition-sql';
import {
  intervalOfTag,
  partitionSuffix,
  rangeOfPartition,
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

const BOUND =
  /^FOR VALUES FROM \('(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\+00'\) TO \('(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\+00'\)$/;
const utc = (text: string): number => Date.parse(`${text.replace(' ', 'T')}Z`);

/** The partitions of the table on PostgreSQL, and the maintainer that keeps them. */
export class PostgresPartitions extends PartitionRunner {
  constructor(sql: SqlPort, n: OutboxTableNames) {
    super(sql, new PostgresPartitionSql(n));
  }
}

/** The statements the partition runner carries out on PostgreSQL. */
class PostgresPartitionSql implements PartitionSql {
  readonly table: string;
  readonly placement = 'any-gap';
  private readonly lock: [number, number];

  constructor(private readonly n: OutboxTableNames) {
    this.table = n.table;
    this.lock = [hashKey('nestjs-outbox-partitions'), hashKey(`${n.schema ?? ''}.${n.tableName}`)];
  }

  nameOf(range: PartitionRange): string {
    return `${this.n.tableName}_${partitionSuffix(range.from)}`;
  }

  async begin(tx: SqlRunner): Promise<Date> {
    // UTC, so partition bounds read back as written; a short lock wait (LOCK_TIMEOUT_MS).
    const [row] = await rows<{ now: Date | string }>(
      tx,
      `SELECT set_config('TimeZone', 'UTC', true), set_config('lock_timeout', $1, true), now() AS now`,
      [String(LOCK_TIMEOUT_MS)],
    );
    return new Date(row?.now ?? Date.now());
  }

  layout(tx: SqlRunner): Promise<OutboxTableLayout> {
    return postgresTableLayout((s, p) => rows(tx, s, p), this.n);
  }

  async list(tx: SqlRunner, interval: PartitionInterval): Promise<ListedPartition[] | string> {
    const found = await rows<{ name: string; bound: string; bytes: string | number }>(
      tx,
      POSTGRES_PARTITIONS,
      [this.n.table],
    );
    const listed: ListedPartition[] = [];
    for (const p of found) {
      if (p.bound === 'DEFAULT' && p.name === `${this.n.tableName}_pdefault`) {
        listed.push({ name: p.name, range: null, bytes: Number(p.bytes) });
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
      listed.push({ name: p.name, range: expected, bytes: Number(p.bytes) });
    }
    return listed.sort(
      (a, b) => (a.range?.from.getTime() ?? Infinity) - (b.range?.from.getTime() ?? Infinity),
    );
  }

  async blockers(
    tx: SqlRunner,
    p: ListedPartition,
    policy: OutboxPartitionPolicy,
  ): Promise<PartitionBlockers> {
    const [row] = await rows<
      Record<'pending' | 'waiting' | 'leased' | 'retained_dead' | 'recent_delivered', boolean>
    >(tx, postgresPartitionBlockers(this.n.qualify(p.name)), [
      policy.retentionMs,
      policy.deadRetentionMs,
    ]);
    return {
      pending: row?.pending ?? true,
      waiting: row?.waiting ?? true,
      leased: row?.leased ?? true,
      retainedDead: row?.retained_dead ?? true,
      recentDelivered: row?.recent_delivered ?? true,
    };
  }

  async count(tx: SqlRunner, p: ListedPartition): Promise<OutboxPartitionRows> {
    const counts = { pending: 0, waiting: 0, delivered: 0, dead: 0 };
    for (const r of await rows<{ status: keyof typeof counts; n: number }>(
      tx,
      postgresPartitionCounts(this.n.qualify(p.name)),
    )) {
      counts[r.status] = Number(r.n);
    }
    return counts;
  }

  // PostgreSQL refuses a partition whose rows the default partition holds: the plan reports
  // such a range instead of failing the whole run on every run.
  async catchAllHolds(
    tx: SqlRunner,
    catchAll: ListedPartition,
    range: PartitionRange,
  ): Promise<boolean> {
    const [held] = await rows<{ held: boolean }>(
      tx,
      postgresRowsInRange(this.n.qualify(catchAll.name)),
      [range.from.toISOString(), range.to.toISOString()],
    );
    return held?.held === true;
  }

  async exclusively<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T | null> {
    const [got] = await rows<{ got: boolean }>(
      tx,
      `SELECT pg_try_advisory_xact_lock($1::int4, $2::int4) AS got`,
      this.lock,
    );
    return got?.got === true ? work() : null;
  }

  // The lock wait is set for the whole transaction by begin.
  altering<T>(_tx: SqlRunner, work: () => Promise<T>): Promise<T> {
    return work();
  }

  async create(tx: SqlRunner, ranges: readonly PartitionRange[]): Promise<void> {
    for (const r of ranges) await tx.query(postgresCreatePartition(this.n, r));
  }

  async lockedForDrop<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T> {
    await tx.query(`LOCK TABLE ${this.n.table} IN ACCESS EXCLUSIVE MODE`);
    return work();
  }

  async drop(tx: SqlRunner, partitions: readonly ListedPartition[]): Promise<void> {
    for (const p of partitions) await tx.query(`DROP TABLE ${this.n.qualify(p.name)}`);
  }

  async pruneDropped(sql: SqlPort, ranges: readonly PartitionRange[]): Promise<void> {
    for (const r of ranges) {
      await sql.query(postgresPruneIds(this.n), [r.from.toISOString(), r.to.toISOString()]);
    }
    await sql.query(postgresPruneOrphanAttempts(this.n));
  }
}

async function rows<R>(tx: SqlRunner, sql: string, params: readonly unknown[] = []): Promise<R[]> {
  return (await tx.query<R>(sql, params)).rows;
}
