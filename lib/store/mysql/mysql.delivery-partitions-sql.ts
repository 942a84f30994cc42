import type { OutboxTableNames } from '../../internal/sql-identifier';
import { someInChain } from '../../internal/error-chain';
import type { SchemaPartSql } from '../outbox-database';
import type { SqlRunner } from '../ports/sql-port';
import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import { messageIdCodecOf } from '../schema/message-id-layout';
import { DELIVERY_PARTITIONS } from '../shared-sql/delivery-partitions';
import { mysqlOwnerLockNameOf } from '../shared-sql/owner-leases';
import { mysqlMessageIdLayout } from './mysql-message-ids';
import { MYSQL_TABLE_OPTIONS, blockingStatuses, placeholders, rowsOf } from './mysql.sql';
import { blockingCondition, deadRowBlocks } from '../shared-sql/dead-blocking';
import {
  mysqlPartitionColumn,
  mysqlPartitionDrops,
  mysqlPartitionIndex,
  mysqlPartitionIndexName,
  mysqlPartitionPresent,
} from './mysql-partition-column';

// Partitioned delivery on MySQL/MariaDB (schema step 9): each row's partition of the key space,
// the live dispatchers and the partitions' owners, as on PostgreSQL
// (postgres.delivery-partitions-sql.ts, whose doc comments say what each statement promises).
// MySQL has no CTE that writes, so what PostgreSQL does in one statement is here a few in one
// transaction (mysql.delivery-partitions.store.ts).

/**
 * Whether apps may deliver by partitions on MySQL/MariaDB (`OutboxDatabase.deliveryPartitionsOffered`).
 * Not yet: bootstrap refuses the mode and no migration makes step 9. The store's `'leases'`
 * mode interlock follows it: with no dispatcher of the other mode possible, a `'leases'`
 * dispatcher takes no slot, so a slow slot read on its owner-lock session cannot make the owner
 * lock lapse and shut its claims (and its log reader's) for nothing.
 */
export const MYSQL_DELIVERY_PARTITIONS_OFFERED = false;

// Every timestamp is UTC_TIMESTAMP(6), as in mysql.sql.ts: DATETIME has no zone.
const NOW = 'UTC_TIMESTAMP(6)';

/**
 * Schema step 9 on MySQL/MariaDB. A STORED generated column is a table copy (MySQL and MariaDB
 * cannot add one in place): one ALTER adds it and its index, so the table is copied once. There
 * is no online form: the copy blocks writes while it runs.
 */
export const mysqlDeliveryPartitions: SchemaPartSql = {
  rewrites: 'copies the table: writes wait until it ends',
  async ensure(run, n) {
    const has = await mysqlPartitionPresent(run, n);
    if (!has.column) {
      // The expression reads the id column, whose type depends on when the table was made.
      const ref = { tableName: n.tableName, schema: n.schema ?? undefined, keyLock: true };
      const { layout } = await messageIdCodecOf(mysqlMessageIdLayout, run, n, ref);
      await run(`ALTER TABLE ${n.table} ${mysqlPartitionColumn(n, layout)}`);
    } else if (!has.index) {
      await run(`ALTER TABLE ${n.table} ${mysqlPartitionIndex(n)}`);
    }
    for (const statement of mysqlOwnershipTables(n)) await run(statement);
  },
  async has(run, n) {
    const probed = await run(MYSQL_DELIVERY_PARTITIONS_PROBE(n)).then(
      () => true,
      () => false,
    );
    return probed && (await mysqlPartitionPresent(run, n)).index;
  },
  async drop(run, n) {
    await run(`DROP TABLE IF EXISTS ${n.ownersTable}`);
    await run(`DROP TABLE IF EXISTS ${n.dispatchersTable}`);
    const drops = mysqlPartitionDrops(n, await mysqlPartitionPresent(run, n));
    if (drops.length > 0) await run(`ALTER TABLE ${n.table} ${drops.join(', ')}`);
  },
};

