import type { PurgeTypes } from '../ports/outbox-store.port';
import { eventTypeFilter } from '../shared-sql/event-type-filter';
import {
  blockingCondition,
  deadRowBlocks,
  someDeadSkip,
  andDeadRowSkips,
} from '../shared-sql/dead-blocking';
import { MYSQL_OWNER_LOCK_PREFIX, OWNER_TOKEN_VERSION } from '../shared-sql/owner-leases';
import { ARCHIVE_INSERT_COLUMNS, archivedValues } from '../shared-sql/outbox-archive';
import {
  ATTEMPT_COLUMNS,
  ATTEMPT_HISTORY_LIMIT,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from '../shared-sql/attempt-history';
import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { mysqlCleanerIndex } from './mysql-cleaner-index';
import { payloadColumnDefinitions, type PayloadColumnTypes } from '../schema/payload-columns';
import type { MessageIdLayout } from '../rows/message-id-codec';
import { mysqlMessageIdType } from './mysql-message-ids';

export const MYSQL_PAYLOAD_TYPES: PayloadColumnTypes = {
  text: (length) => `VARCHAR(${length})`,
  bytes: 'LONGBLOB',
  json: 'TEXT',
};

/**
 * The step-4 columns an extended insert writes after headers, and their placeholders: the
 * bytes are bound as base64 text (every SQL port binds text alike) and decoded here.
 */
const EXTENDED_COLUMNS = ', payload_encoding, content_type, payload_bytes, broker_attributes';
const EXTENDED_VALUES = ', ?, ?, FROM_BASE64(?), ?';

/**
 * Per-key lock rows for enqueues; keys hash onto them. Two transactions enqueueing different
 * keys share a row with probability 1 in 65 536 per pair of keys (they then take turns); see
 * the README on MySQL key locks for why rows are pre-created instead of made per key.
 */
export const MYSQL_KEY_LOCK_BUCKETS = 65_536;
/** A second set of lock rows, after the enqueue ones, serialises parking and promotion. */
export const MYSQL_DISPATCH_LOCK_OFFSET = MYSQL_KEY_LOCK_BUCKETS;

// Every timestamp is UTC_TIMESTAMP(6): DATETIME has no zone, and sessions may differ in theirs.
const NOW = 'UTC_TIMESTAMP(6)';

/**
 * The outbox table's columns on MySQL/MariaDB, one definition shared by the plain and the
 * partitioned layout (mysql.partition-sql.ts), so a column added here is in both. The message
 * id is the UUID's 16 bytes (`ids` 'text': the CHAR(36) of tables made before 0.3, for the
 * tables made beside one of those).
 */
export function mysqlOutboxColumns(ids: MessageIdLayout = 'binary'): string {
  return `  id BIGINT NOT NULL AUTO_INCREMENT,
  message_id ${mysqlMessageIdType(ids)} NOT NULL,
  topic VARCHAR(255) NOT NULL,
  message_key VARCHAR(255) NULL,
  event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL,
  headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending',
  attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  locked_by VARCHAR(128) NULL,
  lock_token CHAR(36) CHARACTER SET ascii NULL,
  locked_until DATETIME(6) NULL,
  last_error TEXT NULL,
  last_attempt_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  delivered_at DATETIME(6) NULL,
  dead_at DATETIME(6) NULL,
  ${payloadColumnDefinitions(MYSQL_PAYLOAD_TYPES).join(',\n  ')}`;
}

/** The indexes both layouts have (the keys on `id` and `message_id` differ). */
export function mysqlOutboxIndexes(n: OutboxTableNames): string {
  return `KEY ${n.quote(`${n.tableName}_pending_idx`)} (status, available_at, id),
  KEY ${n.quote(`${n.tableName}_key_idx`)} (message_key, status, id),
  ${mysqlCleanerIndex(n)}`;
}

/** Table options both layouts share. */
export const MYSQL_TABLE_OPTIONS = 'ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';

/** DDL of the outbox table on MySQL 8.0.13+ and MariaDB 10.6+. */
export function mysqlCreateTable(n: OutboxTableNames, ids: MessageIdLayout = 'binary'): string[] {
  const t = n.table;
  return [
    `CREATE TABLE IF NOT EXISTS ${t} (
${mysqlOutboxColumns(ids)},
  PRIMARY KEY (id),
  UNIQUE KEY ${n.quote(`${n.tableName}_message_id_key`)} (message_id),
  ${mysqlOutboxIndexes(n)}
) ${MYSQL_TABLE_OPTIONS}`,
    ...mysqlKeyLockTableDdl(n),
  ];
}

/** The per-key lock table and its rows, beside either layout of the outbox table. */
export function mysqlKeyLockTableDdl(n: OutboxTableNames): string[] {
  // 2 × 4^8 = 2 × MYSQL_KEY_LOCK_BUCKETS rows from base-4 digits (recursive CTEs stop at 1000).
  const digit = '(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)';
  const digits = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
  return [
    // Enqueue locks these rows (never inserts them) so that a key's writers commit in id order;
    // locking existing primary-key rows takes no gap locks, so it cannot deadlock with inserts.
    `CREATE TABLE IF NOT EXISTS ${n.lockTable} (bucket INT NOT NULL PRIMARY KEY) ENGINE=InnoDB`,
    `INSERT IGNORE INTO ${n.lockTable} (bucket)
SELECT ${digits.map((d, i) => `${4 ** i} * ${d}.n`).join(' + ')} + ${MYSQL_DISPATCH_LOCK_OFFSET} * z.n
FROM ${digits.map((d) => `${digit} AS ${d}`).join(', ')}, (SELECT 0 AS n UNION ALL SELECT 1) AS z`,
  ];
}

/** DDL of the attempt history (see attempt-history.ts). */
export function mysqlCreateHistoryTable(
  n: OutboxTableNames,
  ids: MessageIdLayout = 'binary',
): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.attemptsTable} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  message_id ${mysqlMessageIdType(ids)} NOT NULL,
  attempt INT NOT NULL,
  outcome VARCHAR(16) CHARACTER SET ascii NOT NULL,
  locked_by VARCHAR(128) NULL,
  error_class VARCHAR(128) NULL,
  error TEXT NULL,
  failed_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (id),
  KEY ${n.quote(`${n.tableName}_attempts_msg`)} (message_id, id),
  CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck()}
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

