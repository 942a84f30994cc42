import type { PurgeTypes } from '../ports/outbox-store.port';
import { eventTypeFilter } from '../shared-sql/event-type-filter';
import {
  blockingCondition,
  deadRowBlocks,
  someDeadSkip,
  andDeadRowSkips,
} from '../shared-sql/dead-blocking';
import { OWNER_TOKEN_VERSION } from '../shared-sql/owner-leases';
import {
  ATTEMPT_COLUMNS,
  ATTEMPT_HISTORY_LIMIT,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from '../shared-sql/attempt-history';
import { ARCHIVE_INSERT_COLUMNS, archivedValues } from '../shared-sql/outbox-archive';
import { IN_FLIGHT_GRACE_MS } from '../shared-sql/claim-window';
import {
  dropTableDdl,
  partialIndexesDdl,
  type IndexCatalogQuery,
} from '../schema/partial-indexes.sql';
import type { OutboxQueuePolicy, Settlement } from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { payloadColumnDefinitions, type PayloadColumnTypes } from '../schema/payload-columns';

const PAYLOAD_TYPES: PayloadColumnTypes = {
  text: (length) => `varchar(${length})`,
  bytes: 'bytea',
  json: 'json',
};

/** Step 4 on an existing table: adds only what is missing, without rewriting the table. */
export function postgresAddPayloadColumns(n: OutboxTableNames): string {
  return `ALTER TABLE ${n.table} ${payloadColumnDefinitions(PAYLOAD_TYPES)
    .map((column) => `ADD COLUMN IF NOT EXISTS ${column}`)
    .join(', ')}`;
}

export function postgresDropPayloadColumns(n: OutboxTableNames): string {
  return `ALTER TABLE ${n.table} DROP COLUMN IF EXISTS payload_encoding, DROP COLUMN IF EXISTS content_type, DROP COLUMN IF EXISTS payload_bytes, DROP COLUMN IF EXISTS broker_attributes`;
}

/**
 * The outbox table's columns on PostgreSQL, one definition shared by the plain and the
 * partitioned layout (postgres.partition-sql.ts), so a column added here is in both. The
 * identity has no PRIMARY KEY here: the plain table keys on `id`, the partitioned one on
 * `(id, created_at)`.
 */
export function postgresOutboxColumns(): string {
  return `  id bigint GENERATED ALWAYS AS IDENTITY,
  message_id uuid NOT NULL,
  topic varchar(255) NOT NULL,
  message_key varchar(255),
  event_type varchar(255) NOT NULL,
  payload json NOT NULL,
  headers json NOT NULL DEFAULT '{}',
  status varchar(16) NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  locked_by varchar(128),
  lock_token uuid,
  locked_until timestamptz,
  last_error text,
  last_attempt_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  dead_at timestamptz,
  ${payloadColumnDefinitions(PAYLOAD_TYPES).join(',\n  ')}`;
}

/** Every status a row may have: the table's check allows these and no other. */
const STATUSES = ['pending', 'waiting', 'delivered', 'dead'] as const;

/** `('a', 'b', …)`: a list of statuses as SQL. */
function statusList(statuses: readonly string[]): string {
  return `(${statuses.map((s) => `'${s}'`).join(', ')})`;
}

/** The status check, shared by both layouts. */
export function postgresStatusCheck(n: OutboxTableNames): string {
  return `CONSTRAINT ${n.quote(`${n.tableName}_status_check`)} CHECK (status IN ${statusList(STATUSES)})`;
}

/**
 * `status = 'pending'` written as none of the other statuses the check allows: the same rows,
 * but a condition the pending index (`WHERE status = 'pending'`) cannot answer (see postgresPark).
 */
const PENDING_BY_EXCLUSION = `NOT IN ${statusList(STATUSES.filter((s) => s !== 'pending'))}`;

/**
 * How full an insert leaves a page of the outbox table, in per cent: the rest is room for the
 * row's next versions on the same page. A claim's lease writes no indexed column, so with room
 * beside the row it is a heap-only (HOT) update that adds no index entries, and the settle's
 * version can land on the same page too. Bench P2 (PostgreSQL → Kafka, 4 rounds alternating,
 * docs/performance.md "Room for the lease"): the module's drain 1.14 × faster at 70 than at
 * the default 100; 50 was as fast marking and faster deleting, but holds retained history at
 * about 2.3 × the pages of a packed table of 1 KiB rows, where 70 holds it at 1.5–1.7 ×.
 */
export const POSTGRES_FILLFACTOR = 70;

/** The storage clause of the outbox table and of each of its partitions. */
export const POSTGRES_TABLE_STORAGE = `WITH (fillfactor = ${POSTGRES_FILLFACTOR})`;

/**
 * Not leased, or leased no longer (`alias.` prefixes the columns): a claim reads past rows in
 * flight, which keep their place in the pending index (see postgresClaim).
 */
export function unleased(alias?: string): string {
  const c = alias === undefined ? '' : `${alias}.`;
  return `(${c}locked_until IS NULL OR ${c}locked_until < now())`;
}

/**
 * What a claim may take (alias `c`): pending, due on the database clock, and not leased. The
 * window, the lock step and the claim without ordering all test the same.
 */
export function claimable(alias: string): string {
  return `${alias}.status = 'pending' AND ${alias}.available_at <= now() AND ${unleased(alias)}`;
}

/** DDL of the outbox table on PostgreSQL 12+. */
export function postgresCreateTable(n: OutboxTableNames): string[] {
  const t = n.table;
  const schema = n.schema === null ? [] : [`CREATE SCHEMA IF NOT EXISTS ${n.quote(n.schema)}`];
  return [
    ...schema,
    `CREATE TABLE IF NOT EXISTS ${t} (
${postgresOutboxColumns()},
  CONSTRAINT ${n.quote(`${n.tableName}_pkey`)} PRIMARY KEY (id),
  CONSTRAINT ${n.quote(`${n.tableName}_message_id_key`)} UNIQUE (message_id),
  ${postgresStatusCheck(n)}
) ${POSTGRES_TABLE_STORAGE}`,
    ...partialIndexesDdl(n),
    postgresWaitingIndex(n),
  ];
}

export const postgresDropTable = dropTableDdl;

/**
 * DDL of the attempt history (see attempt-history.ts). Its index serves the detail view, the
 * per-message bound and the deletes with the message.
 */
export function postgresCreateHistoryTable(n: OutboxTableNames): string[] {
  // The schema exists: the outbox table's statements, which come first, create it.
  return [
    `CREATE TABLE IF NOT EXISTS ${n.attemptsTable} (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id uuid NOT NULL,
  attempt integer NOT NULL,
  outcome varchar(16) NOT NULL,
  locked_by varchar(128),
  error_class varchar(128),
  error text,
  failed_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck()}
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_attempts_msg`)} ON ${n.attemptsTable} (message_id, id)`,
  ];
}

export function postgresDropHistoryTable(n: OutboxTableNames): string[] {
  return [`DROP TABLE IF EXISTS ${n.attemptsTable}`];
}

/** DDL of the archive (see outbox-archive.ts), indexed for lookups by message and by age. */
export function postgresCreateArchiveTable(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.archiveTable} (
  archive_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  outbox_id bigint NOT NULL,
  message_id uuid NOT NULL,
  topic varchar(255) NOT NULL,
  message_key varchar(255),
  event_type varchar(255) NOT NULL,
  payload json NOT NULL,
  headers json NOT NULL,
  status varchar(16) NOT NULL,
  attempts integer NOT NULL,
  last_error text,
  last_attempt_at timestamptz,
  created_at timestamptz NOT NULL,
  delivered_at timestamptz,
  dead_at timestamptz,
  ${payloadColumnDefinitions(PAYLOAD_TYPES).join(',\n  ')},
  archived_at timestamptz NOT NULL DEFAULT now()
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_archive_msg`)} ON ${n.archiveTable} (message_id)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_archive_at`)} ON ${n.archiveTable} (archived_at)`,
  ];
}

/**
 * Whether the statement runs inside the caller's open transaction, read by the statement itself:
 * a transaction with a transaction id has written before, and a statement that runs on its own
 * (autocommit, after the caller's transaction ended) starts with none. The insert writes only
 * when it is true, so no statement of the app (a ROLLBACK sent before an enqueue that was not
 * awaited reached the connection) can come between the check and the write. A transaction that
 * has not written yet has no id either: the store then gives it one (`POSTGRES_OPEN_TRANSACTION`)
 * and tries again. Nothing in the insert assigns an id before the check (advisory locks and
 * pg_notify do not), and a row is written only after it passed, so the answer cannot change
 * within the statement.
 */
const IN_TRANSACTION = `(SELECT txid_current_if_assigned() IS NOT NULL AS open) AS tx`;