/** Reads every column step 9 makes: fails on a table without them. */
export const MYSQL_DELIVERY_PARTITIONS_PROBE = (n: OutboxTableNames): string =>
  `SELECT o.delivery_partition, d.label, d.valid_ms, d.working, d.lock_key, w.generation FROM ${n.table} AS o CROSS JOIN ${n.dispatchersTable} AS d CROSS JOIN ${n.ownersTable} AS w WHERE 1 = 0`;

/**
 * The dispatcher processes and the partitions' owners, as on PostgreSQL (one owner row per
 * partition, never deleted: a generation only grows). `partition` is a reserved word here,
 * quoted wherever it is named. INSERT IGNORE is safe on the owners: its one value is a number
 * made here, so a row already there is all it can ignore. The numbers 0 to 255 from four base-4
 * digits, as the key-lock table's rows are made (no generate_series).
 */
function mysqlOwnershipTables(n: OutboxTableNames): string[] {
  const digit = '(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)';
  const digits = ['a', 'b', 'c', 'd'];
  if (4 ** digits.length !== DELIVERY_PARTITIONS) throw new Error('partitions are 4^4');
  return [
    `CREATE TABLE IF NOT EXISTS ${n.dispatchersTable} (
  instance VARCHAR(255) NOT NULL,
  label VARCHAR(255) NOT NULL,
  valid_ms INT NOT NULL,
  working BOOLEAN NOT NULL DEFAULT FALSE,
  lock_key INT NULL,
  heartbeat_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  joined_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (instance)
) ${MYSQL_TABLE_OPTIONS}`,
    `CREATE TABLE IF NOT EXISTS ${n.ownersTable} (
  ${n.quote('partition')} SMALLINT NOT NULL,
  owner VARCHAR(255) NULL,
  generation BIGINT NOT NULL DEFAULT 0,
  since DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (${n.quote('partition')})
) ${MYSQL_TABLE_OPTIONS}`,
    `INSERT IGNORE INTO ${n.ownersTable} (${n.quote('partition')})
SELECT ${digits.map((d, i) => `${4 ** i} * ${d}.n`).join(' + ')}
FROM ${digits.map((d) => `${digit} AS ${d}`).join(', ')}`,
  ];
}

/** A process's heartbeat, read on the database clock by its own promise (`valid_ms`). */
const live = (d: string): string =>
  `${d}.heartbeat_at > ${NOW} - INTERVAL ${d}.valid_ms * 1000 MICROSECOND`;

/** How long ago a process beat, in whole milliseconds (rounded up, as PostgreSQL's `ceil`). */
const age = (d: string): string =>
  `CEIL(TIMESTAMPDIFF(MICROSECOND, ${d}.heartbeat_at, ${NOW}) / 1000)`;

/**
 * The first statement of a heartbeat: $1 id, $2 label, $3 valid ms, $4 lock key (or null). The
 * process's row, locked by this transaction from here until it commits: a new one not working,
 * an existing one as it was. `working` is decided by the next statement, under that lock.
 */
export function mysqlBeatTouch(n: OutboxTableNames): string {
  return `INSERT INTO ${n.dispatchersTable} (instance, label, valid_ms, working, lock_key)
VALUES (?, ?, ?, FALSE, ?)
ON DUPLICATE KEY UPDATE heartbeat_at = ${NOW}, label = VALUES(label), valid_ms = VALUES(valid_ms),
  lock_key = VALUES(lock_key)`;
}

/**
 * The heartbeat's mode check, under the row lock `mysqlBeatTouch` took: params whether it
 * delivered until now without a lapse, then the `'leases'` mode's slots (`slots` names), then
 * the process's id. It delivers if it did, or if no session holds any slot. The interlock with
 * `enterLeasesMode`: a `'leases'` dispatcher takes its slot first and then reads the working
 * rows with a locking read, which is refused while this transaction holds the row (that
 * dispatcher then gives its slot back and asks again later): either this check sees its slot,
 * or its read sees this row working once this committed; never neither.
 */
