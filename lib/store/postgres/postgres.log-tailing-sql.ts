import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import { assertIdentifier, type OutboxTableNames } from '../../internal/sql-identifier';
import { blockingStatuses, claimable, POSTGRES_CLAIMED_COLUMNS, unleased } from './postgres.sql';

// The statements of log tailing on PostgreSQL (docs/log-tailing.md): the lease of rows the log
// named, and the DDL of the publication. Apart from postgres.sql.ts, which the polling claim
// owns, so that the two can change independently.

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
 * It also carries `due_in_ms`: how long until the first row of `$4` that is pending, unleased
 * and not due yet (a delayed message, a retry backing off) becomes due, on the database clock.
 */
export function postgresClaimIds(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  // Locked in id order: a key's rows in its queue order, and two tailers (there is one per
  // slot, but a takeover can overlap a stalled one) lock in the same order.
  const locked = `c AS MATERIALIZED (
  SELECT c.id, c.message_key FROM ${t} AS c
  WHERE c.id = ANY($4::int8[]) AND ${claimable('c')}
  ORDER BY c.id
  FOR UPDATE OF c SKIP LOCKED)`;
  const heads = policy.ordered
    ? `g AS MATERIALIZED (
  SELECT c.id FROM c
  WHERE c.message_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM ${t} AS e
    WHERE e.message_key = c.message_key AND e.id < c.id
      AND e.status IN ${blockingStatuses(policy.deadBlocksKey)}
      AND e.id NOT IN (SELECT l.id FROM c AS l)))`
    : `g AS MATERIALIZED (SELECT c.id FROM c)`;
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
SELECT o.*, b.unseen, d.due_in_ms FROM (
  SELECT array_agg(r.id::text) AS unseen FROM r
  WHERE NOT EXISTS (SELECT 1 FROM ${t} AS s WHERE s.id = r.id)) AS b
CROSS JOIN (
  SELECT ceil(extract(epoch FROM min(s.available_at) - now()) * 1000)::float8 AS due_in_ms
  FROM ${t} AS s WHERE s.id IN (SELECT r.id FROM r) AND s.status = 'pending'
    AND s.available_at > now() AND ${unleased('s')}) AS d
LEFT JOIN o ON true`;
}

/** The replication slot and publication of one outbox table. */
export interface PostgresLogNames {
  /** The publication on the outbox table (an identifier, validated). */
  readonly publication: string;
  /** The logical replication slot (lower case letters, digits and `_`, at most 63). */
  readonly slot: string;
}

const SLOT_NAME = /^[a-z0-9_]{1,63}$/;

/**
 * The default names, so that two outboxes never share a slot: the publication (one per
 * database) `outbox_<schema>_<table>`, the slot (one per server, tied to a database)
 * `outbox_<database>_<schema>_<table>`; lower-cased, anything but letters, digits and `_` as
 * `_`, cut to 63 with a hash of the whole when longer (two long names must not collide once cut).
 */
export function postgresLogNames(
  schema: string,
  tableName: string,
  database: string,
): PostgresLogNames {
  return {
    publication: logName(`outbox_${schema}_${tableName}`, `${schema}.${tableName}`),
    slot: logName(
      `outbox_${database}_${schema}_${tableName}`,
      `${database}.${schema}.${tableName}`,
    ),
  };
}

function logName(name: string, whole: string): string {
  const base = name.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  return base.length <= 63 ? base : `${base.slice(0, 54)}_${shortHash(whole)}`;
}

/** Whether a slot name is one PostgreSQL accepts (it only takes these characters). */
export function isSlotName(name: string): boolean {
  return SLOT_NAME.test(name);
}

function shortHash(text: string): string {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return (h >>> 0).toString(16).padStart(8, '0');
}

/**
 * The DDL log tailing needs on the server, idempotent: the publication of the outbox table's
 * inserts (the tailer needs no other change: outcomes are in the table, read by id), published
 * under the root table when the table is partitioned. A publication that exists and does not
 * cover the table (the table was dropped and made again, which takes it out of every
 * publication) gets it added. The slot is not DDL (see `POSTGRES_CREATE_SLOT`).
 * `publication` is checked as an identifier here (letters, digits, `_`) and the table's names
 * were when `n` was made, so none needs escaping inside the string constants.
 */
export function postgresLogTailingDdl(n: OutboxTableNames, publication: string): string[] {
  assertIdentifier(publication, 'publicationName');
  // Compared as regclass: the publication lists the table by schema and name, `n.table` may be
  // unqualified (the search path's schema), and a partition root is listed under its own name.
  return [
    `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '${publication}') THEN
    CREATE PUBLICATION "${publication}" FOR TABLE ${n.table} WITH (publish = 'insert', publish_via_partition_root = true);
  ELSIF NOT EXISTS (
    SELECT 1 FROM pg_publication_tables AS t
    WHERE t.pubname = '${publication}'
      AND format('%I.%I', t.schemaname, t.tablename)::regclass = '${n.table}'::regclass) THEN
    ALTER PUBLICATION "${publication}" ADD TABLE ${n.table};
  END IF;