export function mysqlDropHistoryTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.attemptsTable}`];
}

/** DDL of the archive (see outbox-archive.ts), indexed for lookups by message and by age. */
export function mysqlCreateArchiveTable(
  n: OutboxTableNames,
  ids: MessageIdLayout = 'binary',
): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.archiveTable} (
  archive_id BIGINT NOT NULL AUTO_INCREMENT,
  outbox_id BIGINT NOT NULL,
  message_id ${mysqlMessageIdType(ids)} NOT NULL,
  topic VARCHAR(255) NOT NULL,
  message_key VARCHAR(255) NULL,
  event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL,
  headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  attempts INT NOT NULL,
  last_error TEXT NULL,
  last_attempt_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  delivered_at DATETIME(6) NULL,
  dead_at DATETIME(6) NULL,
  ${payloadColumnDefinitions(MYSQL_PAYLOAD_TYPES).join(',\n  ')},
  archived_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (archive_id),
  KEY ${n.quote(`${n.tableName}_archive_msg`)} (message_id),
  KEY ${n.quote(`${n.tableName}_archive_at`)} (archived_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

export function mysqlDropTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.lockTable}`, `DROP TABLE IF EXISTS ${n.table}`];
}

/**
 * Locks bucket rows by primary key and answers how many it locked (`locked`): one row back
 * instead of every bucket, and a count the caller checks, since a missing row would be a lock
 * silently not taken. The primary key's range scan visits the IN list in ascending order, so
 * every locker takes its buckets in one order, as `ORDER BY bucket` would make it.
 */
export function mysqlLockKeys(n: OutboxTableNames, count: number): string {
  return `SELECT COUNT(*) AS locked FROM ${n.lockTable} WHERE bucket IN (${placeholders(count)}) FOR UPDATE`;
}

/**
 * What an enqueue's writes check, in the statement itself, before they write: that the caller's
 * transaction is still open. MariaDB answers it in `@@in_transaction` (1 inside BEGIN … COMMIT,
 * 0 for a statement that runs on its own), so no statement of the app (a ROLLBACK queued before
 * an enqueue that was not awaited reached the connection) can come between the check and the
 * write. MySQL 8 has no such variable: there the connection's check before the first statement
 * is all there is (docs/enqueue.md says to await the enqueue).
 */
export type MysqlTransactionGuard = '@@in_transaction = 1' | 'TRUE';

export function mysqlTransactionGuard(version: string): MysqlTransactionGuard {
  return /mariadb/i.test(version) ? '@@in_transaction = 1' : 'TRUE';
}

/** Whether the caller's transaction is open, asked after a guarded write wrote nothing. */
export const MYSQL_IN_TRANSACTION = 'SELECT @@in_transaction AS open';

const MYSQL_REFUSED = '(SELECT 1 UNION ALL SELECT 2)';

/**
 * The value a guarded write puts in its first column: the value given while the caller's
 * transaction is open (`guard`), else an error (1242, "Subquery returns more than 1 row"; no
 * expression can raise an error of its own, and this one stops the statement whatever the
 * sql_mode). The guard is a value, not a `WHERE` of an `INSERT … SELECT`: InnoDB takes its
 * table-wide AUTO-INC lock for the whole of an `INSERT … SELECT` (a "bulk insert" under the
 * default `innodb_autoinc_lock_mode = 1`), also while the insert waits for another
 * transaction's row of the same message id, and a later insert of that transaction then
 * deadlocks with it (error 1467, which rolls its whole transaction back). An `INSERT … VALUES`
 * takes only a short mutex for its ids.
 */
export function mysqlGuardedValue(guard: MysqlTransactionGuard, value: string): string {
  return guard === 'TRUE' ? value : `IF(${guard}, ${value}, ${MYSQL_REFUSED})`;
}

/** The error a guarded write answers when the caller's transaction had ended (see mysqlGuardedValue). */
export function mysqlRefusedByGuard(error: unknown): boolean {
  // As the driver answers it, or as an ORM wraps it (TypeORM's driverError, an Error's cause,
  // Prisma's meta.code).
  const e = error as {
    errno?: unknown;
    code?: unknown;
    driverError?: { errno?: unknown };
    cause?: { errno?: unknown };
    meta?: { code?: unknown };
  } | null;
  return (
    e?.errno === 1242 ||
    e?.code === 'ER_SUBQUERY_NO_1_ROW' ||
    e?.driverError?.errno === 1242 ||
    e?.cause?.errno === 1242 ||
    String(e?.meta?.code) === '1242'
  );
}