/**
 * The check's place in a statement the port sends only where the driver knows it runs inside
 * the caller's open transaction (`SqlQueryOptions.inTransaction`): nothing left to check, but the
 * transaction is given its id here, before the rows take theirs. A row's id is taken from the
 * sequence before the insert writes, and a transaction whose first write is that insert would
 * otherwise have no transaction id then: a partition owner's read in that moment would not count
 * it as running, and its read floor could pass the row before it commits (ARCHITECTURE.md,
 * "Partitioned delivery", 6). The checked form needs an id before it writes anyway.
 */
const UNCHECKED = `(SELECT txid_current() IS NOT NULL AS open) AS tx`;

/** The transaction check as a FROM item: `IN_TRANSACTION`, or none when `checked` is false. */
function transactionCheck(checked: boolean): string {
  return checked ? IN_TRANSACTION : UNCHECKED;
}

/**
 * Gives the caller's transaction its transaction id, so that the guarded insert may write. Sent
 * after an insert refused for want of one; outside a transaction it is a statement of its own
 * (an id spent on nothing), and the insert after it is refused again.
 */
export const POSTGRES_OPEN_TRANSACTION = 'SELECT txid_current()';

/**
 * An idempotent insert (`w`, with RETURNING) as one statement answering the ids written and,
 * when the transaction check refused it, one row with `open` false: with ON CONFLICT an empty
 * answer alone would not tell a refusal from ids that were all there already.
 */
function withRefusal(ctes: readonly string[], insert: string, checked: boolean): string {
  return `WITH tx AS (SELECT ${checked ? 'txid_current_if_assigned()' : 'txid_current()'} IS NOT NULL AS open)${ctes.map((c) => `, ${c}`).join('')}, w AS (${insert})
SELECT id, true AS open FROM w
UNION ALL SELECT NULL, false FROM tx WHERE NOT tx.open`;
}

/**
 * One statement: take the per-key transaction locks (when asked), then insert the rows in array
 * order, inside the caller's transaction only (`IN_TRANSACTION`: a plain insert answers 0 rows
 * when refused, an idempotent one a row with `open` false). The lock subquery is an aggregate,
 * so every lock is held before the first row gets its id; that makes a key's id order its commit
 * order.
 */
export function postgresInsert(
  n: OutboxTableNames,
  scheduled: boolean,
  lockKeys: boolean,
  notify: boolean,
  idempotent = false,
  extended = false,
  partitioned = false,
  checked = true,
): string {
  // Binary payloads and broker attributes (EXTENDED_*) only when a row has one: the JSON path
  // binds and writes what it did before step 4.
  const cols = `message_id, topic, message_key, event_type, payload, headers${extended ? EXTENDED_COLUMNS : ''}`;
  const arrays = `$1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]${extended ? ', $7::text[], $8::text[], $9::text[], $10::text[]' : ''}`;
  let next = extended ? 11 : 7;
  const schedule = scheduled ? `, $${next++}::timestamptz[], $${next++}::int8[]` : '';
  let extra = '';
  if (lockKeys) {
    extra += ` CROSS JOIN (SELECT count(pg_advisory_xact_lock($${next++}::int4, k)) FROM unnest($${next++}::int4[]) AS k) AS lk`;
  }
  if (notify) extra += ` CROSS JOIN (SELECT pg_notify($${next++}::text, '')) AS nt`;
  // In a CTE the transaction check is the CTE `tx`; in a plain insert, its FROM item.
  const check = idempotent ? 'tx' : transactionCheck(checked);
  // A delay counts from the enqueue call (clock_timestamp), not from the start of the business
  // transaction (now()), which may have begun long before. A row of a scheduled batch that has
  // neither a time nor a delay is due as an unscheduled one is, at the column's default, now().
  const rows = `INSERT INTO ${n.table} (${cols}${scheduled ? ', available_at' : ''})
SELECT u.m, u.t, u.k, u.y, u.p::json, u.h::json${extended ? `, u.e, u.c, decode(u.b, 'base64'), u.x::json` : ''}${scheduled ? `, COALESCE(u.a, clock_timestamp() + u.d * interval '1 millisecond', now())` : ''}
FROM ${check} CROSS JOIN unnest(${arrays}${schedule}) WITH ORDINALITY AS u(m, t, k, y, p, h${extended ? ', e, c, b, x' : ''}${scheduled ? ', a, d' : ''}, ord)${extra}
WHERE tx.open`;
  if (idempotent && partitioned) {
    // The guard takes the place of UNIQUE (message_id): only the ids it accepted are written.
    // The caller passes each id once (a batch repeating one would write it twice).
    return withRefusal(
      [guardIds(n, 'SELECT m FROM tx CROSS JOIN unnest($1::uuid[]) AS m', 'm')],
      `${rows} AND u.m IN (SELECT message_id FROM g)
ORDER BY u.ord
RETURNING message_id::text AS id`,
      checked,
    );
  }
  if (idempotent) {
    // A concurrent insert of the same id waits for the first to commit, then does nothing; the
    // ids it returns are the ones written, so the caller learns which were already there.
    return withRefusal(
      [],
      `${rows}
ORDER BY u.ord
ON CONFLICT (message_id) DO NOTHING
RETURNING message_id::text AS id`,
      checked,
    );
  }
  return `${rows}
ORDER BY u.ord`;
}

/**
 * The step-4 columns an extended insert writes after headers: encoding, content type, the bytes
 * (bound as base64 text, so that every SQL port binds them alike) and the broker attributes.
 */
const EXTENDED_COLUMNS = ', payload_encoding, content_type, payload_bytes, broker_attributes';

/**
 * On a partitioned table (no unique key without created_at): the CTE `g` of the supplied ids
 * that are new, written only inside the caller's transaction (`select` reads `tx`). The guard's
 * primary key serialises two writers of one id as UNIQUE (message_id) does (the second waits for
 * the first to commit, then skips); NOT EXISTS also skips an id already in the table without a
 * guard row (one the outbox generated, given again).
 */
function guardIds(n: OutboxTableNames, select: string, id: string): string {
  return `g AS (INSERT INTO ${n.idsTable} (message_id)
  ${select} WHERE tx.open AND NOT EXISTS (SELECT 1 FROM ${n.table} AS x WHERE x.message_id = ${id})
  ON CONFLICT (message_id) DO NOTHING
  RETURNING message_id)`;
}

/**
 * $1–$6 one row's message id, topic, key, type, payload, headers; with `extended` $7–$10 its
 * encoding, content type, base64 bytes and attributes; then with `scheduled` the due
 * time and delay, with `lockKey` the lock namespace and the key's lock id, with `notify` the
 * channel. The one-message form of `postgresInsert`, for the common enqueue of one event: plain
 * parameters instead of arrays and `unnest`, a third of the statement's cost on the server.
 * Written inside the caller's transaction only, as `postgresInsert` is.
 */
export function postgresInsertOne(
  n: OutboxTableNames,
  scheduled: boolean,
  lockKey: boolean,
  notify: boolean,
  idempotent: boolean,
  extended = false,
  partitioned = false,
  checked = true,
): string {
  let next = extended ? 11 : 7;
  const due = scheduled
    ? `, COALESCE($${next++}::timestamptz, clock_timestamp() + $${next++}::int8 * interval '1 millisecond')`
    : '';
  // The key's lock comes first: it is taken (the FROM item is evaluated) before the row gets its
  // id, so a key's ids follow its commit order as with the many-row form.
  const from = [
    ...(lockKey
      ? [`(SELECT pg_advisory_xact_lock($${next++}::int4, $${next++}::int4)) AS lk`]
      : []),
    ...(notify ? [`(SELECT pg_notify($${next++}::text, '')) AS nt`] : []),
  ];
  const insert = `INSERT INTO ${n.table} (message_id, topic, message_key, event_type, payload, headers${extended ? EXTENDED_COLUMNS : ''}${scheduled ? ', available_at' : ''})
SELECT $1::uuid, $2::text, $3::text, $4::text, $5::json, $6::json${extended ? `, $7::text, $8::text, decode($9::text, 'base64'), $10::json` : ''}${due}`;
  if (idempotent && partitioned) {
    return withRefusal(
      [guardIds(n, 'SELECT $1::uuid FROM tx', '$1::uuid')],
      `${insert}
FROM ${['tx', 'g', ...from].join(', ')}
WHERE tx.open
RETURNING message_id::text AS id`,
      checked,
    );
  }
  if (idempotent) {
    return withRefusal(
      [],
      `${insert}
FROM ${['tx', ...from].join(', ')}
WHERE tx.open
ON CONFLICT (message_id) DO NOTHING
RETURNING message_id::text AS id`,
      checked,
    );
  }
  return `${insert}
FROM ${[transactionCheck(checked), ...from].join(', ')}
WHERE tx.open`;
}