export function mysqlBeatWorking(n: OutboxTableNames, slots: number): string {
  const free = Array.from({ length: slots }, () => 'IS_USED_LOCK(?) IS NULL').join(' AND ');
  return `UPDATE ${n.dispatchersTable} SET working = (? OR (${free})) WHERE instance = ?`;
}

/**
 * $1 the process's id: rows of processes gone for long (ten of their validities, at least a
 * minute), kept until then for the admin's view of who left.
 */
export function mysqlForgetMembers(n: OutboxTableNames): string {
  const d = n.dispatchersTable;
  return `DELETE FROM ${d} WHERE instance <> ?
  AND heartbeat_at < ${NOW} - INTERVAL GREATEST(valid_ms * 10, 60000) * 1000 MICROSECOND`;
}

/** Every process's row: whether it delivers and whether its heartbeat holds now. */
export function mysqlMembers(n: OutboxTableNames): string {
  const d = n.dispatchersTable;
  return `SELECT d.instance, d.label, d.working, ${live('d')} AS live FROM ${d} AS d`;
}

/** $1 the process's id: what the owners table says it owns, with the generations. */
export function mysqlOwnedBy(n: OutboxTableNames): string {
  const p = n.quote('partition');
  return `SELECT w.${p} AS p, CAST(w.generation AS CHAR) AS generation FROM ${n.ownersTable} AS w
WHERE w.owner = ? ORDER BY w.${p}`;
}

/**
 * The labels of the processes delivering by partitions now, read by a `'leases'` dispatcher
 * after it took its slot (see `mysqlBeatWorking`): a locking read that does not wait (`nowait`,
 * the server's form of it: `mysqlSharedNowait`). A heartbeat deciding holds its row locked, and
 * the read is refused at once instead of waiting for it: it runs on the owner lock's session,
 * whose heartbeat must answer within the lock's validity, and a `'partitions'` process frozen
 * mid-heartbeat would hold the row until its connection ends.
 */
export function mysqlWorkingMembers(n: OutboxTableNames, nowait: MysqlSharedNowait): string {
  return `SELECT d.label FROM ${n.dispatchersTable} AS d WHERE d.working AND ${live('d')}
ORDER BY d.label ${nowait}`;
}

/** A shared locking read that is refused rather than wait: MariaDB's form, and MySQL 8's. */
export type MysqlSharedNowait = 'LOCK IN SHARE MODE NOWAIT' | 'FOR SHARE NOWAIT';

/** The form of a shared locking read that does not wait on the server of `version`. */
export function mysqlSharedNowait(version: string): MysqlSharedNowait {
  return /mariadb/i.test(version) ? 'LOCK IN SHARE MODE NOWAIT' : 'FOR SHARE NOWAIT';
}

/** MariaDB's answer to a NOWAIT read of a locked row (its lock wait "timed out" at once), MySQL's. */
const LOCK_NOT_GRANTED_ERRNOS: ReadonlySet<number> = new Set([1205, 3572]);

/** Whether a locking read failed because a row it reads was locked (`mysqlWorkingMembers`). */
export function mysqlLockNotGranted(error: unknown): boolean {
  return someInChain(
    error,
    (e) => typeof e.errno === 'number' && LOCK_NOT_GRANTED_ERRNOS.has(e.errno),
  );
}

/** $1 schema (null: the connection's database), $2 table: whether the dispatchers table exists. */
export const MYSQL_HAS_TABLE = `SELECT COUNT(*) AS n FROM information_schema.TABLES
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`;

/**
 * The sessions holding the `'leases'` mode's slots (`slots` names as params), with their user
 * and host where the server shows them (PROCESSLIST lists other users' sessions only to those
 * with the PROCESS privilege).
 */