/**
 * Inserts `rows` rows inside the caller's transaction only (`guard`): an error that
 * `mysqlRefusedByGuard` recognises means it had ended (and nothing was written). One `VALUES`
 * row per message, in the order given (the order their ids follow).
 */
export function mysqlInsert(
  n: OutboxTableNames,
  rows: number,
  scheduled: boolean,
  guard: MysqlTransactionGuard,
  idempotent = false,
  extended = false,
  /** created_at as `mysqlSetEnqueuedAt` read it, not the statement's own clock. */
  enqueuedAt = false,
): string {
  const values = [
    '?',
    '?',
    '?',
    '?',
    '?',
    '?',
    ...(extended ? ['?', '?', 'FROM_BASE64(?)', '?'] : []),
    ...(enqueuedAt ? [ENQUEUED_AT] : []),
    ...(scheduled ? ['COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)'] : []),
  ];
  const columns = `message_id, topic, message_key, event_type, payload, headers${extended ? EXTENDED_COLUMNS : ''}${enqueuedAt ? ', created_at' : ''}${scheduled ? ', available_at' : ''}`;
  // Not INSERT IGNORE: that would also turn truncation and other errors into warnings.
  const skip = idempotent ? ' ON DUPLICATE KEY UPDATE id = id' : '';
  const [id, ...rest] = values;
  const row = `(${[mysqlGuardedValue(guard, id ?? '?'), ...rest].join(', ')})`;
  return `INSERT INTO ${n.table} (${columns}) VALUES ${Array.from({ length: rows }, () => row).join(', ')}${skip}`;
}

/**
 * One message of a key, written under its key's lock in one statement: its first value locks
 * the key's bucket (`SELECT … FOR UPDATE`, evaluated before InnoDB gives the row its id, so a
 * key's ids follow its commit order, as with `mysqlLockKeys` then `mysqlInsert`, with one round
 * trip fewer) and checks the guard. The first parameter is the bucket. Refused (see
 * mysqlRefusedByGuard) when the bucket row is missing or the caller's transaction had ended:
 * the caller must treat that as an error, never as written. A VALUES insert, not INSERT …
 * SELECT: see mysqlGuardedValue.
 */
export function mysqlInsertOneLocked(
  n: OutboxTableNames,
  scheduled: boolean,
  guard: MysqlTransactionGuard,
  extended = false,
): string {
  const due = scheduled ? ', COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)' : '';
  const locked = `(SELECT ${guard} FROM ${n.lockTable} WHERE bucket = ? FOR UPDATE) = 1`;
  return `INSERT INTO ${n.table} (message_id, topic, message_key, event_type, payload, headers${extended ? EXTENDED_COLUMNS : ''}${scheduled ? ', available_at' : ''})
VALUES (IF(${locked}, ?, ${MYSQL_REFUSED}), ?, ?, ?, ?, ?${extended ? EXTENDED_VALUES : ''}${due})`;
}

/**
 * `FORCE INDEX` the key index, for every lookup of a key's rows: statistics taken while one key
 * fills the table make any key look like most of it, and the optimizer may then prefer the
 * primary key's id range (a walk over that key's backlog per row asked about). Forced, the
 * plan is a probe of `(message_key, status, id)` whatever the statistics say.
 */
const BY_KEY = (n: OutboxTableNames): string =>
  `FORCE INDEX (${n.quote(`${n.tableName}_key_idx`)})`;

/**
 * Step 1 of the claim, a plain (non-locking) read: the window of due rows in due order, each
 * flagged when an earlier message of its key holds it back. It is kept apart from the locking
 * step because a locking read could skip a locked earlier message in the head check and wrongly
 * let a later one of the same key through. A row not flagged heads its key; the rows of its run
 * behind it are found by mysqlKeyRows, for keys with more rows in the window. Params: window.
 */
export function mysqlClaimWindow(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  /**
   * A tenant-fair claim's share (docs/tenants.md): one tenant's rows (`one`, its id the first
   * parameter) or those without one (`none`). The head check below still sees every tenant.
   */
  tenant: 'all' | 'one' | 'none' = 'all',
): string {
  const behind = policy.ordered
    ? `(c.message_key IS NOT NULL AND EXISTS (SELECT 1 FROM ${n.table} AS e ${BY_KEY(n)} WHERE e.message_key = c.message_key AND ${blockingCondition('e', policy)} AND e.id < c.id))`
    : '0';
  const only =
    tenant === 'all' ? '' : tenant === 'one' ? ' AND c.tenant_id = ?' : ' AND c.tenant_id IS NULL';
  // Narrowed to a tenant, its index: statistics taken while one tenant filled the table may
  // make the pending index look as good, and walking it reads the other tenants' backlogs.
  const index = tenant === 'all' ? '' : ` FORCE INDEX (${n.quote(`${n.tableName}_tenant_idx`)})`;
  return `SELECT c.id, c.message_key, ${behind} AS behind FROM ${n.table} AS c${index}
WHERE c.status = 'pending' AND c.available_at <= ${NOW}${only}
ORDER BY c.available_at, c.id LIMIT ?`;
}