/**
 * The columns a claim returns for each leased row (alias `o`), as the row mapper reads them. The
 * bench's lease relay returns the same, so that it reads and sends what the module's claim does.
 *
 * The times as milliseconds in a double (date_part's type on every version, where extract
 * answers numeric since PostgreSQL 14): the driver reads them with parseFloat, where a
 * timestamptz went through a date parser, about 1 µs a row of the dispatcher's CPU (0.2 µs
 * now, a micro-benchmark), and the server writes a float more cheaply than a timestamp.
 */
export const POSTGRES_CLAIMED_COLUMNS = `o.id::text AS id, o.message_id::text AS message_id, o.topic, o.message_key, o.event_type,
  o.payload::text AS payload, o.headers::text AS headers, o.attempts,
  date_part('epoch', o.created_at) * 1000 AS created_at,
  o.payload_encoding, o.content_type, encode(o.payload_bytes, 'base64') AS payload_bytes,
  o.broker_attributes::text AS broker_attributes,
  date_part('epoch', now() - o.created_at) * 1000 AS age_ms`;

/**
 * The first message of a key that holds back its later ones (the key's head): an ordered probe
 * of the key index that stops at the first row. Callers run it with sequential and bitmap scans
 * disabled (the planner settings of postgresOpening, set by the store's transactions).
 *
 * PostgreSQL has no hints, and with statistics taken while one key filled the table it believes
 * any key matches nearly every row: it then answered `EXISTS (… e.message_key = c.message_key
 * AND e.id < c.id …)` with a sequential scan, and `… ORDER BY e.id LIMIT 1` by reading the
 * primary key in id order, filtering on the key (1.6 s per claim over a 100 000-row backlog).
 * Written as a range on the key, `message_key` stays in the ORDER BY (an equality would make
 * it constant and drop it), so only the key index delivers the order and the primary key
 * cannot. With statistics of a nearly empty table, the planner instead expects a row or two
 * per key and may fetch them all and sort them (bitmap scan: 12 s per claim once one key had
 * 100 000 due rows): hence the settings, which leave the ordered index probe as the only plan
 * that reads and sorts nothing.
 */
function keyHead(
  t: string,
  key: string,
  columns: string,
  policy: OutboxQueuePolicy,
  before?: string,
): string {
  // `before`: only a row with an id below it. The bound is part of the index condition (a row
  // comparison, which PostgreSQL uses to stop the scan): when nothing of the key comes before
  // it, the probe ends in the index without reading a row of the table, however long the key's
  // queue behind it is.
  const below = before === undefined ? '' : ` AND (e.message_key, e.id) < (${key}, ${before})`;
  return `(SELECT ${columns} FROM ${t} AS e
      WHERE e.message_key >= ${key} AND e.message_key <= ${key}${below} AND ${blockingCondition('e', policy)}
      ORDER BY e.message_key, e.id LIMIT 1)`;
}

/**
 * A key's first `limit` blocking rows in queue order, as keyHead finds its first: the same
 * ordered probe of the key index, stopping after `limit` rows.
 */
function keyRows(
  t: string,
  key: string,
  limit: string,
  policy: OutboxQueuePolicy,
  columns = 'e.id, e.status',
  gone?: string,
): string {
  // `gone`: a CTE of rows the same statement takes out of the queue, which its snapshot still
  // shows as they were.
  const past = gone === undefined ? '' : ` AND e.id NOT IN (SELECT ${gone}.id FROM ${gone})`;
  return `(SELECT ${columns} FROM ${t} AS e
      WHERE e.message_key >= ${key} AND e.message_key <= ${key} AND ${blockingCondition('e', policy)}${past}
      ORDER BY e.message_key, e.id LIMIT ${limit})`;
}

/** Whether a probed row (alias `e`) is a head in flight: leased less than the grace ago. */
const FLYING = `e.locked_until > now() AND e.last_attempt_at > now() - interval '${int32Literal(IN_FLIGHT_GRACE_MS)} milliseconds' AS flying`;

/**
 * The order of a key's rows as keyRows reads them, for window functions over one key's probe.
 * `ORDER BY e.id` alone is the same order (the key is fixed), but the planner cannot tell: it
 * sorted each key's rows again, a sort set up once per key probed (claim and promotion alike).
 */
const KEY_ORDER = 'ORDER BY e.message_key, e.id';

/**
 * The statements that open each of the dispatcher's transactions: JIT off (a promotion over a
 * key with a large parked backlog is estimated near jit_above_cost, and compiling it cost 15×
 * the statement, bench P9); the statement timeout; the idle timeout, which ends the transaction
 * on the server if its process freezes between statements (SIGSTOP, a long pause) so that its
 * row and advisory locks cannot hold up other dispatchers; the planner settings; with `plans`
 * 'generic' (the dispatch: claim, park, settle, promotion), generic plans for the named
 * statements, each planned once per connection (and again when the table's statistics change)
 * instead of on every call: planning took 0.6–0.8 ms of the server's time per claim and
 * 0.5–0.7 ms per settle, half the server's work in a claim of a few rows (docs/performance.md,
 * "Planned once per connection"). Their values steer no plan (the lease, the token, limits,
 * ids and keys): the shapes of those statements (materialised steps, key-index probes, no
 * scans) are the plans either way, which `claim-plans.spec` checks for both, under skewed
 * statistics too. With 'custom', a plan for every call with its values: the requeue of dead
 * letters reads by message id only when given ids (`$1 IS NULL OR …`), which a generic plan
 * cannot know. Then, as a statement of its own so that the timeout set before bounds its
 * waits, the dispatch locks of `lockIds` (sorted) in `namespace`.
 *
 * Without parameters, so that a port can send them in the same simple query as the BEGIN: every
 * value is an integer of the store's own, written as a literal only after checking it is one.
 *
 * `form` 'set' (for a port that sends the opening in that one query) writes the settings as
 * `SET LOCAL` statements, one per setting: a utility statement is neither planned nor executed
 * as a query, and the six of them cost the server a fraction of the one `SELECT set_config(…)`
 * that 'select' writes (which a port running the opening statement by statement needs, so that
 * the settings stay one round trip).
 */
export function postgresOpening(
  timeoutMs: number,
  namespace: number,
  lockIds: readonly number[],
  plans: 'generic' | 'custom' = 'generic',
  form: 'select' | 'set' = 'select',
): string[] {
  const timeout = int32Literal(timeoutMs);
  const values: readonly (readonly [string, string])[] = [
    ['statement_timeout', timeout],
    ['jit', 'off'],
    ['idle_in_transaction_session_timeout', timeout],
    // The planner settings: every key-head lookup stays an index probe whatever the statistics
    // say (see keyHead). The other statements read through indexes anyway; a scan disabled this
    // way is still used where nothing else can answer (costed, not forbidden).
    ['enable_seqscan', 'off'],
    ['enable_bitmapscan', 'off'],
    ['plan_cache_mode', plans === 'generic' ? 'force_generic_plan' : 'force_custom_plan'],
  ];
  const settings =
    form === 'set'
      ? values.map(([name, value]) => `SET LOCAL ${name} = ${value}`)
      : [
          `SELECT ${values.map(([name, value]) => `set_config('${name}', '${value}', true)`).join(', ')}`,
        ];
  if (lockIds.length === 0) return settings;
  const ids = lockIds.map(int32Literal).join(',');
  return [
    ...settings,
    `SELECT count(pg_advisory_xact_lock(${int32Literal(namespace)}, k)) FROM unnest('{${ids}}'::int4[]) AS k`,
  ];
}

/**
 * Appended to a claim's opening: the claims' turn on the table, lock `turnLock` in `namespace`,
 * waited for at most `waitMs` (`lock_timeout`, set for this transaction only: a claim takes no
 * other lock it could wait for). Without parameters, like the opening.
 */
export function postgresClaimTurn(
  namespace: number,
  turnLock: number,
  waitMs: number,
  form: 'select' | 'set' = 'select',
): string[] {
  const wait = int32Literal(waitMs);
  return [
    form === 'set'
      ? `SET LOCAL lock_timeout = ${wait}`
      : `SELECT set_config('lock_timeout', '${wait}', true)`,
    // count(): a column every port can read (Prisma cannot read a void one).
    `SELECT count(pg_advisory_xact_lock(${int32Literal(namespace)}, ${int32Literal(turnLock)}))`,
  ];
}

function int32Literal(value: number): string {
  if (!Number.isSafeInteger(value) || value < -2_147_483_648 || value > 2_147_483_647) {
    throw new RangeError(`not a 32-bit integer: ${String(value)}`);
  }
  return String(value);
}

