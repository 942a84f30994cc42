import type { PartitionInterval } from '../../options/resolve-partitioning-options';
import { layoutTag, partitionSuffix, type PartitionRange } from '../partitions/partition-range';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  MYSQL_TABLE_OPTIONS,
  mysqlKeyLockTableDdl,
  mysqlOutboxColumns,
  mysqlOutboxIndexes,
} from './mysql.sql';
import type { MessageIdLayout } from '../rows/message-id-codec';
import { mysqlMessageIdType } from './mysql-message-ids';

// The time-partitioned outbox table on MySQL 8 / MariaDB: RANGE COLUMNS on created_at (UTC, as
// every timestamp of the table), partitions p<YYYYMMDD> below a catch-all pmax, which the
// maintainer REORGANIZEs to add partitions. As on PostgreSQL, a unique key must contain the
// partition column: the primary key is (id, created_at), and UNIQUE (message_id) becomes a
// plain index plus the `<table>_ids` guard (docs/partitioning.md).

/** `'2026-11-24 00:00:00'`: a DATETIME literal in UTC. */
export function mysqlDatetime(at: Date): string {
  return `'${at.toISOString().slice(0, 19).replace('T', ' ')}'`;
}

function partitionDefinition(r: PartitionRange): string {
  return `PARTITION ${partitionSuffix(r.from)} VALUES LESS THAN (${mysqlDatetime(r.to)})`;
}

export const MYSQL_CATCH_ALL = 'pmax';

/** The partitioned table with the given ranges and pmax, its guard and the key-lock table. */
export function mysqlCreatePartitionedTable(
  n: OutboxTableNames,
  interval: PartitionInterval,
  ranges: readonly PartitionRange[],
  ids: MessageIdLayout = 'binary',
): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
${mysqlOutboxColumns(ids)},
  PRIMARY KEY (id, created_at),
  KEY ${n.quote(`${n.tableName}_message_id_idx`)} (message_id),
  ${mysqlOutboxIndexes(n)}
) ${MYSQL_TABLE_OPTIONS} COMMENT='${layoutTag(interval)}'
PARTITION BY RANGE COLUMNS (created_at) (
  ${[...ranges.map(partitionDefinition), `PARTITION ${MYSQL_CATCH_ALL} VALUES LESS THAN (MAXVALUE)`].join(',\n  ')}
)`,
    `CREATE TABLE IF NOT EXISTS ${n.idsTable} (
  message_id ${mysqlMessageIdType(ids)} NOT NULL PRIMARY KEY,
  created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  KEY ${n.quote(`${n.tableName}_ids_at_idx`)} (created_at)
) ENGINE=InnoDB`,
    ...mysqlKeyLockTableDdl(n),
  ];
}

export function mysqlDropIdsTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.idsTable}`];
}

/** Splits the catch-all into `ranges` and a new catch-all (a copy of pmax's rows: normally none). */
export function mysqlAddPartitions(n: OutboxTableNames, ranges: readonly PartitionRange[]): string {
  return `ALTER TABLE ${n.table} REORGANIZE PARTITION ${MYSQL_CATCH_ALL} INTO (
  ${[...ranges.map(partitionDefinition), `PARTITION ${MYSQL_CATCH_ALL} VALUES LESS THAN (MAXVALUE)`].join(',\n  ')}
)`;
}

/** Params: schema (null: the connection's), table. Whether and how the table is partitioned. */
export const MYSQL_TABLE_LAYOUT = `SELECT t.CREATE_OPTIONS AS options, t.TABLE_COMMENT AS comment,
  (SELECT MAX(p.PARTITION_METHOD) FROM information_schema.PARTITIONS AS p
    WHERE p.TABLE_SCHEMA = t.TABLE_SCHEMA AND p.TABLE_NAME = t.TABLE_NAME) AS method,
  (SELECT MAX(p.PARTITION_EXPRESSION) FROM information_schema.PARTITIONS AS p
    WHERE p.TABLE_SCHEMA = t.TABLE_SCHEMA AND p.TABLE_NAME = t.TABLE_NAME) AS expression
FROM information_schema.TABLES AS t
WHERE t.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND t.TABLE_NAME = ?`;