/**
 * The columns of a row handed to the pipeline (`ClaimedRow`), of alias `c`: the attempt is the
 * one this delivery makes, the bytes base64 text, the times UTC text.
 */
export function mysqlClaimedColumns(c: string): string {
  return `${c}.id, ${c}.message_id, ${c}.topic, ${c}.message_key, ${c}.event_type, ${c}.payload, ${c}.headers, ${c}.attempts + 1 AS attempts,
  ${c}.payload_encoding, ${c}.content_type, TO_BASE64(${c}.payload_bytes) AS payload_bytes, ${c}.broker_attributes,
  DATE_FORMAT(${c}.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_at,
  TIMESTAMPDIFF(MICROSECOND, ${c}.created_at, ${NOW}) / 1000 AS age_ms`;
}

/**
 * Step 2: lock the candidates (heads, and the rows of their runs) that are still due, skipping
 * those another dispatcher holds. The store then leases a row only when every earlier row of
 * its run was locked too.
 */
export function mysqlClaimLock(n: OutboxTableNames, count: number): string {
  return `SELECT ${mysqlClaimedColumns('c')}
FROM ${n.table} AS c WHERE c.id IN (${placeholders(count)}) AND c.status = 'pending' AND c.available_at <= ${NOW}
ORDER BY c.available_at, c.id FOR UPDATE SKIP LOCKED`;
}

/**
 * Log tailing's lease by id, after locking the rows (mysqlClaimLock): for the keys of the
 * locked rows, the first blocking row of each key that is not among them. A locked row is
 * leased only when no such row comes before it, so what is leased of a key is a prefix of its
 * queue. Params: keys, then the locked ids.
 */
export function mysqlFirstBlockingOutside(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  keys: number,
  ids: number,
): string {
  return `SELECT message_key AS k, MIN(id) AS first FROM ${n.table} ${BY_KEY(n)}
WHERE message_key IN (${placeholders(keys)}) AND ${blockingCondition('', policy)}${ids === 0 ? '' : ` AND id NOT IN (${placeholders(ids)})`}
GROUP BY message_key`;
}

/**
 * Params: ids. Those of the ids that are in the table (log tailing: the others are not yet
 * visible), with the key of each parked one.
 */
export function mysqlExistingIds(n: OutboxTableNames, count: number): string {
  // due_in_ms: of a pending row not leased and not due yet (a delayed message, a retry).
  return `SELECT id, CASE WHEN status = 'waiting' THEN message_key END AS parked_key,
  CASE WHEN status = 'pending' AND available_at > ${NOW}
    AND (locked_until IS NULL OR locked_until <= ${NOW})
  THEN TIMESTAMPDIFF(MICROSECOND, ${NOW}, available_at) / 1000 END AS due_in_ms
FROM ${n.table} WHERE id IN (${placeholders(count)})`;
}

/** Step 3: write the lease and count the attempt. Params: owner, token, lease ms, lease ms, ids. */
export function mysqlClaimLease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET locked_by = ?, lock_token = ?, locked_until = ${NOW} + INTERVAL ? * 1000 MICROSECOND,
  available_at = ${NOW} + INTERVAL ? * 1000 MICROSECOND, attempts = attempts + 1, last_attempt_at = ${NOW}
WHERE id IN (${placeholders(count)})`;
}

/**
 * Params: keys, then IN_FLIGHT_GRACE_MS. Each key's head (first blocking message), with whether
 * it is in flight: leased, less than that long ago.
 */
export function mysqlKeyHeads(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  count: number,
): string {
  return `SELECT h.message_key AS k, h.id AS first,
  (h.locked_until > ${NOW} AND h.last_attempt_at > ${NOW} - INTERVAL ? * 1000 MICROSECOND) AS flying
FROM (${mysqlFirstBlocking(n, policy, count)}) AS f
JOIN ${n.table} AS h ON h.id = f.first`;
}

/** Params: keys. The first message holding back each key (its head). */
export function mysqlFirstBlocking(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  count: number,
): string {
  return `SELECT message_key AS k, MIN(id) AS first FROM ${n.table} ${BY_KEY(n)}
