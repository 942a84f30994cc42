import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import type { StatementRunner } from '../outbox-database';
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
import { hashKey } from '../rows/outbox-row.mapper';
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
  MYSQL_CATCH_ALL,
  MYSQL_PARTITIONS,
  MYSQL_TABLE_LAYOUT,
  mysqlAddPartitions,
  mysqlDatetime,
  mysqlPartitionBlockers,
  mysqlPartitionCounts,
  mysqlPruneIds,
  mysqlPruneOrphanAttempts,
} from './mysql.partition-sql';

/**
 * How long maintain waits for the table's metadata lock (to add or drop partitions): a queued
 * DDL holds up every statement on the table behind it, so it gives up soon and the next run
 * tries again.
 */
const LOCK_WAIT_SECONDS = 2;

/** How the table is laid out: plain, partitioned as the outbox makes it, or neither. */
export async function mysqlTableLayout(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<OutboxTableLayout> {
  const [row] = (await run(MYSQL_TABLE_LAYOUT, [n.schema, n.tableName])) as {
    options: string | null;
    comment: string | null;
    method: string | null;
    expression: string | null;
  }[];
  if (row === undefined) return { kind: 'missing' };
  if (!(row.options ?? '').includes('partitioned')) return { kind: 'plain' };
  const interval = intervalOfTag(row.comment);
  if (
    row.method !== 'RANGE COLUMNS' ||
    row.expression?.replace(/`/g, '') !== 'created_at' ||
    interval === undefined
  ) {
    return {
      kind: 'unrecognised',
      problem: `it is partitioned by ${row.method ?? '?'} (${row.expression ?? '?'}) with the comment ${JSON.stringify(row.comment)}, not as the outbox partitions it`,
    };
  }
  return { kind: 'partitioned', interval };
}

interface ListedPartition {
  readonly name: string;
  readonly range: PartitionRange | null;
  readonly bytes: number;
}

/** The partitions of the table on MySQL/MariaDB, and the maintainer that keeps them. */
export class MysqlPartitions implements OutboxPartitionsPort {
  private readonly lockName: string;

  constructor(
    private readonly sql: SqlPort,
    private readonly n: OutboxTableNames,
  ) {
    // GET_LOCK names are at most 64 characters.
    this.lockName = `nestjs-outbox-partitions:${hashKey(`${n.schema ?? ''}.${n.tableName}`)}`;
  }

  status(policy: OutboxPartitionPolicy, countRows: boolean): Promise<OutboxPartitionsStatus> {
    return this.sql.transaction(async (tx) => {
      const now = await this.now(tx);
      const layout = await mysqlTableLayout((s, p) => rows(tx, s, p), this.n);
      const empty = { table: this.n.table, partitions: [], missing: [], now };
      if (layout.kind !== 'partitioned') return { ...empty, layout };
      const listed = await this.list(tx, layout.interval);
      if (typeof listed === 'string')
        return { ...empty, layout: { kind: 'unrecognised', problem: listed } };
      const partitions: OutboxPartition[] = [];
      for (const p of listed) {
        const range = rangeOf(p);
        const past = keptBecause(range, now, policy, null) === null;
        const reason = keptBecause(
          range,
          now,
          policy,
          past ? await this.blockers(tx, p, policy) : null,
        );
        partitions.push({
          name: p.name,
          ...range,
          bytes: p.bytes,
          rows: countRows ? await this.count(tx, p) : null,
          droppable: reason === null,
          keptBecause: reason,
        });
      }
      const missing = this.missing(listed, layout.interval, now, policy).map((r) =>
        partitionSuffix(r.from),
      );
      return { ...empty, layout, partitions, missing };
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
    let dropped: ListedPartition[] = [];
    return this.sql
      .transaction(async (tx) => {
        // One maintainer at a time; a second one skips its run instead of waiting behind it.
        const [got] = await rows<{ got: number | string | null }>(
          tx,
          'SELECT GET_LOCK(?, 0) AS got',
          [this.lockName],
        );
        if (Number(got?.got) !== 1)
          return skip(`another instance is maintaining the partitions of ${this.n.table}`);
        try {
          return await this.maintainLocked(tx, policy, dryRun, skip, (list) => (dropped = list));
        } finally {
          await tx.query('SELECT RELEASE_LOCK(?)', [this.lockName]);
        }
      })
      .then(async (report) => {
        // After the drop: the guard rows and the attempt history of the dropped rows.
        for (const p of dropped) {
          if (p.range !== null) {
            await this.sql.query(mysqlPruneIds(this.n), [
              mysqlDatetime(p.range.from).slice(1, -1),
              mysqlDatetime(p.range.to).slice(1, -1),
            ]);
          }
        }
        if (dropped.length > 0) await this.sql.query(mysqlPruneOrphanAttempts(this.n));
        return report;
      });
  }

  private async maintainLocked(
    tx: SqlRunner,
    policy: OutboxPartitionPolicy,
    dryRun: boolean,
    skip: (why: string) => OutboxPartitionsReport,
    onDropped: (list: ListedPartition[]) => void,
  ): Promise<OutboxPartitionsReport> {
    const now = await this.now(tx);
    const layout = await mysqlTableLayout((s, p) => rows(tx, s, p), this.n);
    if (layout.kind !== 'partitioned') return skip(describeLayout(this.n.table, layout));
    const listed = await this.list(tx, layout.interval);
    if (typeof listed === 'string') return skip(listed);
    const missing = this.missing(listed, layout.interval, now, policy);
    const kept: { name: string; reason: string }[] = [];
    const droppable = async (): Promise<ListedPartition[]> => {
      kept.length = 0;
      const found: ListedPartition[] = [];
      for (const p of listed) {
        if (keptBecause(rangeOf(p), now, policy, null) !== null) continue;
        const reason = keptBecause(rangeOf(p), now, policy, await this.blockers(tx, p, policy));
        if (reason === null) found.push(p);
        else kept.push({ name: p.name, reason });
      }
      return found;
    };
    let drop = await droppable();
    const created = missing.map((r) => partitionSuffix(r.from));
    if (dryRun)
      return {
        dryRun,
        skipped: null,
        created,
        dropped: drop.map((p) => p.name),
        kept,
        notCreated: [],
      };
    const [wait] = await rows<{ seconds: number | string }>(
      tx,
      'SELECT @@SESSION.lock_wait_timeout AS seconds',
    );
    await tx.query(`SET SESSION lock_wait_timeout = ${LOCK_WAIT_SECONDS}`);
    try {
      if (missing.length > 0) await tx.query(mysqlAddPartitions(this.n, missing));
      if (drop.length > 0) {
        // Under the table's write lock nothing can change a row of the partition between the
        // check and the drop (an operator's retry, a resequenced dead letter): check again.
        await tx.query(`LOCK TABLES ${this.n.table} WRITE`);
        try {
          drop = await droppable();
          if (drop.length > 0) {
            await tx.query(
              `ALTER TABLE ${this.n.table} DROP PARTITION ${drop.map((p) => p.name).join(', ')}`,
            );
          }
        } finally {
          await tx.query('UNLOCK TABLES');
        }
      }
    } finally {
      await tx.query(
        `SET SESSION lock_wait_timeout = ${Math.max(1, Number(wait?.seconds ?? 31_536_000))}`,
      );
    }
    onDropped(drop);
    return {
      dryRun,
      skipped: null,
      created,
      dropped: drop.map((p) => p.name),
      kept,
      notCreated: [],
    };
  }

  /** The database's clock (UTC, as the table's timestamps). */
  private async now(tx: SqlRunner): Promise<Date> {
    const [row] = await rows<{ now: string }>(
      tx,
      `SELECT DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%fZ') AS now`,
    );
    return new Date(Date.parse((row?.now ?? '').replace(/(\.\d{3})\d*Z$/, '$1Z')) || Date.now());
  }

  /** The partitions, or what keeps the maintainer from recognising them. */
  private async list(
    tx: SqlRunner,
    interval: PartitionInterval,
  ): Promise<ListedPartition[] | string> {
    const found = await rows<{ name: string; bound: string; bytes: string | number }>(
      tx,
      MYSQL_PARTITIONS,
      [this.n.schema, this.n.tableName],
    );
    const listed: ListedPartition[] = [];
    for (const [i, p] of found.entries()) {
      if (p.name === MYSQL_CATCH_ALL && p.bound === 'MAXVALUE' && i === found.length - 1) {
        listed.push({ name: p.name, range: null, bytes: Number(p.bytes) });
        continue;
      }
      const expected = rangeOfPartition('', `_${p.name}`, interval);
      if (expected === undefined || p.bound !== mysqlDatetime(expected.to)) {
        return `the partition ${p.name} (below ${p.bound}) is not one the outbox makes for a ${interval} interval: the maintainer leaves the table alone`;
      }
      listed.push({ name: p.name, range: expected, bytes: Number(p.bytes) });
    }
    if (listed.at(-1)?.name !== MYSQL_CATCH_ALL) {
      return `the table has no catch-all partition ${MYSQL_CATCH_ALL} (VALUES LESS THAN MAXVALUE) to add partitions from: the maintainer leaves the table alone`;
    }
    return listed;
  }

  private missing(
    listed: readonly ListedPartition[],
    interval: PartitionInterval,
    now: Date,
    policy: OutboxPartitionPolicy,
  ): PartitionRange[] {
    // Partitions can only be added above the last one (REORGANIZE of pmax).
    const last = listed.reduce(
      (max, p) => Math.max(max, p.range?.to.getTime() ?? -Infinity),
      -Infinity,
    );
    return rangesAhead(interval, now, policy.premake).filter((r) => r.from.getTime() >= last);
  }

  private async blockers(
    tx: SqlRunner,
    p: ListedPartition,
    policy: OutboxPartitionPolicy,
  ): Promise<PartitionBlockers> {
    const probes = mysqlPartitionBlockers(this.n, p.name);
    const found = async (sql: string, params: readonly unknown[] = []): Promise<boolean> =>
      (await rows(tx, sql, params)).length > 0;
    const dead = policy.deadRetentionMs;
    return {
      pending: await found(probes.pending),
      waiting: await found(probes.waiting),
      leased: await found(probes.leased),
      recentDelivered: await found(probes.recentDelivered, [policy.retentionMs]),
      retainedDead: await found(probes.retainedDead, [dead, dead]),
    };
  }

  private async count(tx: SqlRunner, p: ListedPartition): Promise<OutboxPartitionRows> {
    const counts = { pending: 0, waiting: 0, delivered: 0, dead: 0 };
    for (const r of await rows<{ status: keyof typeof counts; n: number | string }>(
      tx,
      mysqlPartitionCounts(this.n, p.name),
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