/**
 * $1 owner, $2 token, $3 lease ms, $4 limit, $5 window, $6 (under ordering) the longest run.
 *
 * The claim reads a bounded window of due rows (in due order, through the pending index) and
 * leases the heads of their keys; under ordering, a head brings the rows of its key right
 * behind it that are in the window too (a run, see postgresRuns). Only the first $4 keys of the
 * window are looked up: a batch takes no more keys than rows. A leased row keeps its
 * `available_at` and its place in the pending index, and the window reads past it until its
 * lease expires (`unleased`): the lease then writes no indexed column, so on a page with room
 * (POSTGRES_FILLFACTOR) it is a heap-only update, with no new entry in any index. Rows found queued
 * behind an earlier message of their key that is not in the batch are reported (`blocked`) so
 * the dispatcher parks them: the window never fills up with the backlog of a stuck key. When
 * the key's head is in flight (in this batch, or leased by an earlier claim less than
 * IN_FLIGHT_GRACE_MS ago), they are only counted (`in_flight`, keys): its settle frees them sooner
 * than a park and a promotion would. The whole claim is one statement.
 */
export function postgresClaim(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  partitioned = false,
  /** A tenant-fair claim's share: one tenant's rows ($7, or $6 without ordering), or those of none. */
  tenant: TenantFilter = 'all',
): string {
  if (!policy.ordered) return unorderedClaim(n, partitioned, tenant);
  const t = n.table;
  const made = partitioned ? ', c.created_at AS made' : '';
  const window = `w AS MATERIALIZED (
  SELECT c.id, c.message_key, c.available_at AS due${made}
  FROM ${t} AS c
  WHERE ${claimable('c')}${tenantCondition('c', tenant, 7)}
  ORDER BY ${tenantOrder('c', tenant)}c.available_at, c.id
  LIMIT $5)`;
  // Heads first (every key's first row, in due order), then every key's second row, and so
  // on: a batch cut short by the limit shortens runs before it leaves a key out.
  // `g`: the locked rows whose run is whole, every earlier row of their key locked too (SKIP
  // LOCKED or the recheck can drop a run's head). A head always is; the rows past a head are
  // numbered only when `p` has any (a one-time EXISTS), so a batch of heads sorts nothing
  // (numbering all of `p` sorted it by key).
  // `x`: the probed keys with a row in the window outside their run, that is more rows in the
  // window (`k.n`) than in the run (the rows of `q` that are `whole`): one grouping of `q`,
  // instead of looking up every window row and sorting the keys for DISTINCT.
  // Neither joins CTEs: a join of two is planned on row estimates, one row each in the generic
  // plan (no statistics, `LIMIT $4` unknown), and became a nested loop that read `p` once per
  // row of `p`, doubling the claim in a loop of claims and settles (claim-plans.spec checks the
  // plans for that).
  // Together 0.94 × the server time of the claim before at 1 000 keys, 0.89 × at 10 keys
  // (docs/performance.md, "The claim's run check, blocked keys and window").
  const taken = `p.id, p.message_key${partitioned ? ', p.created_at' : ', p.ctid'}`;
  return `WITH ${window},
${postgresRuns(t, policy, partitioned)},
${lockCandidates(n, partitioned)},
g AS MATERIALIZED (
  SELECT ${taken} FROM p WHERE p.pos = 1
  UNION ALL
  SELECT ${taken} FROM (
    SELECT p.*, row_number() OVER (PARTITION BY p.message_key ORDER BY p.pos) AS n FROM p
    WHERE EXISTS (SELECT 1 FROM p AS a WHERE a.pos > 1)) AS p
  WHERE p.pos > 1 AND p.n = p.pos)${leaseUpdate(n, partitioned, 'g')},
x AS MATERIALIZED (
  SELECT q.key, q.key IN (SELECT f.key FROM f UNION ALL SELECT g.message_key FROM g WHERE g.message_key IS NOT NULL) AS flying
  FROM q GROUP BY q.key, q.n HAVING q.n > count(*) FILTER (WHERE q.whole))
SELECT o.*, b.blocked, b.in_flight, b.contended FROM (
  SELECT array_agg(x.key) FILTER (WHERE NOT x.flying) AS blocked,
    count(*) FILTER (WHERE x.flying)::int AS in_flight,
    ${contended()} AS contended
  FROM x) AS b
LEFT JOIN o ON true`;
}

/**
 * The claim without ordering: every due row is a candidate, so the rows are locked as the
 * pending index reads them, in due order, `FOR UPDATE SKIP LOCKED`, the bare relay's claim with
 * the lease written on top. Reading a window first and locking its rows again by primary key (as
 * the ordered claim must, to lock only the heads it found) made a claim of 500 take 9.02 ms
 * against 8.25 now (docs/performance.md, "The gap, step by step").
 * `contended` keeps its meaning (how many of the first $4 rows of the window of $5 due rows
 * another claim held): the window is counted, without locks, only when the claim came back
 * short (PostgreSQL runs the uncorrelated subquery only when the CASE reaches it); a full batch
 * was not held back.
 */
function unorderedClaim(n: OutboxTableNames, partitioned: boolean, tenant: TenantFilter): string {
  const t = n.table;
  const only = tenantCondition('c', tenant, 6);
  return `WITH p AS MATERIALIZED (
  SELECT c.id, ${partitioned ? 'c.created_at' : 'c.ctid'} FROM ${t} AS c
  WHERE ${claimable('c')}${only}
  ORDER BY ${tenantOrder('c', tenant)}c.available_at, c.id
  LIMIT $4
  FOR UPDATE OF c SKIP LOCKED)${leaseUpdate(n, partitioned, 'p', true)}
SELECT o.*, NULL::text[] AS blocked, 0 AS in_flight,
  CASE WHEN (SELECT count(*) FROM p) >= $4 THEN 0
  ELSE (SELECT least($4::int, count(*)::int) FROM (
    SELECT 1 FROM ${t} AS c WHERE ${claimable('c')}${only} ORDER BY c.available_at, c.id LIMIT $5) AS w) - (SELECT count(*)::int FROM p)
  END AS contended
FROM (SELECT 1) AS b LEFT JOIN o ON true`;
}

/**
 * How many of the first $4 candidates (CTE `r`) the claim could not lock: another dispatcher's
 * claim held them (SKIP LOCKED) or took them since this one's snapshot. Claims that run at once
 * read the same window, so without this the later one finds nothing, looks idle, and waits for
 * its next poll while the backlog is still there (bench P6).
 */
function contended(): string {
  return `(SELECT least($4::int, count(*)::int) FROM r) - (SELECT count(*)::int FROM p)`;
}

/**
 * The CTEs `k`, `q`, `f`, `s` and `r` of an ordered claim over the window `w`. `k`: the first $4 keys
 * of the window, in the order their first rows are due, with their number of rows in it; a
 * batch of $4 rows takes at most $4 keys, and when the window's keys are all free those are
 * exactly the first $4 (see rowsOfFirstKeys: the window is larger than the batch, to find heads
 * behind followers not parked yet, and probing every key in it both cost key-index probes no
 * batch used, P15, and parked the followers of keys in flight). `q`: for each key
 * of `k`, its first blocking rows in queue order (one key-index probe, as many rows as the key
 * has in the window, at most $6), numbered from 1, each with the key's `n`, whether it is in
 * flight (`flying`) and whether it and every earlier row of the key in `q` are in the window
 * (`whole`), computed in the probe's own order; for a key with one row in the window, that row,
 * or the blocking row before it (`keyHead` bounded below it), which is the same answer for less
 * work. `f`: the keys whose head is in flight. `s`: the rows of `q` in their key's run (`whole`), each with its place in the run
 * (`pos`): a row is in the run only if every earlier blocking row of its key is in the window
 * too. `r`: the candidates, the rows of `s` and the window's rows without a key (runs of one).
 * The other rows of the probed keys are behind an earlier row of their key that is not in the
 * window (leased, parked, not due, dead): the claim reports their keys (`x`). The rows of keys
 * not probed are neither taken nor reported, left for a later claim.
 */
