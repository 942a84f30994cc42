import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import { partialIndexesDdl } from '../schema/partial-indexes.sql';
import { layoutTag, partitionSuffix, type PartitionRange } from '../partitions/partition-range';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  POSTGRES_TABLE_STORAGE,
  postgresOutboxColumns,
  postgresStatusCheck,
  postgresWaitingIndex,
} from './postgres.sql';

// The time-partitioned outbox table on PostgreSQL (declarative RANGE partitioning on
// created_at). A unique key of a partitioned table must contain the partition column, so the
// plain table's UNIQUE (message_id) becomes a plain index plus the `<table>_ids` guard, which
// idempotent enqueues write in the same statement (docs/partitioning.md says why).

/** The partitioned outbox table, its guard, its default partition and the given ranges. */
export function postgresCreatePartitionedTable(
  n: OutboxTableNames,
  interval: PartitionInterval,
  ranges: readonly PartitionRange[],
): string[] {
  const t = n.table;
  const schema = n.schema === null ? [] : [`CREATE SCHEMA IF NOT EXISTS ${n.quote(n.schema)}`];
  return [
    ...schema,
    `CREATE TABLE IF NOT EXISTS ${t} (
${postgresOutboxColumns()},
  CONSTRAINT ${n.quote(`${n.tableName}_pkey`)} PRIMARY KEY (id, created_at),
  ${postgresStatusCheck(n)}
) PARTITION BY RANGE (created_at)`,
    // The tag says which layout the maintainer may manage; a table without it is left alone.
    `COMMENT ON TABLE ${t} IS '${layoutTag(interval)}'`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_message_id_idx`)} ON ${t} (message_id)`,
    ...partialIndexesDdl(n),
    postgresWaitingIndex(n),
    ...postgresIdsTableDdl(n),
    // Catches rows no partition covers (the maintainer fell behind) instead of failing the
    // business transaction; the maintainer reports rows found there.
    `CREATE TABLE IF NOT EXISTS ${n.qualify(`${n.tableName}_pdefault`)} PARTITION OF ${t} DEFAULT ${POSTGRES_TABLE_STORAGE}`,
    ...ranges.map((r) => postgresCreatePartition(n, r)),
  ];
}

/** The guard of supplied message ids, pruned with the partitions. */
export function postgresIdsTableDdl(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.idsTable} (
  message_id uuid PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now()
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_ids_at_idx`)} ON ${n.idsTable} (created_at)`,
  ];
}

export function postgresCreatePartition(n: OutboxTableNames, r: PartitionRange): string {
  return `CREATE TABLE IF NOT EXISTS ${n.qualify(`${n.tableName}_${partitionSuffix(r.from)}`)} PARTITION OF ${n.table}
  FOR VALUES FROM ('${r.from.toISOString()}') TO ('${r.to.toISOString()}') ${POSTGRES_TABLE_STORAGE}`;
}

/** What the partitioned layout adds beside the table (which drops with its partitions). */
export function postgresDropIdsTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.idsTable}`];
}

/**
 * $1 the table (as to_regclass reads it). What the table is: relkind 'p' when partitioned, its
 * partition key and its comment (the layout tag).
 */
export const POSTGRES_TABLE_LAYOUT = `SELECT c.relkind::text AS kind,
  CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END AS partition_key,
  obj_description(c.oid, 'pg_class') AS comment
