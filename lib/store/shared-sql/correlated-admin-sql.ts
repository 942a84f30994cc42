import type { AdminDialect } from './admin-dialect';
import { blockingCondition } from './dead-blocking';
import type { SqlParams } from './sql-params';

/**
 * The words in which MySQL/MariaDB and SQLite differ for the admin listings that both write
 * with correlated subqueries (neither MariaDB nor SQLite has LATERAL).
 */
export interface CorrelatedAdminVocabulary {
  /** The current UTC time, comparable with the table's timestamps. */
  readonly now: string;
  /** Milliseconds from the time `from` to now. */
  ms(from: string): string;
  /** A timestamp column selected as `alias`, readable by the driver. */
  timestamp(column: string, alias: string): string;
  /** `column` more than the bound milliseconds ago. */
  olderThan(column: string, p: SqlParams, ms: number): string;
  /** Type names of CAST to an integer and to text. */
  readonly integer: string;
  readonly text: string;
  /** Aggregate names as this dialect's SQL spells them. */
  readonly count: string;
  readonly min: string;
  /** The summary columns (see `AdminRow`). */
  readonly summary: string;
}

/** `blockedKeys` and `stuckLeases` for the databases that share their shape. */
export function correlatedAdminQueries(
  v: CorrelatedAdminVocabulary,
): Pick<AdminDialect, 'blockedKeys' | 'stuckLeases'> {
  const NOW = v.now;
  return {
    blockedKeys: (n, p, policy, after, limit) => {
      const t = n.table;
      const from = after === null ? '' : `AND o.id > CAST(${p.add(after)} AS ${v.integer})`;
      const followers = `FROM ${t} AS w WHERE w.message_key = h.k AND w.id > h.head AND w.status IN ('pending', 'waiting')`;
      return `SELECT * FROM (
  SELECT h.k AS message_key, o.headers AS head_headers, CAST(o.id AS ${v.text}) AS head_id, o.message_id AS head_message_id, o.status AS head_status,
    o.attempts, o.last_error, ${v.timestamp('o.available_at', 'available_at')}, o.id AS head_order,
    (SELECT ${v.count}(*) ${followers}) AS waiting,
    (SELECT ${v.ms(`${v.min}(w.created_at)`)} ${followers}) AS oldest_waiting_ms
  FROM (
    SELECT message_key AS k, ${v.min}(id) AS head FROM ${t}
    WHERE message_key IS NOT NULL AND ${blockingCondition('', policy)}
    GROUP BY message_key) AS h
  JOIN ${t} AS o ON o.id = h.head
  WHERE (o.status = 'dead' OR (o.status = 'pending' AND o.available_at > ${NOW}
      AND (o.locked_until IS NULL OR o.locked_until < ${NOW}) AND (o.attempts > 0 OR o.last_error IS NOT NULL)))
    ${from}) AS b
WHERE b.waiting > 0
ORDER BY b.head_order
LIMIT ${p.add(limit)}`;
    },
    stuckLeases: (n, p, longerThanMs, after, limit) => {
      const long =
        longerThanMs === null ? '' : ` OR ${v.olderThan('o.last_attempt_at', p, longerThanMs)}`;
      const from = after === null ? '' : `AND o.id > CAST(${p.add(after)} AS ${v.integer})`;
      return `SELECT ${v.summary},
  CASE WHEN o.locked_until < ${NOW} THEN 1 ELSE 0 END AS lease_expired, ${v.ms('o.last_attempt_at')} AS leased_ms
FROM ${n.table} AS o
WHERE o.status = 'pending' AND o.locked_until IS NOT NULL AND (o.locked_until < ${NOW}${long}) ${from}
ORDER BY o.id
LIMIT ${p.add(limit)}`;
    },
  };
}