function postgresRuns(t: string, policy: OutboxQueuePolicy, partitioned: boolean): string {
  // The partition key, where a row of `r` carries it (`made`, as in `w`), taken from alias `a`.
  const made = (a: string): string => (partitioned ? `, ${a}.made` : '');
  const probed = `e.message_key, e.id, e.available_at AS due${partitioned ? ', e.created_at AS made' : ''},
      ${FLYING}`;
  // `q` and `s` carry what `r` needs of a row (its key, due time, partition key) from the probe
  // itself, and membership in `w` is a hashed `IN`: with the estimates of a nearly empty table
  // (one row everywhere), joins between these CTEs became nested loops that re-sorted the run
  // computation once per window row (56 ms per claim instead of 7, bench P9 skewed).
  //
  // A key with one row in the window (every key, when keys outnumber the batch) is asked only
  // whether a blocking row of it comes before that row: the probe is bounded below the row, so
  // for a head it finds no entry and reads no row of the table. The answer is the same as the
  // key's first blocking row would give (that row itself, whole, or an earlier one, not whole).
  return `k AS MATERIALIZED (
  SELECT w.message_key AS key, count(*) AS n, min(w.id) AS first, min(w.due) AS due${partitioned ? ', min(w.made) AS made' : ''}
  FROM w WHERE w.message_key IS NOT NULL
  GROUP BY w.message_key ORDER BY min(w.due), min(w.id) LIMIT $4),
q AS MATERIALIZED (
  SELECT k.key, k.n, coalesce(b.id, k.first) AS id, k.due${made('k')}, coalesce(b.flying, false) AS flying,
    1::int8 AS pos, b.id IS NULL AS whole FROM k
  LEFT JOIN LATERAL ${keyHead(t, 'k.key', `e.id, ${FLYING}`, policy, 'k.first')} AS b ON true
  WHERE k.n = 1
  UNION ALL
  SELECT k.key, k.n, e.id, e.due${made('e')}, e.flying, e.pos, e.whole FROM k
  CROSS JOIN LATERAL (
    SELECT e.id, e.due${made('e')}, e.flying, row_number() OVER o AS pos,
      bool_and(e.id IN (SELECT x.id FROM w AS x)) OVER o AS whole
    FROM ${keyRows(t, 'k.key', 'least(k.n, $6)', policy, probed)} AS e
    WINDOW o AS (${KEY_ORDER})) AS e
  WHERE k.n > 1),
f AS MATERIALIZED (SELECT q.key FROM q WHERE q.pos = 1 AND q.flying),
s AS MATERIALIZED (SELECT q.id, q.key, q.due${made('q')}, q.pos FROM q WHERE q.whole),
r AS MATERIALIZED (
  SELECT s.id, s.due${made('s')}, s.pos FROM s
  UNION ALL
  SELECT w.id, w.due${made('w')}, 1::int8 AS pos FROM w WHERE w.message_key IS NULL)`;
}

/**
 * The CTE `p` of an ordered claim: the candidates, rows of CTE `r` in run order (heads first),
 * locked in that order, at most $4, skipping rows another dispatcher holds, each with its key
 * and place in its key's run (`r.pos`).
 */
function lockCandidates(n: OutboxTableNames, partitioned: boolean): string {
  const t = n.table;
  const arrays = ['id', 'pos', ...(partitioned ? ['made'] : [])];
  const columns = arrays
    .map((c) => `ARRAY(SELECT r.${c} FROM r ORDER BY r.pos, r.due, r.id)`)
    .join(',\n    ');
  // On a partitioned table each candidate is found again by its id and its creation time, the
  // partition key: PostgreSQL then probes the one partition holding it, not every partition's
  // primary key (run-time pruning), both to lock it and to write its lease.
  const join = partitioned
    ? `JOIN ${t} AS c ON c.id = h.id AND c.created_at = h.made`
    : `JOIN ${t} AS c ON c.id = h.id`;
  // Materialised CTEs run once each, so the LIMITs hold and SKIP LOCKED applies exactly once.
  // The candidates are locked in window order by primary-key probes: ordering by the table's
  // own due order let the planner walk the whole pending index to find them (1.8 s with 100 000
  // due rows of one key, under statistics of a nearly empty table).
  // On a plain table each candidate also carries its ctid, the row version it locked: the lease
  // update then reads that version straight from its page (a TID scan) instead of descending
  // the primary key once more per row. Nothing else can change a row this statement holds
  // locked, so the ctid stays the row's. A partitioned table's ctids are per partition: there
  // the update finds rows by id and partition key, as above. The id beside the ctid costs
  // nothing and keeps a ctid from naming a row of another partition too, should these
  // statements run on a partitioned table (the store reads the layout when it can connect at
  // bootstrap, and takes the options' word when it cannot): the lease went to every row of the
  // table at that ctid, one in each partition.
  return `p AS MATERIALIZED (
  SELECT c.id${partitioned ? ', c.created_at' : ', c.ctid'}, c.message_key, h.pos FROM unnest(${columns})
    WITH ORDINALITY AS h(${arrays.join(', ')}, ord)
  ${join}
  WHERE ${claimable('c')}
  ORDER BY h.ord
  LIMIT $4
  FOR UPDATE OF c SKIP LOCKED)`;
}

/**
 * `,\no AS (…)`: the lease of the rows of CTE `from`, returning them. With `unnested`, the rows
 * are read from arrays of their columns: a CTE whose row count the generic plan takes from
 * `LIMIT $4` (unknown, so guessed in the thousands) was joined to the table by a merge join
 * over its primary key, which reads the whole retained history in front of the batch; an
 * unnested array is guessed at 10 rows, and each row is then found by its ctid (a TID scan) or,
 * partitioned, by a primary-key probe of its partition.
 */
function leaseUpdate(
  n: OutboxTableNames,
  partitioned: boolean,
  from: string,
  unnested = false,
): string {
  const lease = `now() + $3 * interval '1 millisecond'`;
  const place = partitioned ? 'created_at' : 'ctid';
  const row = unnested ? 'u' : from;
  const source = unnested
    ? `unnest(ARRAY(SELECT ${from}.id FROM ${from}), ARRAY(SELECT ${from}.${place} FROM ${from})) AS u(id, ${place})`
    : from;
  return `,
o AS (
  UPDATE ${n.table} AS o
  SET locked_by = $1, lock_token = $2::uuid, locked_until = ${lease},
    attempts = o.attempts + 1, last_attempt_at = now()
  FROM ${source} WHERE ${partitioned ? `o.id = ${row}.id AND o.created_at = ${row}.created_at` : `o.ctid = ${row}.ctid AND o.id = ${row}.id`}
  RETURNING ${POSTGRES_CLAIMED_COLUMNS})`;
}

/**
 * Which rows a claim's window reads (docs/tenants.md): every tenant's (`all`), one tenant's
 * (`one`, its id a parameter), or those without a tenant (`none`). Only the window is narrowed:
 * the head-of-key checks still see every row of a key, whatever its tenant.
 */
export type TenantFilter = 'all' | 'one' | 'none';

/**
 * The tenant first in a narrowed window's order (it is one value there): the order of the tenant
 * index, so the planner reads that index rather than walking the pending index past the other
 * tenants' backlogs, which statistics taken while one tenant filled the table made it prefer.
 */
function tenantOrder(a: string, filter: TenantFilter): string {
  return filter === 'all' ? '' : `${a}.tenant_id, `;
}

/** ` AND …` narrowing alias `a`'s rows to `filter`, the tenant id being parameter `$param`. */
export function tenantCondition(a: string, filter: TenantFilter, param: number): string {
  if (filter === 'all') return '';
  // A range, not an equality: an equality makes the tenant a constant of the plan and drops it
  // from the ORDER BY (see tenantOrder), as keyHead writes its key.
  return filter === 'none'
    ? ` AND ${a}.tenant_id IS NULL`
    : ` AND ${a}.tenant_id >= $${param}::text AND ${a}.tenant_id <= $${param}::text`;
}

/** $1 namespace, $2 sorted lock ids: transaction locks that serialise parking and promotion. */
export function postgresLockKeys(): string {
  return `SELECT count(pg_advisory_xact_lock($1::int4, k))::int AS locked FROM unnest($2::int4[]) AS k`;
}

/**
 * $1 keys. Marks `waiting` the due, unleased messages of these keys that have an earlier
 * message of their key still holding them back. Runs under the keys' dispatch locks. The head
 * is one key-index probe per key (keyHead).
 */
export function postgresPark(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  // Materialised: the head is probed once per key, not once per follower.
  // The followers are a range of the key index past the head, as in keyHead, and "pending" is
  // written as none of the other statuses (PENDING_BY_EXCLUSION): a
  // `status = 'pending'` lets the pending index answer the update, and under statistics taken
  // while the table was nearly empty PostgreSQL read every pending row and tested it against
  // every key (775 against 185 ms for 300 keys over 20 000 rows, 6.4 against 1.6 s for 500
  // over 100 000; the same 184 ms with statistics: docs/performance.md, "The park under stale
  // statistics").
  return `WITH b AS MATERIALIZED (
  SELECT k.key, h.id AS first FROM unnest($1::text[]) AS k(key)
  CROSS JOIN LATERAL ${keyHead(t, 'k.key', 'e.id', policy)} AS h)
UPDATE ${t} AS w SET status = 'waiting'
FROM b
WHERE w.message_key >= b.key AND w.message_key <= b.key AND (w.message_key, w.id) > (b.key, b.first)
  AND w.status ${PENDING_BY_EXCLUSION}
  AND ${unleased('w')}`;
}