export function mysqlSlotHolders(slots: number): string {
  const used = Array.from({ length: slots }, (_, i) =>
    i === 0 ? 'SELECT IS_USED_LOCK(?) AS holder' : 'SELECT IS_USED_LOCK(?)',
  ).join(' UNION ALL ');
  return `SELECT s.holder, p.USER AS user, p.HOST AS host FROM (${used}) AS s
LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = s.holder
WHERE s.holder IS NOT NULL ORDER BY s.holder`;
}

/**
 * The first free `'leases'` mode slot taken (`slots` names as params): the number of the one
 * this session now holds, or null when every one is held. CASE tries them in order and stops at
 * the first it gets, so no more than one is taken.
 */
export function mysqlTakeSlot(slots: number): string {
  const tries = Array.from({ length: slots }, (_, i) => `WHEN GET_LOCK(?, 0) = 1 THEN ${i}`);
  return `SELECT CASE ${tries.join(' ')} END AS slot`;
}

/**
 * $1 the process's id, $2 a grace (ms): the other live processes with a lock key whose lock no
 * session holds now, and whose heartbeat the grace would shorten (a plain read, tried again
 * under the lock by `mysqlCutMember`).
 */
export function mysqlGoneCandidates(n: OutboxTableNames): string {
  return `SELECT d.instance, d.label, d.lock_key FROM ${n.dispatchersTable} AS d
WHERE d.instance <> ? AND d.lock_key IS NOT NULL AND ${live('d')} AND ${age('d')} + ? < d.valid_ms
  AND IS_FREE_LOCK(${mysqlOwnerLockNameOf('d.lock_key')}) = 1`;
}

/**
 * $1 grace (ms), $2 instance, $3 the lock key found free and held by this transaction's
 * session now, $4 grace again: ends the process's heartbeat `grace` from now (never later than
 * it ends already) and clears its key, unless it beat meanwhile under another key (its row has
 * another `lock_key`). The clock is the statement's, which starts after the lock was taken: the
 * grace counts from a moment the lock was seen free, as on PostgreSQL.
 */
export function mysqlCutMember(n: OutboxTableNames): string {
  return `UPDATE ${n.dispatchersTable} AS d SET d.valid_ms = LEAST(d.valid_ms, ${age('d')} + ?), d.lock_key = NULL
WHERE d.instance = ? AND d.lock_key = ? AND ${live('d')} AND ${age('d')} + ? < d.valid_ms`;
}

/**
 * $1 the process's id, $2 grace (ms): the other live processes whose heartbeat ends within the
 * grace anyway (no key: cut by a look; or two beats missed), each with how long until it ends.
 * Never one that beats on time, however short its validity.
 */
export function mysqlEndingMembers(n: OutboxTableNames): string {
  const left = `(d.valid_ms - ${age('d')})`;
  return `SELECT d.instance, d.label, GREATEST(${left}, 0) AS ends_in_ms FROM ${n.dispatchersTable} AS d
WHERE d.instance <> ? AND ${live('d')} AND ${left} <= ?
  AND (d.lock_key IS NULL OR ${age('d')} * 5 > d.valid_ms * 2)`;
}

/** $1 instance: leaves, giving up every partition it owns (generations kept). */
export function mysqlLeave(n: OutboxTableNames): string[] {
  return [
    `UPDATE ${n.ownersTable} SET owner = NULL, since = ${NOW} WHERE owner = ?`,
    `DELETE FROM ${n.dispatchersTable} WHERE instance = ?`,
  ];
}

/**
 * Params: the partitions (`count`), then the process's id twice. The take's candidates, locked
 * (FOR UPDATE) until the take commits: each partition free, its own, or owned by a process whose
 * heartbeat is older than that process's own `valid_ms`. A settle holding an owner row (shared)
 * makes this wait for it. The subquery's rows are read, not locked.
 */