WHERE message_key IN (${placeholders(count)}) AND ${blockingCondition('', policy)}
GROUP BY message_key`;
}

/**
 * A key's first blocking rows after an id, for runs (claim and promotion). Params: per key,
 * the key, the id after which to look and the most rows to take, once per blocking status
 * (mysqlKeyRowsParams). Each part is one probe of `(message_key, status, id)` read in index
 * order that stops after its limit: no key's backlog is read past its run (one part with
 * `status IN (…)` would sort every blocking row of the key first). The caller merges the parts
 * of a key by id and keeps the first rows.
 */
export function mysqlKeyRows(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  count: number,
): string {
  const parts = mysqlBlockingParts(policy, '').map(
    (blocking) => `(SELECT message_key AS k, id, status FROM ${n.table} ${BY_KEY(n)}
WHERE message_key = ? AND ${blocking} AND id > ? ORDER BY id LIMIT ?)`,
  );
  return Array.from({ length: count }, () => parts)
    .flat()
    .join('\nUNION ALL\n');
}

/** The params of mysqlKeyRows for these keys. */
export function mysqlKeyRowsParams(
  policy: OutboxQueuePolicy,
  keys: readonly { key: string; after: string | number; limit: number }[],
): unknown[] {
  const statuses = blockingStatuses(policy);
  return keys.flatMap((k) => statuses.flatMap(() => [k.key, k.after, k.limit]));
}

/**
 * The blocking rows (of `alias`) as one condition per status, each an equality the key index
 * `(message_key, status, id)` reads in id order: a probe per status stops at its first rows,
 * where `status IN (…)` would sort every blocking row of the key first. A dead row blocks by its
 * type where a policy says otherwise than the module.
 */
export function mysqlBlockingParts(policy: OutboxQueuePolicy, alias: string): string[] {
  const typed = (policy.deadLetterExceptions?.length ?? 0) > 0;
  const status = alias === '' ? 'status' : `${alias}.status`;
  return blockingStatuses(policy).map(
    (s) =>
      `${status} = '${s}'${s === 'dead' && typed ? ` AND ${deadRowBlocks(alias, policy)}` : ''}`,
  );
}

/** The statuses of the rows that may hold back the later messages of their key. */
export function blockingStatuses(policy: OutboxQueuePolicy): readonly string[] {
  const someDeadBlock = policy.deadBlocksKey || (policy.deadLetterExceptions?.length ?? 0) > 0;
  return someDeadBlock ? ['pending', 'waiting', 'dead'] : ['pending', 'waiting'];
}

/** Params: (key, first id) per key. Parks the due followers of each head. */
export function mysqlPark(n: OutboxTableNames, count: number): string {
  const pairs = Array.from({ length: count }, () => '(message_key = ? AND id > ?)').join(' OR ');
  return `UPDATE ${n.table} SET status = 'waiting'
WHERE status = 'pending' AND (locked_until IS NULL OR locked_until < ${NOW}) AND (${pairs})`;
}

/** Params: keys. The first waiting message of each key. */
export function mysqlFirstWaiting(n: OutboxTableNames, count: number): string {
  return `SELECT message_key AS k, MIN(id) AS first FROM ${n.table} ${BY_KEY(n)}
WHERE message_key IN (${placeholders(count)}) AND status = 'waiting'
GROUP BY message_key`;
}

/** Params: (key, id) per candidate. The keys whose candidate still has something before it. */
export function mysqlStillHeld(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  count: number,
): string {
  const pairs = Array.from({ length: count }, () => '(message_key = ? AND id < ?)').join(' OR ');
  return `SELECT DISTINCT message_key AS k FROM ${n.table} ${BY_KEY(n)}
WHERE ${blockingCondition('', policy)} AND (${pairs})`;
}

/** Params: ids. */
export function mysqlPromote(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET status = 'pending' WHERE status = 'waiting' AND id IN (${placeholders(count)})`;
}

/**
 * Params: keys. Every waiting message of these keys pending again: a partition owner's settle
 * that moved them on gives back all their parked rows, which the owner reads back in order.
 */
export function mysqlPromoteKeys(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET status = 'pending' WHERE status = 'waiting' AND message_key IN (${placeholders(count)})`;
}

/** Params: limit. Keys whose first waiting message has nothing earlier holding it back. */
export function mysqlOrphanKeys(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  return `SELECT DISTINCT w.message_key AS k FROM ${n.table} AS w
WHERE w.status = 'waiting' AND w.message_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ${n.table} AS e ${BY_KEY(n)} WHERE e.message_key = w.message_key AND e.id < w.id AND ${blockingCondition('e', policy)})
LIMIT ?`;
}

/** Params: limit. Without ordering nothing waits. */
export function mysqlReleaseAllWaiting(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'pending' WHERE status = 'waiting' LIMIT ?`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

export function mysqlSettleDelivered(
  n: OutboxTableNames,
  count: number,
  deleteDelivered: boolean,
): string {
  return deleteDelivered
    ? `DELETE FROM ${n.table} WHERE lock_token = ? AND id IN (${placeholders(count)})`
    : `UPDATE ${n.table} SET status = 'delivered', delivered_at = ${NOW}, ${UNLOCK} WHERE lock_token = ? AND id IN (${placeholders(count)})`;
}

/** `count` rows of `columns`, as a derived table of placeholders (`UNION ALL` of `SELECT ?`). */
export function rowsOf(count: number, columns: readonly string[]): string {
  const first = `SELECT ${columns.map((c) => `? AS ${c}`).join(', ')}`;
  const next = `SELECT ${columns.map(() => '?').join(', ')}`;
  return Array.from({ length: count }, (_, i) => (i === 0 ? first : next)).join(' UNION ALL ');
}

/** Params: (id, delay ms, error) per row, then token. The claim counted the attempt. */
export function mysqlSettleRetry(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'delay_ms', 'err'])}) AS u ON o.id = u.id
SET o.available_at = ${NOW} + INTERVAL u.delay_ms * 1000 MICROSECOND, o.last_error = u.err,
  o.locked_by = NULL, o.lock_token = NULL, o.locked_until = NULL
WHERE o.lock_token = ?`;
}

/**
 * Params: (id, error, back) per row, then token; `back` 1 gives the claim's attempt back (it
 * expired before its publish).
 */
export function mysqlSettleDead(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'err', 'back'])}) AS u ON o.id = u.id
SET o.status = 'dead', o.dead_at = ${NOW}, o.last_error = u.err, o.attempts = GREATEST(o.attempts - u.back, 0),
  o.locked_by = NULL, o.lock_token = NULL, o.locked_until = NULL
WHERE o.lock_token = ?`;
}