/**
 * $1 keys, $2 the longest run. Makes the next waiting messages of each key claimable (its first
 * $2 blocking rows that are waiting) when nothing earlier of its key holds them back, that is
 * when the key's head is a waiting row; the next claim can then take them as one run. Runs
 * under the keys' dispatch locks, after the change that advanced the key. One key-index probe
 * per key (keyRows); with `waitingIndex`, only for the keys that have a waiting message.
 */
export function postgresPromote(
  n: OutboxTableNames,
  policy: OutboxQueuePolicy,
  waitingIndex = false,
): string {
  const { ctes, update } = promotion(n.table, policy, '$1', '$2', undefined, waitingIndex);
  return `WITH ${ctes.join(',\n')}\n${update}`;
}

/**
 * The promotion of `postgresPromote`, its keys and run length bound to placeholders `keys` and
 * `run`; with `gone`, as part of the statement whose CTE `gone` takes rows out of the queue.
 * Returns the CTE the update reads (to go in its statement's WITH) and the update.
 *
 * With `waitingIndex` (schema step 5, `<table>_waiting_idx`), a key is probed only if it has a
 * waiting message: a probe of that index, empty for most keys (messages wait only behind a key
 * whose head is stuck or retried), costs a fraction of the key-index probe, which reads the
 * key's head row. Either way the rows to promote are found by their ids, in a materialised CTE,
 * and their status is compared with the CTE's rather than with 'waiting': a constant there
 * would let PostgreSQL answer the update from the waiting index, re-running the probes once per
 * waiting row when its statistics say there are none (it chose that plan; a table that gains
 * the index by a migration while an app runs gets it under that app's statement too).
 */
export function promotion(
  t: string,
  policy: OutboxQueuePolicy,
  keys: string,
  run: string,
  gone?: string,
  waitingIndex = false,
): { ctes: string[]; update: string } {
  const waiting = waitingIndex
    ? `
  CROSS JOIN LATERAL (SELECT 1 FROM ${t} AS z
    WHERE z.message_key >= k.key AND z.message_key <= k.key AND z.status = 'waiting'
    ORDER BY z.message_key, z.id LIMIT 1) AS z`
    : '';
  // Nothing waits at all, most of the time: one look at the first entry of the waiting index,
  // made once per statement (PostgreSQL runs an uncorrelated EXISTS as a one-time filter), then
  // spares every key its probe (500 per batch of 500: 1 000 buffers, a fifth of a settle).
  const any = waitingIndex
    ? ` AND EXISTS (SELECT 1 FROM ${t} AS y WHERE y.status = 'waiting')`
    : '';
  return {
    ctes: [
      `pc AS MATERIALIZED (
  SELECT h.id, h.status FROM unnest(${keys}::text[]) AS k(key)${waiting}
  CROSS JOIN LATERAL (
    SELECT e.id, e.status, first_value(e.status) OVER (${KEY_ORDER}) AS head
    FROM ${keyRows(t, 'k.key', run, policy, 'e.message_key, e.id, e.status', gone)} AS e) AS h
  WHERE h.head = 'waiting' AND h.status = 'waiting'${any})`,
    ],
    update: `UPDATE ${t} AS o SET status = 'pending' FROM pc WHERE o.id = pc.id AND o.status = pc.status`,
  };
}

/**
 * Schema step 5: the index of waiting (parked) messages by key, which lets a settle skip the
 * keys that have none (`promotion`). Partial, so only parked rows are ever in it.
 */
export function postgresWaitingIndex(n: OutboxTableNames): string {
  return `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_waiting_idx`)} ON ${n.table} (message_key, id) WHERE status = 'waiting'`;
}

export function postgresDropWaitingIndex(n: OutboxTableNames): string {
  const index = `${n.tableName}_waiting_idx`;
  // PostgreSQL indexes live in their table's schema: qualify them as the table is.
  return `DROP INDEX IF EXISTS ${n.schema === null ? n.quote(index) : `${n.quote(n.schema)}.${n.quote(index)}`}`;
}

/** Whether the table has `postgresWaitingIndex`: $1 schema (or null), $2 table, $3 index. */
export function postgresHasWaitingIndex(n: OutboxTableNames): {
  text: string;
  params: (string | null)[];
} {
  return {
    text: `SELECT count(*)::int AS n FROM pg_indexes WHERE schemaname = coalesce($1, current_schema()) AND tablename = $2 AND indexname = $3`,
    params: [n.schema, n.tableName, `${n.tableName}_waiting_idx`],
  };
}

/**
 * $1 limit. Keys whose first waiting message has nothing earlier holding it back, that is whose
 * head is a waiting row: the keys of the waiting rows, then one key-index probe per key. Only
 * used under ordering (without it, promoteOrphans releases every waiting row).
 */
export function postgresOrphanKeys(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  return `SELECT w.key FROM (SELECT DISTINCT message_key AS key FROM ${t} WHERE status = 'waiting') AS w
LEFT JOIN LATERAL ${keyHead(t, 'w.key', 'e.status', policy)} AS h ON true
WHERE w.key IS NULL OR h.status = 'waiting'
LIMIT $1`;
}

/** Without ordering nothing waits: $1 limit. */
export function postgresReleaseAllWaiting(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'pending' WHERE id IN (SELECT id FROM ${n.table} WHERE status = 'waiting' LIMIT $1)`;
}

const UNLOCK = 'locked_by = NULL, lock_token = NULL, locked_until = NULL';

/**
 * Whether the attempt history holds any row: a one-time filter (PostgreSQL runs an uncorrelated
 * EXISTS once per statement) in front of the history delete of a settle that deletes delivered
 * rows, which otherwise probes the history's index once per message, nearly always to find
 * nothing: a batch that went through writes no history, and most messages never fail.
 */
function anyHistory(h: string): string {
  return `EXISTS (SELECT 1 FROM ${h})`;
}

/**
 * The batch outcome in one statement: one data-modifying CTE per non-empty group, each guarded
 * by the lease token so that a dispatcher which lost its lease changes nothing. The attempt was
 * counted by the claim; a release gives it back. Parameters: $1 token, with `pruned` $2 and $3 the
 * batch's creation-time bounds, then per present group
 * in this order: delivered ids; retry ids, delays, errors, error classes; dead ids, errors,
 * error classes; release ids, delays, errors, error classes; fallback ids, errors, error classes
 * (delivered rows an `@OnOutboxDeadLetter` fallback settled, recorded as `fallback` when
 * delivered rows are kept: the caller leaves the group out otherwise).
 *
 * The failures (retries, dead letters, releases with an error: outages) are also recorded in
 * the attempt history by the same statement, from the rows the fenced updates changed, so a
 * dispatcher that lost its lease records nothing; a delivered-only settle never touches the
 * history, except that deleting delivered rows deletes their history with them. The owner and
 * the attempt number are read from the row as it was (the self-join `b`): the update clears
 * the lease, and a release gives the attempt back.
 *
 * With `promote` (ordering on), the same statement also promotes the next waiting messages of
 * the advanced keys (`postgresPromote`), its last two parameters the keys and the run length: one
 * round trip less per settle. The promotion cannot see the settle's changes (every part of a
 * statement reads one snapshot), so it reads past the rows the settle took out of the queue, as
 * the fenced updates returned them: a row whose lease was lost stays where it is and keeps its
 * key's followers waiting. With `waitingIndex`, only the advanced keys that have a waiting
 * message are probed (see `promotion`).
 */
