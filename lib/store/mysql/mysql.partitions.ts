import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import type { StatementRunner } from '../outbox-database';
import type {
  OutboxPartitionPolicy,
  OutboxPartitionRows,
  OutboxTableLayout,
  PartitionBlockers,
} from '../ports/outbox-partitions.port';
import { hashKey } from '../rows/outbox-row.mapper';
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

/** The partitions of the table on MySQL/MariaDB, and the maintainer that keeps them. */
export class MysqlPartitions extends PartitionRunner {
  constructor(sql: SqlPort, n: OutboxTableNames) {
    super(sql, new MysqlPartitionSql(n));
  }
}

/** The statements the partition runner carries out on MySQL/MariaDB. */
class MysqlPartitionSql implements PartitionSql {
  readonly table: string;
  // Partitions can only be added above the last one (REORGANIZE of pmax).
  readonly placement = 'above-last';
  private readonly lockName: string;

  constructor(private readonly n: OutboxTableNames) {
    this.table = n.table;
    // GET_LOCK names are at most 64 characters.
    this.lockName = `nestjs-outbox-partitions:${hashKey(`${n.schema ?? ''}.${n.tableName}`)}`;
  }

  nameOf(range: PartitionRange): string {
    return partitionSuffix(range.from);
  }

  /** The database's clock (UTC, as the table's timestamps). */
  async begin(tx: SqlRunner): Promise<Date> {
    const [row] = await rows<{ now: string }>(
      tx,
      `SELECT DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%fZ') AS now`,
    );
    return new Date(Date.parse((row?.now ?? '').replace(/(\.\d{3})\d*Z$/, '$1Z')) || Date.now());
  }

  layout(tx: SqlRunner): Promise<OutboxTableLayout> {
    return mysqlTableLayout((s, p) => rows(tx, s, p), this.n);
  }

  async list(tx: SqlRunner, interval: PartitionInterval): Promise<ListedPartition[] | string> {
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

  async blockers(
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

  async count(tx: SqlRunner, p: ListedPartition): Promise<OutboxPartitionRows> {
    const counts = { pending: 0, waiting: 0, delivered: 0, dead: 0 };
    for (const r of await rows<{ status: keyof typeof counts; n: number | string }>(
      tx,
      mysqlPartitionCounts(this.n, p.name),
    )) {
      counts[r.status] = Number(r.n);
    }
    return counts;
  }

  async exclusively<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T | null> {
    const [got] = await rows<{ got: number | string | null }>(tx, 'SELECT GET_LOCK(?, 0) AS got', [
      this.lockName,
    ]);
    if (Number(got?.got) !== 1) return null;
    try {
      return await work();
    } finally {
      await tx.query('SELECT RELEASE_LOCK(?)', [this.lockName]);
    }
  }

  async altering<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T> {
    const [wait] = await rows<{ seconds: number | string }>(
      tx,
      'SELECT @@SESSION.lock_wait_timeout AS seconds',
    );
    await tx.query(`SET SESSION lock_wait_timeout = ${LOCK_WAIT_SECONDS}`);
    try {
      return await work();
    } finally {
      await tx.query(
        `SET SESSION lock_wait_timeout = ${Math.max(1, Number(wait?.seconds ?? 31_536_000))}`,
      );
    }
  }

  async create(tx: SqlRunner, ranges: readonly PartitionRange[]): Promise<void> {
    await tx.query(mysqlAddPartitions(this.n, ranges));
  }

  async lockedForDrop<T>(tx: SqlRunner, work: () => Promise<T>): Promise<T> {
    await tx.query(`LOCK TABLES ${this.n.table} WRITE`);
    try {
      return await work();
    } finally {
      await tx.query('UNLOCK TABLES');
    }
  }

  async drop(tx: SqlRunner, partitions: readonly ListedPartition[]): Promise<void> {
    await tx.query(
      `ALTER TABLE ${this.n.table} DROP PARTITION ${partitions.map((p) => p.name).join(', ')}`,
    );
  }

  async pruneDropped(sql: SqlPort, ranges: readonly PartitionRange[]): Promise<void> {
    for (const r of ranges) {
      await sql.query(mysqlPruneIds(this.n), [
        mysqlDatetime(r.from).slice(1, -1),
        mysqlDatetime(r.to).slice(1, -1),
      ]);
    }
    await sql.query(mysqlPruneOrphanAttempts(this.n));
  }
}

async function rows<R>(tx: SqlRunner, sql: string, params: readonly unknown[] = []): Promise<R[]> {
  return (await tx.query<R>(sql, params)).rows;
}
