import { blockingCondition } from '../shared-sql/dead-blocking';
import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { claimable, POSTGRES_CLAIMED_COLUMNS, unleased } from './postgres.sql';

// The lease of rows the database's log named (log tailing, docs/log-tailing.md). Apart from
// postgres.sql.ts, which the polling claim owns, so that the two can change independently; the
// publication and slot are log tailing's own (lib/log-tailing/postgres/).

/**
 * $1 owner, $2 token, $3 lease ms, $4 ids (bigint[]): leases the rows of `$4` a claim could
 * take (pending, due, unleased) and, under ordering, only those with no earlier blocking row
 * of their key outside the rows this statement locked: what it leases of a key is a prefix of
 * the key's queue, exactly what the polling claim could lease there. The same lease, token and
 * attempt as the claim, so settle, fencing and promotion apply unchanged.
 *
 * Each answer row is a leased row, or (id null) one row carrying `unseen`: the ids of `$4` the
 * statement's snapshot does not show at all. The log can hand over a commit a moment before a
 * new snapshot sees it (PITFALLS.md); the caller asks again for those, and never drops them.
 * It also carries `due_in_ms`: how long until the first row that holds back a row of `$4` and is
 * pending, unleased and not due yet (a delayed message, a retry backing off) becomes due, on the
 * database clock: a row of `$4` itself, or the head of the key of one held back here. A head
 * backing off may have been settled by another process, whose retry timer this one does not
 * have: without it, the key's rows would wait for the table's periodic sweep.
 */
export function postgresClaimIds(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  // Locked in id order: a key's rows in its queue order, and two tailers (there is one per
  // slot, but a takeover can overlap a stalled one) lock in the same order.
  // Joined from the ids, so that each is one primary-key probe: written as `id = ANY($4)`, the
  // generic plan of a table without statistics yet (a fresh backlog) walked the whole pending
  // index and tested every entry against the array (215 ms for 500 ids of 30 000, not 2).
  const locked = `c AS MATERIALIZED (
  SELECT c.id, c.message_key FROM (SELECT DISTINCT unnest($4::int8[]) AS id) AS x
  JOIN ${t} AS c ON c.id = x.id
  WHERE ${claimable('c')}
  ORDER BY c.id
  FOR UPDATE OF c SKIP LOCKED)`;
  const heads = policy.ordered
    ? `g AS MATERIALIZED (
  SELECT c.id FROM c
  WHERE c.message_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM ${t} AS e
    WHERE e.message_key = c.message_key AND e.id < c.id
      AND ${blockingCondition('e', policy)}
      AND e.id NOT IN (SELECT l.id FROM c AS l)))`
    : `g AS MATERIALIZED (SELECT c.id FROM c)`;
  // Each key held back here: its head (first blocking row outside the lock), when not due yet.
  // The keys of the rows locked but not leased, and of the rows named that a claim could not
  // take: parked ones above all (a sweep that met them behind a head backing off parked them,
  // found nothing due, and looks again only at its next poll).
  const heldHeadsDue = policy.ordered
    ? `
CROSS JOIN (
  SELECT ceil(extract(epoch FROM min(h.available_at) - now()) * 1000)::float8 AS due_in_ms
  FROM (SELECT c.message_key FROM c
    WHERE c.message_key IS NOT NULL AND c.id NOT IN (SELECT g.id FROM g)
    UNION
    SELECT w.message_key FROM r JOIN ${t} AS w ON w.id = r.id
    WHERE w.status = 'waiting' AND w.message_key IS NOT NULL) AS k
  CROSS JOIN LATERAL (
    SELECT e.status, e.available_at, e.locked_until FROM ${t} AS e
    WHERE e.message_key = k.message_key AND ${blockingCondition('e', policy)}
      AND e.id NOT IN (SELECT l.id FROM c AS l)
    ORDER BY e.id LIMIT 1) AS h
  WHERE h.status = 'pending' AND h.available_at > now() AND ${unleased('h')}) AS hd`
    : `
CROSS JOIN (SELECT NULL::float8 AS due_in_ms) AS hd`;
  return `WITH ${locked},
${heads},
o AS (
  UPDATE ${t} AS o
  SET locked_by = $1, lock_token = $2::uuid, locked_until = now() + $3 * interval '1 millisecond',
    attempts = o.attempts + 1, last_attempt_at = now()
  FROM g WHERE o.id = g.id
  RETURNING ${POSTGRES_CLAIMED_COLUMNS}),
-- The ids the lock did not take: only they can be unseen or not due yet (most leases take all).
r AS MATERIALIZED (
  SELECT x.id FROM unnest($4::int8[]) AS x(id) WHERE x.id NOT IN (SELECT c.id FROM c))
SELECT o.*, b.unseen, least(d.due_in_ms, hd.due_in_ms) AS due_in_ms FROM (
  SELECT array_agg(r.id::text) AS unseen FROM r
  WHERE NOT EXISTS (SELECT 1 FROM ${t} AS s WHERE s.id = r.id)) AS b
CROSS JOIN (
  SELECT ceil(extract(epoch FROM min(s.available_at) - now()) * 1000)::float8 AS due_in_ms
  FROM ${t} AS s WHERE s.id IN (SELECT r.id FROM r) AND s.status = 'pending'
    AND s.available_at > now() AND ${unleased('s')}) AS d${heldHeadsDue}
LEFT JOIN o ON true`;
}