/** Params: (id, delay ms, error or null) per row, then token. Gives the claim's attempt back. */
export function mysqlRelease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} AS o JOIN (${rowsOf(count, ['id', 'delay_ms', 'err'])}) AS u ON o.id = u.id
SET o.attempts = GREATEST(o.attempts - 1, 0), o.available_at = ${NOW} + INTERVAL u.delay_ms * 1000 MICROSECOND,
  o.last_error = COALESCE(u.err, o.last_error), o.locked_by = NULL, o.lock_token = NULL, o.locked_until = NULL
WHERE o.lock_token = ?`;
}

/**
 * What a settle's history rows are fenced by: a claim's lease (`token`: the rows still holding
 * it; the attempt is the claim's, and the row names its lease's owner), or a partition owner's
 * settle (`owner`: its caller locked the rows of the partitions it holds and passed only those;
 * the attempt is this settle's, its read counted none, and the row names the owner).
 */
export type MysqlAttemptFence = { readonly token: string } | { readonly owner: string };

/**
 * Params: `mysqlRecordAttemptsParams`. Records the failures of a settle in the attempt history,
 * before the updates clear the lease: only rows still holding the token (or, for an owner's
 * settle, still pending), locked (FOR UPDATE) so that the updates that follow in the
 * transaction find them unchanged. A lease's attempt is the claim's (a release gives it back
 * afterwards).
 */
export function mysqlRecordAttempts(
  n: OutboxTableNames,
  count: number,
  fence: MysqlAttemptFence,
): string {
  const owned = 'owner' in fence;
  return `INSERT INTO ${n.attemptsTable} (${ATTEMPT_COLUMNS})
SELECT o.message_id, ${owned ? 'o.attempts + 1, u.outcome, ?' : 'o.attempts, u.outcome, o.locked_by'}, u.cls, u.err
FROM ${n.table} AS o JOIN (${rowsOf(count, ['id', 'outcome', 'cls', 'err'])}) AS u ON o.id = u.id
WHERE ${owned ? "o.status = 'pending'" : 'o.lock_token = ?'}
ORDER BY o.id
FOR UPDATE`;
}

/** The params of `mysqlRecordAttempts`, in the order its placeholders stand. */
export function mysqlRecordAttemptsParams(
  failed: readonly (readonly unknown[])[],
  fence: MysqlAttemptFence,
): unknown[] {
  return 'owner' in fence ? [fence.owner, ...failed.flat()] : [...failed.flat(), fence.token];
}

/**
 * Params: row ids. Keeps the latest ATTEMPT_HISTORY_LIMIT attempts of these rows' messages.
 * The window runs in a derived table, which MySQL materialises, so the delete may read the
 * table it deletes from.
 */
export function mysqlBoundAttempts(n: OutboxTableNames, count: number): string {
  const h = n.attemptsTable;
  return `DELETE h FROM ${h} AS h JOIN (
  SELECT s.id FROM (
    SELECT a.id, ROW_NUMBER() OVER (PARTITION BY a.message_id ORDER BY a.id DESC) AS n
    FROM ${h} AS a WHERE a.message_id IN (SELECT o.message_id FROM ${n.table} AS o WHERE o.id IN (${placeholders(count)}))) AS s
  WHERE s.n > ${ATTEMPT_HISTORY_LIMIT}) AS x ON x.id = h.id`;
}

/** Params: token, row ids. The history of delivered rows about to be deleted. */
export function mysqlDeleteDeliveredAttempts(n: OutboxTableNames, count: number): string {
  return `DELETE h FROM ${n.attemptsTable} AS h JOIN ${n.table} AS o ON o.message_id = h.message_id
WHERE o.lock_token = ? AND o.id IN (${placeholders(count)})`;
}

/**
 * On a partitioned table: the guard rows (`<table>_ids`) of rows about to be deleted, so their
 * ids may be enqueued again. Params as `mysqlDeleteAttemptsOf` (`byToken`: as
 * `mysqlDeleteDeliveredAttempts`).
 */
export function mysqlDeleteGuardOf(n: OutboxTableNames, count: number, byToken: boolean): string {
  return `DELETE g FROM ${n.idsTable} AS g JOIN ${n.table} AS o ON o.message_id = g.message_id
WHERE ${byToken ? 'o.lock_token' : 'o.status'} = ? AND o.id IN (${placeholders(count)})`;
}

/** Param: message id. Whether the table holds it (a consistent read: no locks). */
export function mysqlHasMessageId(n: OutboxTableNames): string {
  return `SELECT 1 AS found FROM ${n.table} WHERE message_id = ? LIMIT 1`;
}

// One enqueue's time on a partitioned table, read once: the guard row and the outbox row carry
// the same created_at, so they are in the same period and a guard is pruned with its row's
// partition, never with the one before it (each statement would read the clock anew).
const ENQUEUED_AT = '@outbox_enqueued_at';

/** Reads the database clock once for an enqueue's guard and outbox rows (see insertGuarded). */
export function mysqlSetEnqueuedAt(): string {
  return `SET ${ENQUEUED_AT} = ${NOW}`;
}

/**
 * Param: message id. Claims it in the guard: 1 row when new, 0 when there (see insertGuarded),
 * at the time `mysqlSetEnqueuedAt` read.
 */
export function mysqlGuardId(n: OutboxTableNames, guard: MysqlTransactionGuard): string {
  return `INSERT IGNORE INTO ${n.idsTable} (message_id, created_at) SELECT ?, ${ENQUEUED_AT} FROM DUAL WHERE ${guard}`;
}

/** Params: status, row ids. The history of rows about to be deleted (purge, deleteDead). */
export function mysqlDeleteAttemptsOf(n: OutboxTableNames, count: number): string {
  return `DELETE h FROM ${n.attemptsTable} AS h JOIN ${n.table} AS o ON o.message_id = h.message_id