export function mysqlTakeCandidates(n: OutboxTableNames, count: number): string {
  const p = n.quote('partition');
  return `SELECT w.${p} AS p, w.owner AS previous FROM ${n.ownersTable} AS w
WHERE w.${p} IN (${placeholders(count)})
  AND (w.owner IS NULL OR w.owner = ? OR NOT EXISTS (
    SELECT 1 FROM ${n.dispatchersTable} AS d WHERE d.instance = w.owner AND ${live('d')}))
ORDER BY w.${p} FOR UPDATE`;
}

/**
 * Params: the process's id twice, then the partitions locked by `mysqlTakeCandidates`: takes
 * them, raising each generation unless it was already this process's. The generation is set
 * before the owner: MySQL's UPDATE reads the columns it already set.
 */
export function mysqlTake(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.ownersTable}
SET generation = CASE WHEN owner <=> ? THEN generation ELSE generation + 1 END, owner = ?, since = ${NOW}
WHERE ${n.quote('partition')} IN (${placeholders(count)})`;
}

/** Params: partitions: their generations, as this transaction sees them. */
export function mysqlGenerations(n: OutboxTableNames, count: number): string {
  const p = n.quote('partition');
  return `SELECT w.${p} AS p, CAST(w.generation AS CHAR) AS generation FROM ${n.ownersTable} AS w
WHERE w.${p} IN (${placeholders(count)})`;
}

/** Params: the process's id, partitions: gives them up (a handover); generations kept. */
export function mysqlRelease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.ownersTable} SET owner = NULL, since = ${NOW}
WHERE owner = ? AND ${n.quote('partition')} IN (${placeholders(count)})`;
}

/** Each owner (null: partitions no one holds) with its label, share and heartbeat, for the admin. */
export function mysqlOwners(n: OutboxTableNames): string {
  return `SELECT w.owner, MAX(d.label) AS label, COUNT(*) AS partitions,
  MAX(TIMESTAMPDIFF(MICROSECOND, d.heartbeat_at, ${NOW}) / 1000) AS heartbeat_age_ms,
  COALESCE(MAX(${live('d')}), 0) AS live
FROM ${n.ownersTable} AS w LEFT JOIN ${n.dispatchersTable} AS d ON d.instance = w.owner
GROUP BY w.owner ORDER BY w.owner IS NULL, w.owner`;
}

/**
 * Params: the process's id, then the partitions (`count`) of its fence: their owner rows still
 * naming it, locked shared until the transaction ends, with their generations (the caller keeps
 * those at the fence's). A take, which updates them, waits for a settle holding them; a settle
 * after a take finds them at another generation, or another owner's.
 */
export function mysqlLockFence(n: OutboxTableNames, count: number): string {
  const p = n.quote('partition');
  return `SELECT w.${p} AS p, CAST(w.generation AS CHAR) AS generation FROM ${n.ownersTable} AS w
WHERE w.owner = ? AND w.${p} IN (${placeholders(count)})
LOCK IN SHARE MODE`;
}

/**
 * Params: ids (`ids`), then partitions (`partitions`): those of the rows still pending in the
 * partitions that passed the fence, locked until the settle commits, with the token each holds
 * (a retry or release of this settle already written holds it).
 */
export function mysqlOwnedRows(n: OutboxTableNames, ids: number, partitions: number): string {
  return `SELECT o.id, o.lock_token FROM ${n.table} AS o
WHERE o.id IN (${placeholders(ids)}) AND o.status = 'pending'
  AND o.delivery_partition IN (${placeholders(partitions)})
ORDER BY o.id FOR UPDATE`;
}

/**
 * Params: the process's id, the token, lease ms twice, ids (`ids`), partitions (`partitions`):
 * leases the rows still pending in the partitions that passed the fence, as a claim does here
 * (its end in `available_at` too, which the `'leases'` mode's claim and the lease renewal read).
 */