END $$`,
  ];
}

/** $1 slot name: creates the logical slot with pgoutput unless it exists. */
export const POSTGRES_CREATE_SLOT = `SELECT slot_name FROM pg_create_logical_replication_slot($1, 'pgoutput')
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`;

/**
 * $1 slot name: the slot's state, the WAL it keeps (bytes past its confirmed position), whether
 * the server invalidated it (`wal_status` 'lost': it kept more than `max_slot_wal_keep_size`),
 * and the server process reading it (`active_pid`, null when none does).
 */
export const POSTGRES_SLOT_STATUS = `SELECT s.slot_name, s.active, s.plugin, s.database,
  s.confirmed_flush_lsn::text AS confirmed_flush_lsn,
  greatest(0, pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn))::float8 AS retained_bytes,
  s.wal_status, s.active_pid
FROM pg_replication_slots AS s WHERE s.slot_name = $1`;

/** $1 slot name: drops the slot if the server invalidated it and no session reads it. */
export const POSTGRES_DROP_LOST_SLOT = `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = $1 AND wal_status = 'lost' AND NOT active`;

/**
 * The sessions with an open write transaction (an xid), oldest first: a new logical slot waits
 * for each of them to end. Other roles' sessions show their xid only to a role with
 * `pg_read_all_stats`; prepared transactions (which hold it too) are listed with pid 0.
 */
export const POSTGRES_SLOT_BLOCKERS = `SELECT * FROM (
  SELECT a.pid, a.xact_start::text AS xact_start, a.usename::text AS usename,
    a.datname::text AS datname, a.application_name, a.state, a.xact_start AS started
  FROM pg_stat_activity AS a WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
  UNION ALL
  SELECT 0, p.prepared::text, p.owner::text, p.database::text, 'prepared transaction ' || p.gid, 'prepared', p.prepared
  FROM pg_prepared_xacts AS p) AS b
ORDER BY b.started NULLS LAST LIMIT 5`;

/** $1 slot name: drops the slot (fails while a reader is active on it). */
export const POSTGRES_DROP_SLOT = `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`;

/** The settings log tailing checks: the WAL level, and whether the role may replicate. */
export const POSTGRES_LOG_SETTINGS = `SELECT current_setting('wal_level') AS wal_level, current_database() AS database_name,
  (SELECT r.rolreplication OR r.rolsuper FROM pg_roles AS r WHERE r.rolname = current_user) AS can_replicate,
  current_user AS role_name`;

/**
 * The SQL that removes the publication (after the slot: a slot outlives its publication, but
 * a reader of it then fails).
 */
export function postgresDropPublication(publication: string): string {
  assertIdentifier(publication, 'publicationName');
  return `DROP PUBLICATION IF EXISTS "${publication}"`;
}

/** $1 publication, $2 schema, $3 table: whether the publication exists and covers the table. */
export const POSTGRES_PUBLICATION_STATUS = `SELECT p.pubname, p.pubinsert,
  EXISTS (SELECT 1 FROM pg_publication_tables AS t WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3) AS covers
FROM pg_publication AS p WHERE p.pubname = $1`;