export function postgresSettle(
  n: OutboxTableNames,
  groups: {
    delivered: boolean;
    retry: boolean;
    dead: boolean;
    release: boolean;
    fallback?: boolean;
  },
  deleteDelivered: boolean,
  partitioned = false,
  pruned = false,
  promote?: OutboxQueuePolicy,
  waitingIndex = false,
): string {
  const t = n.table;
  const h = n.attemptsTable;
  const ctes: string[] = [];
  const counted: string[] = [];
  const failed: string[] = [];
  const recorded = 'o.message_id, b.attempts AS attempt, b.locked_by, u.cls, u.err';
  // With `pruned` (a partitioned table), $2 and $3 bound the rows' creation times: PostgreSQL
  // then reads only the partitions that can hold them, not every partition's primary key once
  // per id.
  const within = (alias: string): string =>
    pruned
      ? ` AND ${alias}created_at >= $2::timestamptz AND ${alias}created_at <= $3::timestamptz`
      : '';
  const prior = `${t} AS b`;
  const joined = `b.id = o.id${within('b.')}${within('o.')}`;
  let next = pruned ? 4 : 2;
  if (groups.delivered) {
    const ids = `$${next++}::int8[]`;
    ctes.push(
      deleteDelivered
        ? `d AS (DELETE FROM ${t} WHERE id = ANY(${ids})${within('')} AND lock_token = $1::uuid RETURNING id, message_id),
dh AS (DELETE FROM ${h} WHERE message_id IN (SELECT message_id FROM d) AND ${anyHistory(h)})${partitioned ? `,\n${deleteGuard(n, 'dg', 'd')}` : ''}`
        : `d AS (UPDATE ${t} SET status = 'delivered', delivered_at = now(), ${UNLOCK} WHERE id = ANY(${ids})${within('')} AND lock_token = $1::uuid RETURNING id)`,
    );
    counted.push('d');
  }
  if (groups.retry) {
    const u = `unnest($${next++}::int8[], $${next++}::int8[], $${next++}::text[], $${next++}::text[])`;
    ctes.push(`r AS (UPDATE ${t} AS o SET available_at = now() + u.delay * interval '1 millisecond', last_error = u.err, ${UNLOCK}
  FROM ${u} AS u(id, delay, err, cls), ${prior}
  WHERE o.id = u.id AND ${joined} AND o.lock_token = $1::uuid RETURNING ${recorded})`);
    counted.push('r');
    failed.push(`SELECT message_id, attempt, 'retry' AS outcome, locked_by, cls, err FROM r`);
  }
  // Whether a dead row leaves its key free depends on its type (a policy's onDeadLetter).
  const typedDead = promote !== undefined && (promote.deadLetterExceptions?.length ?? 0) > 0;
  if (groups.dead) {
    const u = `unnest($${next++}::int8[], $${next++}::text[], $${next++}::text[], $${next++}::int4[])`;
    // back: 1 gives the claim's attempt back (expired before its publish).
    ctes.push(`x AS (UPDATE ${t} AS o SET status = 'dead', dead_at = now(), last_error = u.err,
    attempts = greatest(o.attempts - u.back, 0), ${UNLOCK}
  FROM ${u} AS u(id, err, cls, back), ${prior}
  WHERE o.id = u.id AND ${joined} AND o.lock_token = $1::uuid RETURNING o.id, ${recorded}${typedDead ? ', o.event_type' : ''})`);
    counted.push('x');
    failed.push(`SELECT message_id, attempt, 'dead' AS outcome, locked_by, cls, err FROM x`);
  }
  if (groups.release) {
    const u = `unnest($${next++}::int8[], $${next++}::int8[], $${next++}::text[], $${next++}::text[])`;
    ctes.push(`l AS (UPDATE ${t} AS o SET attempts = greatest(o.attempts - 1, 0), available_at = now() + u.delay * interval '1 millisecond',
    last_error = coalesce(u.err, o.last_error), ${UNLOCK}
  FROM ${u} AS u(id, delay, err, cls), ${prior}
  WHERE o.id = u.id AND ${joined} AND o.lock_token = $1::uuid RETURNING ${recorded})`);
    counted.push('l');
    failed.push(
      `SELECT message_id, attempt, 'outage' AS outcome, locked_by, cls, err FROM l WHERE err IS NOT NULL`,
    );
  }
  if (groups.fallback === true && groups.delivered && !deleteDelivered) {
    const u = `unnest($${next++}::int8[], $${next++}::text[], $${next++}::text[])`;
    // Of the rows the fenced update delivered, as they were before it (as the failures are).
    ctes.push(`fb AS (SELECT b.message_id, b.attempts AS attempt, b.locked_by, u.cls, u.err
  FROM ${u} AS u(id, err, cls) JOIN d ON d.id = u.id JOIN ${prior} ON b.id = u.id${within('b.')})`);
    failed.push(`SELECT message_id, attempt, 'fallback' AS outcome, locked_by, cls, err FROM fb`);
  }
  if (failed.length > 0) ctes.push(postgresHistoryWrite(h, failed));
  if (promote !== undefined) {
    // What leaves the queue: delivered rows, and dead ones where dead messages do not block.
    const gone = [
      ...(groups.delivered ? ['SELECT d.id FROM d'] : []),
      ...(groups.dead && typedDead
        ? [`SELECT x.id FROM x WHERE NOT (${deadRowBlocks('x', promote)})`]
        : groups.dead && !promote.deadBlocksKey
          ? ['SELECT x.id FROM x']
          : []),
    ];
    const keys = `$${next++}`;
    const run = `$${next++}`;
    const promotes = promotion(t, promote, keys, run, 'gone', waitingIndex);
    ctes.push(
      `gone AS (${gone.length > 0 ? gone.join(' UNION ALL ') : 'SELECT NULL::int8 AS id WHERE false'})`,
      ...promotes.ctes,
      `pr AS (${promotes.update} RETURNING 1)`,
    );
  }
  const counts = counted.map((cte) => `(SELECT count(*) FROM ${cte})`).join(' + ');
  // The promotion runs to completion whether read or not; read, it is part of the main query,
  // whose EXPLAIN then counts its work (bench P15).
  const promoted = promote === undefined ? '' : ', (SELECT count(*) FROM pr)::int AS promoted';
  return `WITH ${ctes.join(',\n')}\nSELECT (${counts})::int AS changed${promoted}`;
}

/**
 * The CTEs `f`, `fp` and `fi` of a settle: the failures (`failed`, each a SELECT of message_id,
 * attempt, outcome, locked_by, cls, err) written to the attempt history `h`. All CTEs see one
 * snapshot: the delete keeps the latest LIMIT - 1 earlier attempts of each failed message, the
 * insert adds this one.
 */
export function postgresHistoryWrite(h: string, failed: readonly string[]): string {
  return `f AS (${failed.join('\n  UNION ALL ')}),
fp AS (DELETE FROM ${h} WHERE id IN (
  SELECT s.id FROM (
    SELECT a.id, row_number() OVER (PARTITION BY a.message_id ORDER BY a.id DESC) AS n
    FROM ${h} AS a WHERE a.message_id IN (SELECT message_id FROM f)) AS s
  WHERE s.n >= ${ATTEMPT_HISTORY_LIMIT})),
fi AS (INSERT INTO ${h} (${ATTEMPT_COLUMNS}) SELECT message_id, attempt, outcome, locked_by, cls, err FROM f)`;
}

/**
 * A settlement's values in the order `postgresSettle` and `postgresSettleOwned` number their
 * parameters, after their own first ones: delivered ids; retry ids, delays, errors, classes;
 * dead ids, errors, classes, attempts given back (1 for one that expired unpublished); release
 * ids, delays, errors, classes; fallback ids, errors, classes. Absent groups add nothing.
 */
export function postgresSettlementValues(
  s: Settlement,
  fallback: NonNullable<Settlement['fallback']>,
): unknown[] {
  const values: unknown[] = [];
  if (s.delivered.length > 0) values.push(s.delivered);
  const { retry, dead, release } = s;
  if (retry.length > 0) {
    values.push(
      retry.map((r) => r.id),
      retry.map((r) => r.delayMs),
      retry.map((r) => r.error),
      retry.map((r) => r.errorClass),
    );
  }
  if (dead.length > 0) {
    values.push(
      dead.map((r) => r.id),
      dead.map((r) => r.error),
      dead.map((r) => r.errorClass),
      dead.map((r) => (r.unpublished === true ? 1 : 0)),
    );
  }
  if (release.length > 0) {
    values.push(
      release.map((r) => r.id),
      release.map((r) => r.delayMs),
      release.map((r) => r.error),
      release.map((r) => r.errorClass),
    );
  }
  if (fallback.length > 0) {
    values.push(
      fallback.map((r) => r.id),
      fallback.map((r) => r.error),
      fallback.map((r) => r.errorClass),
    );
  }
  return values;
}

/** Params: $1 the lost claim's token. See OutboxStore.releaseClaim. */
export function postgresReleaseClaim(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET attempts = greatest(attempts - 1, 0), ${UNLOCK} WHERE status = 'pending' AND lock_token = $1::uuid`;
}

/**
 * Params: $1 row ids, $2 the batch's token, $3 lease ms, $4 the new token or null. Lease
 * renewal: only rows still leased with the token and pending move their lease end (and take the
 * new token). See OutboxStore.renewLease.
 */
export function postgresRenewLease(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET locked_until = now() + $3 * interval '1 millisecond',
  lock_token = coalesce($4::uuid, lock_token)
WHERE id = ANY($1::int8[]) AND lock_token = $2::uuid AND status = 'pending'`;
}

