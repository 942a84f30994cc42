import { assertIdentifier, type OutboxTableNames } from '../../internal/sql-identifier';

// The statements of log tailing on PostgreSQL (docs/log-tailing.md) outside the store: the
// publication, the replication slot, and the checks of both. The lease of the rows the log
// names is the store's (lib/store/postgres/postgres.claim-ids-sql.ts).

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
  // From PostgreSQL 15 the publication carries the columns the reader uses: the server then
  // sends about 50 bytes per insert instead of the whole row (payload included), and the reader
  // parses that much. An older server publishes the whole row. Dynamic, so that an older
  // server's PL/pgSQL never parses a column list. A list made by an earlier release without
  // `available_at` (when a delayed message falls due, which the partition owner reading the log
  // needs) is made again with it, in the same transaction.
  const table = `${n.table} (id, message_key, available_at)`;
  return [
    `DO $$
DECLARE
  listed boolean := current_setting('server_version_num')::int >= 150000;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '${publication}') THEN
    EXECUTE 'CREATE PUBLICATION "${publication}" FOR TABLE '
      || CASE WHEN listed THEN '${table}' ELSE '${n.table}' END
      || ' WITH (publish = ''insert'', publish_via_partition_root = true)';
  ELSIF NOT EXISTS (
    SELECT 1 FROM pg_publication_tables AS t
    WHERE t.pubname = '${publication}'
      AND format('%I.%I', t.schemaname, t.tablename)::regclass = '${n.table}'::regclass) THEN
    EXECUTE 'ALTER PUBLICATION "${publication}" ADD TABLE '
      || CASE WHEN listed THEN '${table}' ELSE '${n.table}' END;
  ELSIF listed AND EXISTS (
    SELECT 1 FROM pg_publication_tables AS t
    WHERE t.pubname = '${publication}'
      AND format('%I.%I', t.schemaname, t.tablename)::regclass = '${n.table}'::regclass
      AND NOT ('available_at' = ANY(t.attnames))) THEN
    EXECUTE 'ALTER PUBLICATION "${publication}" DROP TABLE ${n.table}';
    EXECUTE 'ALTER PUBLICATION "${publication}" ADD TABLE ${table}';
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