export function mysqlHoldOwned(n: OutboxTableNames, ids: number, partitions: number): string {
  return `UPDATE ${n.table} SET locked_by = ?, lock_token = ?,
  locked_until = ${NOW} + INTERVAL ? * 1000 MICROSECOND, available_at = ${NOW} + INTERVAL ? * 1000 MICROSECOND
WHERE id IN (${placeholders(ids)}) AND status = 'pending'
  AND delivery_partition IN (${placeholders(partitions)})`;
}

/** Params: ids (locked and fenced by the settle). Delivered, its attempt counted. */
export function mysqlOwnedDelivered(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET status = 'delivered', delivered_at = ${NOW}, attempts = attempts + 1,
  last_attempt_at = ${NOW}
WHERE status = 'pending' AND id IN (${placeholders(count)})`;
}

/**
 * Params: (id, delay ms, error) per row, then the settle's token. Due again after the delay,
 * its attempt counted; the token marks it as this settle's, so the same settle sent again
 * leaves it (the store passes only rows that do not hold it).
 */
export function mysqlOwnedRetry(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'delay_ms', 'err'])}) AS u ON o.id = u.id
SET o.available_at = ${NOW} + INTERVAL u.delay_ms * 1000 MICROSECOND, o.last_error = u.err,
  o.attempts = o.attempts + 1, o.last_attempt_at = ${NOW}, o.lock_token = ?, o.locked_by = NULL, o.locked_until = NULL
WHERE o.status = 'pending'`;
}

/** Params: (id, error, back) per row; `back` 1 for a message that expired unpublished. */
export function mysqlOwnedDead(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'err', 'back'])}) AS u ON o.id = u.id
SET o.status = 'dead', o.dead_at = ${NOW}, o.last_error = u.err, o.attempts = o.attempts + 1 - u.back,
  o.last_attempt_at = ${NOW}
WHERE o.status = 'pending'`;
}

/**
 * Params: (id, delay ms, error or null) per row, then the settle's token. Handed back, no
 * attempt counted (the read counted none); the token as for a retry.
 */
export function mysqlOwnedRelease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'delay_ms', 'err'])}) AS u ON o.id = u.id
SET o.available_at = ${NOW} + INTERVAL u.delay_ms * 1000 MICROSECOND, o.last_error = COALESCE(u.err, o.last_error),
  o.lock_token = ?, o.locked_by = NULL, o.locked_until = NULL
WHERE o.status = 'pending'`;
}

/** The shape of one owned read: how many partitions, ids and keys it binds. */
export interface OwnedReadShape {
  readonly partitions: number;
  readonly ids: number;
  readonly keys: number;
}

/**
 * Params: the id to read after, the partitions, the ids to skip, the keys to skip (each list as
 * long as `shape` says; an empty one leaves its test out), the limit. The due pending rows of
 * those partitions after that id, in id order, unleased, through the partition index, no lock
 * taken, nothing written (see postgresReadOwned), each with its partition. The ids are read in
 * a derived table first, walking the index in id order and stopping at the limit (bench: 1.1 ms
 * for 500 rows of 256 or 128 partitions out of 100 000 pending; the index led by the partition
 * sorted every pending row of the partitions first, 150 ms). What holds each row back is read
 * apart (`mysqlPreviousBlocking`). `columns`: the row's columns (alias `o`).
 */
export function mysqlReadOwned(
  n: OutboxTableNames,
  columns: string,
  shape: OwnedReadShape,
): string {
  const t = n.table;
  const skips = [
    ...(shape.ids > 0 ? [`c.id NOT IN (${placeholders(shape.ids)})`] : []),
    ...(shape.keys > 0
      ? [`(c.message_key IS NULL OR c.message_key NOT IN (${placeholders(shape.keys)}))`]
      : []),
  ];
  return `SELECT ${columns}, o.delivery_partition AS ${n.quote('partition')}
FROM (SELECT c.id FROM ${t} AS c FORCE INDEX (${n.quote(mysqlPartitionIndexName(n))})
  WHERE c.status = 'pending' AND c.id > ? AND c.delivery_partition IN (${placeholders(shape.partitions)})
    AND c.available_at <= ${NOW} AND (c.locked_until IS NULL OR c.locked_until < ${NOW})${skips.map((s) => `\n    AND ${s}`).join('')}
  ORDER BY c.id LIMIT ?) AS r
JOIN ${t} AS o ON o.id = r.id
ORDER BY o.id`;
}