WHERE o.status = ? AND o.id IN (${placeholders(count)})`;
}

/** Params: the lost claim's token; due at once again (the claim set available_at to its lease end). See OutboxStore.releaseClaim. */
export function mysqlReleaseClaim(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET attempts = GREATEST(CAST(attempts AS SIGNED) - 1, 0), available_at = ${NOW}, ${UNLOCK} WHERE status = 'pending' AND lock_token = ?`;
}

/**
 * Params: lease ms twice, the new token or null, the batch's token, row ids. Lease renewal: only
 * rows still leased with the token and pending move their lease end, and `available_at` with it
 * (a lease holds the row out of the claim window that way here), and take the new token. See
 * OutboxStore.renewLease.
 */
export function mysqlRenewLease(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET locked_until = ${NOW} + INTERVAL ? * 1000 MICROSECOND,
  available_at = ${NOW} + INTERVAL ? * 1000 MICROSECOND, lock_token = COALESCE(?, lock_token)
WHERE lock_token = ? AND status = 'pending' AND id IN (${placeholders(count)})`;
}

export function mysqlReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < ${NOW}`;
}

/**
 * Params: age ms, limit. The rows to purge, with their keys: the oldest first, in the order of
 * the cleaner index (mysql-cleaner-index.ts), so a pass with nothing due reads one entry.
 */
export function mysqlPurgeCandidates(
  n: OutboxTableNames,
  status: 'delivered' | 'dead',
  types?: PurgeTypes,
): string {
  const typed = eventTypeFilter(types);
  const due =
    status === 'delivered'
      ? `status = 'delivered' AND delivered_at < ${NOW} - INTERVAL ? * 1000 MICROSECOND${typed} ORDER BY delivered_at`
      : `status = 'dead' AND delivered_at IS NULL AND dead_at < ${NOW} - INTERVAL ? * 1000 MICROSECOND${typed} ORDER BY dead_at`;
  return `SELECT id, message_key AS k FROM ${n.table} WHERE ${due} LIMIT ?`;
}

/**
 * Params: limit, age ms. The oldest rows written before the cut-off, whatever their status
 * (delivery 'external'), read in primary-key order and cut at `limit` before the age test (see
 * postgresPurgeByAge).
 */
export function mysqlPurgeByAgeCandidates(n: OutboxTableNames): string {
  return `SELECT id FROM (SELECT id, created_at FROM ${n.table} ORDER BY id LIMIT ?) AS oldest
WHERE created_at < ${NOW} - INTERVAL ? * 1000 MICROSECOND`;
}

/** Params: row ids. The attempt history of rows about to be deleted by age. */
export function mysqlDeleteAttemptsOfIds(n: OutboxTableNames, count: number): string {
  return `DELETE h FROM ${n.attemptsTable} AS h JOIN ${n.table} AS o ON o.message_id = h.message_id
WHERE o.id IN (${placeholders(count)})`;
}

/** Params: row ids. */
export function mysqlDeleteIds(n: OutboxTableNames, count: number): string {
  return `DELETE FROM ${n.table} WHERE id IN (${placeholders(count)})`;
}

/** Params: message ids. Dead rows to delete, with their keys. */
export function mysqlDeadByMessageIds(n: OutboxTableNames, count: number): string {
  return `SELECT id, message_key AS k FROM ${n.table} WHERE status = 'dead' AND message_id IN (${placeholders(count)})`;
}

/**
 * Params: status, ids. Locks the rows about to be deleted that still have the status: a requeue
 * that committed since they were read (a consistent read) no longer matches, and one that comes
 * after waits for the delete, so what is archived is exactly what is deleted.
 */
export function mysqlLockByIds(n: OutboxTableNames, count: number): string {
  return `SELECT id FROM ${n.table} WHERE status = ? AND id IN (${placeholders(count)}) ORDER BY id FOR UPDATE`;
}

/** Params: status, ids (locked by mysqlLockByIds). Copies them into the archive. */
export function mysqlArchiveByIds(n: OutboxTableNames, count: number): string {
  return `INSERT INTO ${n.archiveTable} (${ARCHIVE_INSERT_COLUMNS})
SELECT ${archivedValues('o')} FROM ${n.table} AS o WHERE o.status = ? AND o.id IN (${placeholders(count)}) ORDER BY o.id`;
}

/** Params: status, ids. */
export function mysqlDeleteByIds(n: OutboxTableNames, count: number): string {
  return `DELETE FROM ${n.table} WHERE status = ? AND id IN (${placeholders(count)})`;
}