FROM pg_class AS c WHERE c.oid = to_regclass($1)`;

/** $1 the table. Its partitions: name, bound expression, whether default, estimated rows, size. */
export const POSTGRES_PARTITIONS = `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound,
  c.relkind::text AS kind, pg_total_relation_size(c.oid)::bigint AS bytes
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1)
ORDER BY c.relname`;

/**
 * What keeps one partition: EXISTS probes of the partial indexes (a waiting row always has a
 * key, so the key index finds it), never a read of the whole partition, since maintain runs
 * them under the lock that lets it drop. $1 delivered retention ms, $2 dead retention ms (null:
 * dead rows are kept).
 */
export function postgresPartitionBlockers(partition: string): string {
  return `SELECT
  EXISTS (SELECT 1 FROM ${partition} WHERE status = 'pending') AS pending,
  EXISTS (SELECT 1 FROM ${partition} WHERE status = 'waiting' AND message_key IS NOT NULL) AS waiting,
  EXISTS (SELECT 1 FROM ${partition} WHERE status = 'pending' AND locked_until >= now()) AS leased,
  EXISTS (SELECT 1 FROM ${partition} WHERE status = 'dead'
    AND ($2::int8 IS NULL OR dead_at >= now() - $2::int8 * interval '1 millisecond')) AS retained_dead,
  EXISTS (SELECT 1 FROM ${partition} WHERE status = 'delivered'
    AND delivered_at >= now() - $1::int8 * interval '1 millisecond') AS recent_delivered`;
}

export function postgresPartitionCounts(partition: string): string {
  return `SELECT status, count(*)::int AS n FROM ${partition} GROUP BY status`;
}

/** $1, $2 a range: whether the catch-all partition holds rows of it (read in full: normally empty). */
export function postgresRowsInRange(catchAll: string): string {
  return `SELECT EXISTS (SELECT 1 FROM ${catchAll} WHERE created_at >= $1::timestamptz AND created_at < $2::timestamptz) AS held`;
}

/** $1, $2 a dropped partition's range: the guard rows of the rows it held. */
export function postgresPruneIds(n: OutboxTableNames): string {
  return `DELETE FROM ${n.idsTable} WHERE created_at >= $1::timestamptz AND created_at < $2::timestamptz`;
}

/** The attempt history of messages no longer in the table (their partition was dropped). */
export function postgresPruneOrphanAttempts(n: OutboxTableNames): string {
  return `DELETE FROM ${n.attemptsTable} AS a
WHERE NOT EXISTS (SELECT 1 FROM ${n.table} AS o WHERE o.message_id = a.message_id)`;
}

/** The column names of the shared definition, in order (for copies that must list them). */
export function postgresOutboxColumnNames(): string[] {
  return postgresOutboxColumns()
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0] ?? '')
    .filter((name) => name !== '');
}

/**
 * Converting a plain table by hand (the outbox refuses to do it: it holds an exclusive lock on
 * the table for the whole copy). The plain table is kept as `<table>_plain`, with only its
 * delivered rows' history in mind: its secondary indexes are dropped and its primary key
 * renamed so that the new table can take their names. Rows not yet delivered are copied with
 * their ids (the claim order); older than the first partition, they land in the catch-all.
 */
export function postgresConversionSteps(n: OutboxTableNames, create: readonly string[]): string[] {
  const plain = `${n.tableName}_plain`;
  const index = (suffix: string): string =>
    n.schema === null
      ? n.quote(`${n.tableName}_${suffix}`)
      : `${n.quote(n.schema)}.${n.quote(`${n.tableName}_${suffix}`)}`;
  const columns = postgresOutboxColumnNames().join(', ');
  return [
    'BEGIN',
    `LOCK TABLE ${n.table} IN ACCESS EXCLUSIVE MODE`,
    `ALTER TABLE ${n.table} RENAME TO ${n.quote(plain)}`,
    // IF EXISTS: a table made before schema step 5 has no waiting index, before step 6 no
    // tenant index (which migrate then makes on the new table under the same name).
    `DROP INDEX IF EXISTS ${['pending_idx', 'key_idx', 'delivered_idx', 'dead_idx', 'waiting_idx', 'tenant_idx'].map(index).join(', ')}`,
    `ALTER TABLE ${n.qualify(plain)} RENAME CONSTRAINT ${n.quote(`${n.tableName}_pkey`)} TO ${n.quote(`${plain}_pkey`)}`,
    ...create,
    `INSERT INTO ${n.table} (${columns}) OVERRIDING SYSTEM VALUE
  SELECT ${columns} FROM ${n.qualify(plain)} WHERE status <> 'delivered'`,
    `INSERT INTO ${n.idsTable} (message_id, created_at)
  SELECT message_id, created_at FROM ${n.qualify(plain)} WHERE status <> 'delivered'`,
    `SELECT setval(pg_get_serial_sequence('${n.table.replace(/'/g, "''")}', 'id'), (SELECT coalesce(max(id), 0) + 1 FROM ${n.qualify(plain)}), false)`,
    'COMMIT',
    `-- later, once its delivered rows are no longer wanted: DROP TABLE ${n.qualify(plain)}`,
  ];
}