/**
 * What holds back the rows of one owned read, for `keys` keys (params: `mysqlPreviousParams`).
 * Answers, per key, its latest blocking row of each status below the lowest id read (a loose
 * scan of the key index, `GROUP BY message_key, status`: one entry per key and status, however
 * long a backlog below), and every blocking row between the lowest and the highest id read (the
 * read's own rows among them). A row's `prev_id` is the greatest of its key's ids below its own.
 * MariaDB has no LATERAL join, and a probe per row correlated to it (PostgreSQL's form) is
 * planned as a walk of the key's index entries from the last one backwards: 7 s for a read of
 * the oldest 500 rows of a key with 50 000 pending (bench on 300 000 rows), and as long behind
 * any long parked backlog. This form: 1 ms for a read of one key (a backlog of 40 000 parked
 * below it included), 6.5 ms for the loose scan of 400 keys (three scans, one a status: 24 ms).
 * Where dead rows block by their type, theirs is read apart (no loose scan with the type's test;
 * a key has few dead rows).
 */
export function mysqlPreviousBlocking(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  keys: number,
): string {
  const byKey = `${n.table} FORCE INDEX (${n.quote(`${n.tableName}_key_idx`)})`;
  const of = `message_key IN (${placeholders(keys)})`;
  const typed = (policy.deadLetterExceptions?.length ?? 0) > 0;
  const loose = blockingStatuses(policy).filter((s) => !(typed && s === 'dead'));
  const below = (where: string, groups: string): string =>
    `(SELECT message_key AS k, MAX(id) AS id FROM ${byKey} WHERE ${of} AND ${where} AND id < ? GROUP BY ${groups})`;
  return [
    below(`status IN (${loose.map((s) => `'${s}'`).join(', ')})`, 'message_key, status'),
    ...(typed ? [below(`status = 'dead' AND ${deadRowBlocks('', policy)}`, 'message_key')] : []),
    `(SELECT message_key AS k, id FROM ${byKey} WHERE ${of} AND ${blockingCondition('', policy)} AND id >= ? AND id < ?)`,
  ].join('\nUNION ALL\n');
}

/** The params of `mysqlPreviousBlocking`: the keys, the lowest and the highest id read. */
export function mysqlPreviousParams(
  policy: OutboxQueuePolicy,
  keys: readonly string[],
  lowest: string | number,
  highest: string | number,
): unknown[] {
  const typed = (policy.deadLetterExceptions?.length ?? 0) > 0;
  return [...keys, lowest, ...(typed ? [...keys, lowest] : []), ...keys, lowest, highest];
}

/**
 * The labels of the processes delivering by partitions now (none where the table has no step
 * 9), read on `runner` after it took a `'leases'` mode slot: what a `'leases'` dispatcher waits
 * for (see `mysqlWorkingMembers`).
 */
export async function mysqlWorkingPartitionOwners(
  runner: SqlRunner,
  n: OutboxTableNames,
  nowait: MysqlSharedNowait,
): Promise<string[]> {
  const { rows: present } = await runner.query<{ n: number | string }>(MYSQL_HAS_TABLE, [
    n.schema,
    `${n.tableName}_dispatchers`,
  ]);
  if (Number(present[0]?.n ?? 0) === 0) return [];
  const { rows } = await runner.query<{ label: string }>(mysqlWorkingMembers(n, nowait));
  return rows.map((r) => r.label);
}