export function postgresReleaseExpired(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET ${UNLOCK} WHERE status = 'pending' AND locked_until < now()`;
}

/** Deletes rows and their attempt history in one statement; returns the deleted rows' keys. */
function deleteWithHistory(
  n: OutboxTableNames,
  where: string,
  partitioned: boolean,
  archive = false,
): string {
  // One statement: a moved row is in the outbox or in the archive, never in both or neither.
  const archived = archive
    ? `,
a AS (INSERT INTO ${n.archiveTable} (${ARCHIVE_INSERT_COLUMNS}) SELECT ${archivedValues('d')} FROM d)`
    : '';
  return `WITH d AS (DELETE FROM ${n.table} WHERE ${where} RETURNING ${archive ? '*' : 'message_key, message_id'}),
h AS (DELETE FROM ${n.attemptsTable} WHERE message_id IN (SELECT message_id FROM d))${partitioned ? `,\n${deleteGuard(n, 'g', 'd')}` : ''}${archived}
SELECT message_key AS key FROM d`;
}

/**
 * On a partitioned table, a deleted row's guard row goes with it, so that its id may be enqueued
 * again, as on the plain table. Probes of the guard's key: no-ops for generated ids.
 */
function deleteGuard(n: OutboxTableNames, cte: string, deleted: string): string {
  return `${cte} AS (DELETE FROM ${n.idsTable} WHERE message_id IN (SELECT message_id FROM ${deleted}))`;
}

/**
 * $1 age ms, $2 limit. Returns the keys of the deleted rows, whose attempt history goes with
 * them. The oldest rows first, in the order of the status's cut-off index (cleanerIndexesDdl): a
 * pass with nothing due reads one index entry. The status is written into the statement, not
 * bound, so the planner matches the partial index even for a generic plan.
 */
export function postgresPurge(
  n: OutboxTableNames,
  status: 'delivered' | 'dead',
  partitioned = false,
  archive = false,
  types?: PurgeTypes,
): string {
  const ts = status === 'delivered' ? 'delivered_at' : 'dead_at';
  // The status again on the deleted row itself: a row the subquery chose and a requeue changed
  // before the delete could lock it is checked anew against it (and kept), not against the
  // subquery's older answer, which would delete a message just put back in the queue.
  return deleteWithHistory(
    n,
    `status = '${status}' AND id IN (
  SELECT id FROM ${n.table} WHERE status = '${status}' AND ${ts} < now() - $1 * interval '1 millisecond'${eventTypeFilter(types)} ORDER BY ${ts} LIMIT $2)`,
    partitioned,
    archive,
  );
}

/**
 * $1 age ms, $2 limit. Deletes the oldest rows written before the cut-off, whatever their status
 * (delivery 'external'). Read in id order from the primary key and cut at `limit` before the age
 * test, so that a pass with nothing due reads `limit` entries at most, with no index of its own;
 * ids follow `created_at` closely enough for a retention measured in hours.
 */
export function postgresPurgeByAge(n: OutboxTableNames): string {
  return deleteWithHistory(
    n,
    `id IN (SELECT id FROM (SELECT id, created_at FROM ${n.table} ORDER BY id LIMIT $2) AS oldest
  WHERE created_at < now() - $1 * interval '1 millisecond')`,
    false,
  );
}

/** $1 message ids. Returns the keys of the deleted rows. */
export function postgresDeleteDead(n: OutboxTableNames, partitioned = false): string {
  return deleteWithHistory(n, `status = 'dead' AND message_id = ANY($1::uuid[])`, partitioned);
}

/** $1 message ids (or null: every dead message). The keys of the dead messages to requeue. */
export function postgresDeadKeys(n: OutboxTableNames): string {
  return `SELECT DISTINCT d.message_key AS key FROM ${n.table} AS d
WHERE d.status = 'dead' AND d.message_key IS NOT NULL AND ($1::uuid[] IS NULL OR d.message_id = ANY($1::uuid[]))`;
}

/**
 * $1 message ids (or null: every dead message). The dead messages to requeue, locked, with
 * whether a later message of their key is already on its way (pending, leased or parked): those
 * must not be put back in front of it. Only where dead messages do not block their key can a
 * later one have moved past: under 'block' (and without ordering) every retry goes back in place.
 */
export function postgresDeadToRequeue(n: OutboxTableNames, policy: OutboxQueuePolicy): string {
  const t = n.table;
  const overtaken =
    policy.ordered && someDeadSkip(policy)
      ? `(d.message_key IS NOT NULL${andDeadRowSkips('d', policy)} AND EXISTS (
    SELECT 1 FROM ${t} AS e WHERE e.message_key = d.message_key AND e.id > d.id AND e.status IN ('pending', 'waiting')))`
      : 'false';
  return `SELECT d.id::text AS id, d.message_key AS key, ${overtaken} AS overtaken
FROM ${t} AS d
WHERE d.status = 'dead' AND ($1::uuid[] IS NULL OR d.message_id = ANY($1::uuid[]))
ORDER BY d.id
FOR UPDATE OF d`;
}

/** $1 ids. Back at the head of their key, attempts reset. */
export function postgresRequeueInPlace(n: OutboxTableNames): string {
  return `UPDATE ${n.table} SET status = 'pending', attempts = 0, available_at = now(), last_error = NULL, dead_at = NULL, ${UNLOCK}
WHERE status = 'dead' AND id = ANY($1::int8[])`;
}

/**
 * $1 ids. Moves dead messages to the end of their key's queue: same message id and content, a
 * new row id (the queue position). Runs under the keys' enqueue locks, like an enqueue.
 */
export function postgresResequence(n: OutboxTableNames): string {
  const t = n.table;
  const cols =
    'message_id, topic, message_key, event_type, payload, headers, created_at, payload_encoding, content_type, payload_bytes, broker_attributes';
  return `WITH d AS (DELETE FROM ${t} WHERE status = 'dead' AND id = ANY($1::int8[]) RETURNING id, ${cols})
INSERT INTO ${t} (${cols})
SELECT ${cols} FROM d ORDER BY d.id`;
}

export function postgresStats(n: OutboxTableNames): string {
  return `SELECT
  count(*) FILTER (WHERE status = 'waiting' OR (status = 'pending' AND ${unleased()}))::int AS pending,
  count(*) FILTER (WHERE status = 'pending' AND locked_until >= now())::int AS leased,
  count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
  count(*) FILTER (WHERE status = 'dead')::int AS dead,
  extract(epoch FROM (now() - min(created_at) FILTER (WHERE status IN ('pending', 'waiting')))) * 1000 AS oldest_ms
FROM ${n.table}`;
}

/** Whether a message is due: one probe of the pending index (see OutboxStore.hasDue). */
export function postgresHasDue(n: OutboxTableNames): string {
  return `SELECT EXISTS (SELECT 1 FROM ${n.table} WHERE status = 'pending' AND available_at <= now() AND ${unleased()}) AS due`;
}

/**
 * Params: $1 the owner-lock class. The owner keys whose lock a session of this database holds
 * now (fast takeover, see shared-sql/owner-leases.ts): a read of the lock table, no table scan.
 */
export const POSTGRES_LIVE_OWNERS = `SELECT objid::int8 AS k FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::int8::oid AND objsubid = 2 AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;

/** The owner keys (8 hex digits) of the live owner leases of the table. */
export function postgresLeaseOwners(n: OutboxTableNames): string {
  return `SELECT DISTINCT left(lock_token::text, 8) AS k FROM ${n.table}
WHERE status = 'pending' AND locked_until > now() AND substr(lock_token::text, 15, 1) = '${OWNER_TOKEN_VERSION}'`;
}

/**
 * Params: $1 the owner-lock class, $2 owner keys. Those of the keys whose lock no session holds,
 * each then held by this transaction until it ends: no owner can take that key meanwhile.
 */
export const POSTGRES_FREE_OWNERS = `SELECT k FROM unnest($2::int4[]) AS k WHERE pg_try_advisory_xact_lock($1::int4, k)`;

/**
 * Params: $1 grace ms, $2 owner keys (8 hex digits). Ends the owner leases of these keys `grace`
 * from now (never later than they end already), so that a claim takes their rows then.
 */
export function postgresShortenOwnerLeases(n: OutboxTableNames): string {
  const end = `now() + $1 * interval '1 millisecond'`;
  return `UPDATE ${n.table} SET locked_until = ${end}
WHERE status = 'pending' AND locked_until > ${end}
  AND substr(lock_token::text, 15, 1) = '${OWNER_TOKEN_VERSION}' AND left(lock_token::text, 8) = ANY($2::text[])`;
}

/** The table's indexes of these names, in its schema (the search path's when unqualified). */
export const postgresIndexCatalog: IndexCatalogQuery = (n, [a, b]) => ({
  text: `SELECT indexname AS name FROM pg_indexes WHERE schemaname = coalesce($1, current_schema()) AND tablename = $2 AND indexname IN ($3, $4)`,
  params: [n.schema, n.tableName, a, b],
});