const REQUEUE_COLUMNS = [
  'message_id',
  'topic',
  'message_key',
  'event_type',
  'payload',
  'headers',
  'payload_encoding',
  'content_type',
  'payload_bytes',
  'broker_attributes',
];
// The bytes travel through the app as base64 text, like an enqueue's.
const requeueRead = (c: string): string =>
  c === 'payload_bytes' ? `TO_BASE64(d.${c}) AS ${c}` : `d.${c}`;
const requeueWrite = (c: string): string => (c === 'payload_bytes' ? 'FROM_BASE64(?)' : '?');

/** Params: message ids, when given. The keys of the dead messages to requeue. */
export function mysqlDeadKeys(n: OutboxTableNames, count: number | null): string {
  return `SELECT DISTINCT d.message_key AS message_key FROM ${n.table} AS d
WHERE d.status = 'dead' AND d.message_key IS NOT NULL${count === null ? '' : ` AND d.message_id IN (${placeholders(count)})`}`;
}

/** Params: message ids, when given. See PostgreSQL's postgresDeadToRequeue. */
export function mysqlDeadToRequeue(
  n: OutboxTableNames,
  count: number | null,
  policy: OutboxQueuePolicy,
): string {
  const overtaken =
    policy.ordered && someDeadSkip(policy)
      ? `(d.message_key IS NOT NULL${andDeadRowSkips('d', policy)} AND EXISTS (
    SELECT 1 FROM ${n.table} AS e ${BY_KEY(n)} WHERE e.message_key = d.message_key AND e.id > d.id AND e.status IN ('pending', 'waiting')))`
      : '0';
  return `SELECT d.id, ${REQUEUE_COLUMNS.map(requeueRead).join(', ')},
  DATE_FORMAT(d.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_at,
  ${overtaken} AS overtaken
FROM ${n.table} AS d WHERE d.status = 'dead'${count === null ? '' : ` AND d.message_id IN (${placeholders(count)})`}
ORDER BY d.id
FOR UPDATE`;
}

/** Params: ids. */
export function mysqlRequeueInPlace(n: OutboxTableNames, count: number): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = ${NOW}, last_error = NULL, dead_at = NULL, ${UNLOCK}
WHERE status = 'dead' AND id IN (${placeholders(count)})`;
}

/** Params: per row, the requeue columns then created_at. */
export function mysqlReinsert(n: OutboxTableNames, rows: number): string {
  const row = `(${[...REQUEUE_COLUMNS.map(requeueWrite), '?'].join(', ')})`;
  return `INSERT INTO ${n.table} (${REQUEUE_COLUMNS.join(', ')}, created_at) VALUES ${Array.from({ length: rows }, () => row).join(', ')}`;
}

export function mysqlStats(n: OutboxTableNames): string {
  return `SELECT
  CAST(COALESCE(SUM(status = 'waiting' OR (status = 'pending' AND (locked_until IS NULL OR locked_until < ${NOW}))), 0) AS SIGNED) AS pending,
  CAST(COALESCE(SUM(status = 'pending' AND locked_until >= ${NOW}), 0) AS SIGNED) AS leased,
  CAST(COALESCE(SUM(status = 'delivered'), 0) AS SIGNED) AS delivered,
  CAST(COALESCE(SUM(status = 'dead'), 0) AS SIGNED) AS dead,
  TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status IN ('pending', 'waiting') THEN created_at END), ${NOW}) / 1000 AS oldest_ms
FROM ${n.table}`;
}

export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}

/** Whether a message is due: one probe of the pending index (see OutboxStore.hasDue). */
export function mysqlHasDue(n: OutboxTableNames): string {
  return `SELECT EXISTS (SELECT 1 FROM ${n.table} WHERE status = 'pending' AND available_at <= ${NOW}) AS due`;
}

/**
 * Params: grace ms. The owner keys (8 hex digits) of live owner leases whose owner lock no
 * session holds (fast takeover, see shared-sql/owner-leases.ts). A lease writes `available_at`
 * at its end, so the pending index's range past now holds every lease and no due backlog.
 */
export function mysqlOrphanedOwners(n: OutboxTableNames): string {
  return `SELECT c.k FROM (
  SELECT DISTINCT LEFT(lock_token, 8) AS k FROM ${n.table}
  WHERE status = 'pending' AND available_at > ${NOW} AND locked_until > ${NOW} + INTERVAL ? * 1000 MICROSECOND
    AND SUBSTRING(lock_token, 15, 1) = '${OWNER_TOKEN_VERSION}'
) AS c WHERE IS_FREE_LOCK(CONCAT('${MYSQL_OWNER_LOCK_PREFIX}', c.k)) = 1`;
}

/**
 * Params: grace ms three times, then the owner keys (8 hex digits). Ends the owner leases of these
 * keys `grace` from now (never later than they end already).
 */
export function mysqlShortenOwnerLeases(n: OutboxTableNames, count: number): string {
  const end = `${NOW} + INTERVAL ? * 1000 MICROSECOND`;
  return `UPDATE ${n.table} SET locked_until = ${end}, available_at = LEAST(available_at, ${end})
WHERE status = 'pending' AND locked_until > ${end}
  AND SUBSTRING(lock_token, 15, 1) = '${OWNER_TOKEN_VERSION}' AND LEFT(lock_token, 8) IN (${placeholders(count)})`;
}