/** Params: schema, table. Its partitions in order, with their upper bound and size. */
export const MYSQL_PARTITIONS = `SELECT PARTITION_NAME AS name, PARTITION_DESCRIPTION AS bound,
  DATA_LENGTH + INDEX_LENGTH AS bytes
FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL
ORDER BY PARTITION_ORDINAL_POSITION`;

const CUTOFF = 'UTC_TIMESTAMP(6) - INTERVAL ? * 1000 MICROSECOND';

/**
 * What keeps one partition: index probes (the pending and cleaner indexes lead with status),
 * one statement each, since they also run under LOCK TABLES, where a statement may name the
 * locked table only once. Params: none for pending, waiting and leased; retention ms for
 * delivered; dead retention ms twice (or null twice) for dead.
 */
export function mysqlPartitionBlockers(
  n: OutboxTableNames,
  partition: string,
): Record<'pending' | 'waiting' | 'leased' | 'recentDelivered' | 'retainedDead', string> {
  const probe = (where: string): string =>
    `SELECT 1 AS found FROM ${n.table} PARTITION (${partition}) WHERE ${where} LIMIT 1`;
  return {
    pending: probe(`status = 'pending'`),
    waiting: probe(`status = 'waiting'`),
    leased: probe(`status = 'pending' AND locked_until >= UTC_TIMESTAMP(6)`),
    recentDelivered: probe(`status = 'delivered' AND delivered_at >= ${CUTOFF}`),
    retainedDead: probe(`status = 'dead' AND (? IS NULL OR dead_at >= ${CUTOFF})`),
  };
}

export function mysqlPartitionCounts(n: OutboxTableNames, partition: string): string {
  return `SELECT status, COUNT(*) AS n FROM ${n.table} PARTITION (${partition}) GROUP BY status`;
}

/** Params: from, to (DATETIME text). The guard rows of one dropped range. */
export function mysqlPruneIds(n: OutboxTableNames): string {
  return `DELETE FROM ${n.idsTable} WHERE created_at >= ? AND created_at < ?`;
}

/** The attempt history of messages no longer in the table (their partition was dropped). */
export function mysqlPruneOrphanAttempts(n: OutboxTableNames): string {
  return `DELETE a FROM ${n.attemptsTable} AS a
LEFT JOIN ${n.table} AS o ON o.message_id = a.message_id
WHERE o.id IS NULL`;
}

/**
 * Converting a plain table by hand (refused by the outbox: it copies the rows not yet delivered
 * while the app waits). The plain table is kept as `<table>_plain`; rows keep their ids, and
 * InnoDB continues the auto-increment after the largest id copied.
 */
export function mysqlConversionSteps(n: OutboxTableNames, create: readonly string[]): string[] {
  const plain = n.qualify(`${n.tableName}_plain`);
  const columns = mysqlOutboxColumns()
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0] ?? '')
    .filter((name) => name !== '')
    .join(', ');
  // The new table stores binary ids; a plain table made before 0.3 has them as CHAR(36).
  const id = `IF(LENGTH(message_id) = 36, UNHEX(REPLACE(message_id, '-', '')), message_id)`;
  const values = columns.replace('message_id', id);
  return [
    `RENAME TABLE ${n.table} TO ${plain}`,
    ...create,
    `INSERT INTO ${n.table} (${columns})
  SELECT ${values} FROM ${plain} WHERE status <> 'delivered' ORDER BY id`,
    `INSERT INTO ${n.idsTable} (message_id, created_at)
  SELECT ${id}, created_at FROM ${plain} WHERE status <> 'delivered'`,
    `-- later, once its delivered rows are no longer wanted: DROP TABLE ${plain}`,
  ];
}
