import type { PurgeTypes } from '../ports/outbox-store.port';
import { someDeadSkip } from '../shared-sql/dead-blocking';
import { insertChunks, isExtended, cachedStatement } from '../shared-sql/sql-values';
import { OutboxTableMissingError } from '../../errors/outbox-table-missing.error';
import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import { preparedFailure, statementName } from '../shared-sql/prepared-statements';
import { randomUUID } from 'node:crypto';
import { keyCounts, rowsAfter } from '../shared-sql/key-sequence';
import { mysqlBumpCounters, mysqlSetNumbers } from './mysql.key-sequence-sql';
import type {
  ClaimOptions,
  ClaimedBatch,
  ClaimIdsOptions,
  ClaimedIds,
  KeyedRow,
  NewOutboxRow,
  OutboxQueuePolicy,
  OutboxDeliveryPartitionsPort,
  OutboxStats,
  OutboxStore,
  RequeueReport,
  Settlement,
} from '../ports/outbox-store.port';
import {
  MYSQL_DISPATCH_LOCK_OFFSET,
  MYSQL_KEY_LOCK_BUCKETS,
  mysqlBoundAttempts,
  mysqlClaimLease,
  mysqlClaimLock,
  mysqlClaimWindow,
  mysqlExistingIds,
  mysqlFirstBlockingOutside,
  mysqlDeadByMessageIds,
  mysqlDeadKeys,
  mysqlDeadToRequeue,
  mysqlDeleteAttemptsOf,
  mysqlArchiveByIds,
  mysqlLockByIds,
  mysqlDeleteByIds,
  mysqlDeleteDeliveredAttempts,
  mysqlDeleteGuardOf,
  mysqlFirstBlocking,
  mysqlGuardId,
  mysqlHasMessageId,
  mysqlFirstWaiting,
  mysqlInsert,
  mysqlInsertOneLocked,
  mysqlRefusedByGuard,
  type MysqlTransactionGuard,
  mysqlKeyHeads,
  mysqlKeyRows,
  mysqlKeyRowsParams,
  mysqlLockKeys,
  mysqlOrphanKeys,
  mysqlPark,
  mysqlPromote,
  mysqlPromoteKeys,
  mysqlPurgeCandidates,
  mysqlPurgeByAgeCandidates,
  mysqlDeleteAttemptsOfIds,
  mysqlDeleteIds,
  mysqlRecordAttempts,
  mysqlRecordAttemptsParams,
  type MysqlAttemptFence,
  mysqlReinsert,
  mysqlRelease,
  mysqlReleaseAllWaiting,
  mysqlReleaseClaim,
  mysqlRenewLease,
  mysqlReleaseExpired,
  mysqlOrphanedOwners,
  mysqlShortenOwnerLeases,
  mysqlRequeueInPlace,
  mysqlSettleDead,
  mysqlSettleDelivered,
  mysqlSettleRetry,
  mysqlSetEnqueuedAt,
  mysqlHasDue,
  mysqlStats,
  mysqlStillHeld,
} from './mysql.sql';
import { IN_FLIGHT_GRACE_MS, rowsOfFirstKeys, windowOf } from '../shared-sql/claim-window';
import { mysqlOwnerLockName, ownerHex, ownerKeyOf } from '../shared-sql/owner-leases';
import { withFreeOwnerLocks } from './mysql-owner-locks';
import { mysqlLeasesModeSlots } from '../shared-sql/leases-mode-lock';
import { MysqlDeliveryPartitionsStore } from './mysql.delivery-partitions.store';
import {
  MYSQL_DELIVERY_PARTITIONS_OFFERED,
  mysqlTakeSlot,
  mysqlLockNotGranted,
  mysqlSharedNowait,
  mysqlWorkingPartitionOwners,
  type MysqlSharedNowait,
} from './mysql.delivery-partitions-sql';
import { promotionRun } from '../../options/queue-policy';
import {
  compareIds,
  requeueValues,
  sortedKeyLocks,
  toClaimedRecords,
  type ClaimedRow,
  type RequeuedRow,
} from '../rows/outbox-row.mapper';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  mysqlStillInTransaction,
  readMysqlTransactionGuard,
  readMysqlVersion,
} from './mysql.transaction-guard';
import type { SqlPort, SqlResult, SqlRow, SqlRunner } from '../ports/sql-port';
import { messageIdText, type MessageIdCodec } from '../rows/message-id-codec';
import { messageIdCodecOf } from '../schema/message-id-layout';
import { mysqlMessageIdLayout } from './mysql-message-ids';
import { mysqlDueTenants } from './mysql.tenant-sql';
import { failedAttempts, type FailedAttempt } from '../shared-sql/attempt-history';

// mysql2 allows 65 535 placeholders per statement; stay well below with the widest row (8).
const MAX_ROWS_PER_INSERT = 4_000;
// Rows with the step-4 columns bind 12 values.
const MAX_EXTENDED_ROWS_PER_INSERT = 2_500;

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', string | number> & {
  oldest_ms: string | number | null;
};

/** MySQL 8 / MariaDB 10.6+: a short READ COMMITTED claim transaction with SKIP LOCKED. */
/** Keys, or rows, per statement of `numberKeys`: well inside the placeholder limit. */
const SEQUENCE_CHUNK = 500;

export class MysqlOutboxStore implements OutboxStore {
  /** InnoDB row-lock wait bound of the dispatcher's transactions, in seconds. */
  private readonly lockWaitSeconds: number;
  /** The one-message enqueue of each shape, with the name it is prepared under. */
  private readonly oneRowInserts = new Map<string, { text: string; name: string }>();

  constructor(
    private readonly sql: SqlPort,
    private readonly names: OutboxTableNames,
    private readonly policy: OutboxQueuePolicy,
    timeoutMs = 10_000,
    /** Whether the table is time-partitioned (mysql.partition-sql.ts): ids are guarded apart. */
    private readonly partitioned = false,
    /** How the table's ids are bound; read from the catalog on first use when not given. */
    messageIds?: MessageIdCodec,
    /** Whether the one-message enqueue runs as a server-side prepared statement (`preparedStatements`). */
    private readonly prepared = true,
    /** Whether the attempt history takes `fallback` rows (schema step 8). */
    private readonly fallbackHistory = false,
  ) {
    this.lockWaitSeconds = Math.max(1, Math.ceil(timeoutMs / 1_000));
    this.ids = messageIds === undefined ? undefined : Promise.resolve(messageIds);
  }

  private ids: Promise<MessageIdCodec> | undefined;

  /**
   * How this table stores message ids (BINARY(16), or CHAR(36) made before 0.3): what the
   * bootstrap read, or, when the connection was not open then, read once now.
   */
  messageIdCodec(): Promise<MessageIdCodec> {
    this.ids ??= messageIdCodecOf(
      mysqlMessageIdLayout,
      async (statement, params) => (await this.sql.query(statement, params)).rows,
      this.names,
      {
        tableName: this.names.tableName,
        schema: this.names.schema ?? undefined,
        keyLock: true,
      },
    ).catch((error: unknown) => {
      this.ids = undefined;
      throw error;
    });
    return this.ids;
  }

  private guard: Promise<MysqlTransactionGuard> | undefined;

  /**
   * What the enqueue's writes check of the caller's transaction, by server: read once, on the
   * caller's connection.
   */
  private transactionGuard(tx: SqlRunner): Promise<MysqlTransactionGuard> {
    this.guard ??= readMysqlTransactionGuard(tx).catch((error: unknown) => {
      this.guard = undefined;
      throw error;
    });
    return this.guard;
  }

  /**
   * After a guarded write wrote less than it was given: refused because the caller's
   * transaction had ended (the write then changed nothing), else `otherwise`.
   */
  private async refusedWrite(tx: SqlRunner, otherwise: () => Error): Promise<Error> {
    return (await this.stillInTransaction(tx)) ? otherwise() : this.transactionEnded();
  }

  /**
   * Runs a write whose guard is a value (mysqlGuardedValue): its refusal is an error, read as
   * `refusedWrite` reads a write that wrote less than it was given.
   */
  private async guardedWrite<T>(
    tx: SqlRunner,
    write: () => Promise<T>,
    otherwise: () => Error,
  ): Promise<T> {
    try {
      return await write();
    } catch (error) {
      if (!mysqlRefusedByGuard(error)) throw error;
      throw await this.refusedWrite(tx, otherwise);
    }
  }

  private async stillInTransaction(tx: SqlRunner): Promise<boolean> {
    return mysqlStillInTransaction(tx, await this.transactionGuard(tx));
  }

  private transactionEnded(): OutboxTransactionRequiredError {
    return new OutboxTransactionRequiredError(OutboxMessages.transactionEndedBeforeWrite());
  }

  async insert(
    tx: SqlRunner,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<readonly string[]> {
    const [ids, guard] = await Promise.all([this.messageIdCodec(), this.transactionGuard(tx)]);
    // A caller-given id is locked too, by its bucket: a second writer of the id then waits
    // for the first on that row, not on the id's unique index entry, where InnoDB's lock
    // covers the gap before it and deadlocks the first writer's next insert into that gap.
    const buckets = sortedKeyLocks(
      [
        ...(lockKeys ? rows.map((r) => r.key) : []),
        ...rows.flatMap((r) => (r.idempotent === true ? [messageIdLockName(r.messageId)] : [])),
      ],
      MYSQL_KEY_LOCK_BUCKETS,
    );
    const [only] = rows;
    if (
      rows.length === 1 &&
      only !== undefined &&
      only.idempotent !== true &&
      buckets.length === 1
    ) {
      await this.insertOneLocked(tx, only, buckets[0] as number, ids, guard);
      return [];
    }
    await this.lockBucketRows((sql, params) => tx.query(sql, params), buckets);
    if (this.partitioned) return this.insertGuarded(tx, rows, ids, guard);
    const present: string[] = [];
    // With caller-given ids, one row per statement: MySQL has no RETURNING, and only a single
    // row's insert id (0 for a duplicate left alone) says whether it was written.
    const perStatement = rows.some((r) => r.idempotent === true)
      ? 1
      : rows.some(isExtended)
        ? MAX_EXTENDED_ROWS_PER_INSERT
        : MAX_ROWS_PER_INSERT;
    for (const chunk of insertChunks(rows, perStatement, 'base64', ids.param)) {
      const result = await this.guardedWrite(
        tx,
        () =>
          tx.query(
            mysqlInsert(
              this.names,
              chunk.rows.length,
              chunk.scheduled,
              guard,
              chunk.idempotent,
              chunk.extended,
            ),
            chunk.params,
          ),
        () => this.noRowWritten(),
      );
      const [only] = chunk.rows;
      // mysql2 sets CLIENT_FOUND_ROWS, so a duplicate counts as a changed row too; only a
      // written row gets an insert id.
      if (chunk.idempotent && only !== undefined && (result.insertId ?? 0) === 0) {
        if (result.affected === 0) throw await this.refusedWrite(tx, () => this.noRowWritten());
        present.push(only.messageId);
      } else if (!chunk.idempotent && result.affected !== chunk.rows.length) {
        throw await this.refusedWrite(tx, () => this.noRowWritten());
      }
    }
    return present;
  }

  async numberKeys(tx: SqlRunner, rows: readonly KeyedRow[]): Promise<void> {
    if (rows.length === 0) return;
    const [ids, guard] = await Promise.all([this.messageIdCodec(), this.transactionGuard(tx)]);
    const counts = keyCounts(rows);
    for (let at = 0; at < counts.length; at += SEQUENCE_CHUNK) {
      const chunk = counts.slice(at, at + SEQUENCE_CHUNK);
      const { affected } = await tx.query(
        mysqlBumpCounters(this.names, chunk.length, guard),
        chunk.flat(),
      );
      // An upsert counts 1 a new counter, 2 a raised one: 0 means refused (the transaction ended).
      if (affected === 0) throw await this.refusedWrite(tx, () => this.noRowWritten());
    }
    const backs = rowsAfter(rows);
    for (let at = 0; at < rows.length; at += SEQUENCE_CHUNK) {
      const chunk = rows.slice(at, at + SEQUENCE_CHUNK);
      const { affected } = await tx.query(
        mysqlSetNumbers(this.names, chunk.length, guard),
        chunk.flatMap((r, i) => [ids.param(r.messageId), r.topic, r.key, backs[at + i]]),
      );
      if (affected !== chunk.length) throw await this.refusedWrite(tx, () => this.noRowWritten());
    }
  }

  /**
   * On a partitioned table (no unique key without created_at): each caller-given id goes
   * through the `<table>_ids` guard first, whose primary key serialises two writers of one id
   * as UNIQUE (message_id) does (the second waits for the first to commit, then is ignored);
   * ids already in the table without a guard row (generated, given again) are skipped too.
   * Only the accepted rows are written, in one plain insert per chunk. INSERT IGNORE is safe on
   * the guard: its one value is a checked UUID, so a duplicate is all it can ignore.
   */
  private async insertGuarded(
    tx: SqlRunner,
    rows: readonly NewOutboxRow[],
    ids: MessageIdCodec,
    guard: MysqlTransactionGuard,
  ): Promise<string[]> {
    const present: string[] = [];
    const accepted: NewOutboxRow[] = [];
    const seen = new Set<string>();
    const guarded = rows.some((r) => r.idempotent === true);
    if (guarded) await tx.query(mysqlSetEnqueuedAt());
    for (const row of rows) {
      if (row.idempotent !== true) {
        accepted.push(row);
        continue;
      }
      if (seen.has(row.messageId)) continue;
      seen.add(row.messageId);
      const id = ids.param(row.messageId);
      const { rows: found } = await tx.query(mysqlHasMessageId(this.names), [id]);
      const { affected } =
        found.length > 0 ? { affected: 0 } : await tx.query(mysqlGuardId(this.names, guard), [id]);
      // Nothing written: the id is there (in the table, or guarded by a writer that committed
      // while this one waited), or the caller's transaction had ended.
      if (affected === 1) accepted.push(row);
      else if (found.length > 0 || (await this.stillInTransaction(tx))) present.push(row.messageId);
      else throw this.transactionEnded();
    }
    const perStatement = accepted.some(isExtended)
      ? MAX_EXTENDED_ROWS_PER_INSERT
      : MAX_ROWS_PER_INSERT;
    for (const chunk of insertChunks(accepted, perStatement, 'base64', ids.param)) {
      const { affected } = await this.guardedWrite(
        tx,
        () =>
          tx.query(
            mysqlInsert(
              this.names,
              chunk.rows.length,
              chunk.scheduled,
              guard,
              false,
              chunk.extended,
              guarded,
            ),
            chunk.params,
          ),
        () => this.noRowWritten(),
      );
      if (affected !== chunk.rows.length)
        throw await this.refusedWrite(tx, () => this.noRowWritten());
    }
    return present;
  }

  /** The common enqueue, one message of a key: its lock and its row in one statement. */
  private async insertOneLocked(
    tx: SqlRunner,
    row: NewOutboxRow,
    bucket: number,
    ids: MessageIdCodec,
    guard: MysqlTransactionGuard,
  ): Promise<void> {
    const [chunk] = insertChunks([row], 1, 'base64', ids.param);
    if (chunk === undefined) return;
    const { text, name } = cachedStatement(
      this.oneRowInserts,
      `${chunk.scheduled}:${chunk.extended}:${guard}`,
      () => {
        const statement = mysqlInsertOneLocked(this.names, chunk.scheduled, guard, chunk.extended);
        return { text: statement, name: statementName(statement) };
      },
    );
    const prepare = this.prepared ? { prepare: name } : undefined;
    // Refused: the caller's transaction had ended, or there was no bucket row to lock. Either
    // way fail the enqueue (and so the business transaction) rather than lose the message; the
    // bootstrap check makes a missing bucket row unexpected.
    const broken = (): Error => this.lockTableBroken(`has no row for bucket ${bucket}`);
    const { affected } = await this.guardedWrite(
      tx,
      () =>
        tx.query(text, [bucket, ...chunk.params], prepare).catch((error: unknown) => {
          throw prepare === undefined || mysqlRefusedByGuard(error)
            ? error
            : preparedFailure(
                error,
                lostPreparedStatement,
                OutboxMessages.mysqlPreparedStatementLost,
              );
        }),
      broken,
    );
    if (affected !== 1) throw await this.refusedWrite(tx, broken);
  }

  /**
   * Under ordering, a claim takes each key's head and, behind it, the rows of its key that
   * follow with no gap (a run of up to `policy.maxRun`): see `runs`. The candidates are locked
   * heads first, then every key's second row, and so on (a limit shortens runs before it leaves
   * a key out); a locked row is leased only when every earlier row of its run was locked too,
   * so two dispatchers never split a run between them.
   */
  async dueTenants(after: string | null, limit: number): Promise<readonly (string | null)[]> {
    const { rows } = await this.sql.query<{ tenant: string | null }>(mysqlDueTenants(this.names), [
      after ?? '',
      limit,
    ]);
    return rows.map((r) => (r.tenant === null ? null : String(r.tenant)));
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = options.token ?? randomUUID();
    return this.transaction(async (query) => {
      const tenant = options.tenant;
      const reading = query<WindowRow>(
        mysqlClaimWindow(
          this.names,
          this.policy,
          tenant === undefined ? 'all' : tenant.id === null ? 'none' : 'one',
        ),
        tenant?.id == null ? [windowOf(options)] : [tenant.id, windowOf(options)],
      );
      options.onSent?.();
      const { rows: due } = await reading;
      const window = rowsOfFirstKeys(due, options.limit);
      const places = await this.runs(query, window);
      const heldBack = [
        ...new Set(
          window.flatMap((r) =>
            r.message_key !== null && !places.has(String(r.id)) ? [r.message_key] : [],
          ),
        ),
      ];
      // A key whose head this claim took is in flight; the others' heads are looked up.
      const heldBy = async (
        taken: readonly ClaimedRow[],
      ): Promise<Pick<ClaimedBatch, 'blockedKeys' | 'inFlightKeys'>> => {
        const keys = new Set(taken.map((r) => r.message_key));
        const asked = heldBack.filter((k) => !keys.has(k));
        const blocked = await this.blockedOf(query, asked, window);
        const blockedKeys = asked.filter((k) => blocked.has(k));
        return { blockedKeys, inFlightKeys: heldBack.length - blockedKeys.length };
      };
      // Window order is due order; a stable sort by place keeps it within each place.
      const candidates = window
        .filter((r) => places.has(String(r.id)))
        .sort((a, b) => (places.get(String(a.id)) ?? 0) - (places.get(String(b.id)) ?? 0))
        .slice(0, options.limit);
      if (candidates.length === 0) return { token, records: [], ...(await heldBy([])) };
      const ids = candidates.map((c) => c.id);
      const { rows: locked } = await query<ClaimedRow>(mysqlClaimLock(this.names, ids.length), ids);
      const kept = wholeRuns(locked, places);
      await this.lease(query, kept, options, token);
      return {
        token,
        records: toClaimedRecords(kept),
        ...(await heldBy(kept)),
        // Candidates another dispatcher's claim held (SKIP LOCKED) or took since the window.
        contended: candidates.length - locked.length,
      };
    });
  }

  /** Writes the lease of a claim (its owner, token and end) on `rows`, an attempt each. */
  private async lease(
    query: Query,
    rows: readonly ClaimedRow[],
    { owner, leaseMs }: { readonly owner: string; readonly leaseMs: number },
    token: string,
  ): Promise<void> {
    if (rows.length === 0) return;
    await query(mysqlClaimLease(this.names, rows.length), [
      owner,
      token,
      leaseMs,
      leaseMs,
      ...rows.map((r) => r.id),
    ]);
  }

  /**
   * Log tailing's lease by id (see the port): locks the due rows of `ids` (SKIP LOCKED), keeps,
   * under ordering, those with no earlier blocking row of their key outside the locked set, and
   * leases them as a claim does, in one transaction. `notDueForMs` covers the rows of `ids` and
   * the heads that held keys back here.
   */
  async claimIds(options: ClaimIdsOptions): Promise<ClaimedIds> {
    const token = options.token ?? randomUUID();
    const ids = [...options.ids];
    if (ids.length === 0) return { token, records: [], unseen: [] };
    return this.transaction(async (query) => {
      const { rows: found } = await query<{
        id: string | number;
        parked_key: string | null;
        due_in_ms: string | number | null;
      }>(mysqlExistingIds(this.names, ids.length), ids);
      const seen = new Set(found.map((r) => String(r.id)));
      const unseen = ids.filter((id) => !seen.has(id));
      const { rows: locked } = await query<ClaimedRow>(mysqlClaimLock(this.names, ids.length), ids);
      let kept = locked;
      /** The heads of the keys held back here (their first blocking row outside the lock). */
      const heldHeads = new Set<string>();
      // The keys of the rows locked, and of the parked rows named: a sweep that met those behind
      // a head backing off parked them, found nothing due, and looks again only at its next poll.
      const parkedKeys = new Set(
        found.flatMap((r) => (r.parked_key === null ? [] : [r.parked_key])),
      );
      const keys = [
        ...new Set([
          ...locked.flatMap((r) => (r.message_key === null ? [] : [r.message_key])),
          ...parkedKeys,
        ]),
      ];
      if (this.policy.ordered && keys.length > 0) {
        const lockedIds = locked.map((r) => r.id);
        const { rows: outside } = await query<{ k: string; first: string | number }>(
          mysqlFirstBlockingOutside(this.names, this.policy, keys.length, lockedIds.length),
          [...keys, ...lockedIds],
        );
        const first = new Map(outside.map((r) => [r.k, BigInt(r.first)]));
        for (const key of parkedKeys) {
          const head = first.get(key);
          if (head !== undefined) heldHeads.add(head.toString());
        }
        kept = locked.filter((r) => {
          const before = r.message_key === null ? undefined : first.get(r.message_key);
          if (before === undefined || before > BigInt(r.id)) return true;
          heldHeads.add(before.toString());
          return false;
        });
      }
      await this.lease(query, kept, options, token);
      // A head backing off may have been settled by another process, whose retry timer this
      // one does not have: its due time too, or the key's rows wait for the periodic sweep.
      const heads = [...heldHeads];
      const { rows: headsDue } =
        heads.length === 0
          ? { rows: [] }
          : await query<{ due_in_ms: string | number | null }>(
              mysqlExistingIds(this.names, heads.length),
              heads,
            );
      const due = [...found, ...headsDue].flatMap((r) =>
        r.due_in_ms === null ? [] : [Number(r.due_in_ms)],
      );
      const records = toClaimedRecords(kept);
      return due.length === 0
        ? { token, records, unseen }
        : { token, records, unseen, notDueForMs: Math.ceil(Math.min(...due)) };
    });
  }

  /**
   * Those of the held-back `keys` to park: whose head is neither in flight (see
   * IN_FLIGHT_GRACE_MS) nor a row of the claim's `window`. A head in the window was held back
   * itself when the window was read, behind a message whose settle has committed since (this
   * READ COMMITTED statement sees it): the key is free, its rows claimable, not blocked.
   */
  private async blockedOf(
    query: Query,
    keys: readonly string[],
    window: readonly WindowRow[],
  ): Promise<Set<string>> {
    const blocked = new Set<string>();
    if (keys.length === 0) return blocked;
    const seen = new Set(window.map((r) => String(r.id)));
    for (let start = 0; start < keys.length; start += MAX_KEYS_PER_RUN_QUERY) {
      const chunk = keys.slice(start, start + MAX_KEYS_PER_RUN_QUERY);
      const { rows } = await query<{ k: string; first: string | number; flying: unknown }>(
        mysqlKeyHeads(this.names, this.policy, chunk.length),
        [IN_FLIGHT_GRACE_MS, ...chunk],
      );
      for (const row of rows) {
        if (Number(row.flying) !== 1 && !seen.has(String(row.first))) blocked.add(row.k);
      }
    }
    return blocked;
  }

  /**
   * Each window row that may be claimed, by id, with its place in its key's run (1: the head;
   * rows without a key are runs of one). A keyed row is in its key's run when it and every
   * blocking row of its key before it are in the window, up to `maxRun` rows; the others are
   * held back (`blockedKeys`). The window's `behind` flag finds the heads; only keys with a
   * head and more rows in the window cost one more query (mysqlKeyRows), with the next
   * blocking rows of those keys after their heads.
   */
  private async runs(query: Query, window: readonly WindowRow[]): Promise<Map<string, number>> {
    const places = new Map<string, number>();
    const byKey = new Map<string, { head: WindowRow | undefined; ids: Set<string> }>();
    for (const row of window) {
      const id = String(row.id);
      if (row.message_key === null) {
        places.set(id, 1);
        continue;
      }
      const head = Number(row.behind) === 0;
      if (head) places.set(id, 1);
      const key = byKey.get(row.message_key) ?? { head: undefined, ids: new Set<string>() };
      if (head) key.head = row;
      key.ids.add(id);
      byKey.set(row.message_key, key);
    }
    if (!this.policy.ordered || this.policy.maxRun <= 1) return places;
    const asked: { key: string; after: string | number; limit: number }[] = [];
    for (const [key, { head, ids }] of byKey) {
      if (head !== undefined && ids.size > 1) {
        asked.push({ key, after: head.id, limit: Math.min(ids.size, this.policy.maxRun) - 1 });
      }
    }
    for (let start = 0; start < asked.length; start += MAX_KEYS_PER_RUN_QUERY) {
      const chunk = asked.slice(start, start + MAX_KEYS_PER_RUN_QUERY);
      const { rows } = await query<KeyRow>(
        mysqlKeyRows(this.names, this.policy, chunk.length),
        mysqlKeyRowsParams(this.policy, chunk),
      );
      for (const { key, limit } of chunk) {
        const inWindow = byKey.get(key)?.ids ?? new Set<string>();
        // The key's next blocking rows after its head, in queue order: the run goes on while
        // they are in the window.
        const next = firstRows(rows, key, limit);
        for (const [i, row] of next.entries()) {
          if (!inWindow.has(String(row.id))) break;
          places.set(String(row.id), i + 2);
        }
      }
    }
    return places;
  }

  async park(keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return 0;
    return this.transaction(async (query) => {
      await this.lockForDispatch(query, keys);
      const { rows: heads } = await query<{ k: string; first: string | number }>(
        mysqlFirstBlocking(this.names, this.policy, keys.length),
        keys,
      );
      if (heads.length === 0) return 0;
      const parked = await query(
        mysqlPark(this.names, heads.length),
        heads.flatMap((h) => [h.k, h.first]),
      );
      return parked.affected;
    });
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    // One transaction: a crash between the groups must not leave half a batch settled.
    return this.transaction(async (query) => {
      const keys = this.policy.ordered ? s.advancedKeys : [];
      await this.lockForDispatch(query, keys);
      let changed = 0;
      await this.recordAttempts(query, failedAttempts(s, this.fallbackRows(s, deleteDelivered)), {
        token,
      });
      if (s.delivered.length > 0) {
        // Deleted rows take their history with them (a message delivered after failures).
        if (deleteDelivered) {
          await query(mysqlDeleteDeliveredAttempts(this.names, s.delivered.length), [
            token,
            ...s.delivered,
          ]);
          if (this.partitioned) {
            await query(mysqlDeleteGuardOf(this.names, s.delivered.length, true), [
              token,
              ...s.delivered,
            ]);
          }
        }
        changed += (
          await query(mysqlSettleDelivered(this.names, s.delivered.length, deleteDelivered), [
            token,
            ...s.delivered,
          ])
        ).affected;
      }
      if (s.retry.length > 0) {
        changed += (
          await query(mysqlSettleRetry(this.names, s.retry.length), [
            ...s.retry.flatMap((r) => [r.id, r.delayMs, r.error]),
            token,
          ])
        ).affected;
      }
      if (s.dead.length > 0) {
        changed += (
          await query(mysqlSettleDead(this.names, s.dead.length), [
            ...s.dead.flatMap((r) => [r.id, r.error, r.unpublished === true ? 1 : 0]),
            token,
          ])
        ).affected;
      }
      if (s.release.length > 0) {
        changed += (
          await query(mysqlRelease(this.names, s.release.length), [
            ...s.release.flatMap((r) => [r.id, r.delayMs, r.error]),
            token,
          ])
        ).affected;
      }
      await this.promote(query, keys);
      return changed;
    });
  }

  /**
   * The failures of a settle in the attempt history, fenced (by the lease's token, or by an
   * owner's settle that locked its rows), before the updates clear the lease; then the history
   * of those messages is cut to its bound. Nothing to do, and no statement, when the batch went
   * through.
   */
  private async recordAttempts(
    query: Query,
    failed: readonly FailedAttempt[],
    fence: MysqlAttemptFence,
  ): Promise<void> {
    if (failed.length === 0) return;
    const { affected } = await query(
      mysqlRecordAttempts(this.names, failed.length, fence),
      mysqlRecordAttemptsParams(failed, fence),
    );
    if (affected === 0) return;
    const ids = failed.map(([id]) => id);
    await query(mysqlBoundAttempts(this.names, ids.length), ids);
  }

  /**
   * The rows a fallback settled, to record: none where the table refuses the outcome (no step 8)
   * or where delivered rows are deleted, with their history, in this very settle.
   */
  private fallbackRows(
    s: Settlement,
    deleteDelivered: boolean,
  ): NonNullable<Settlement['fallback']> {
    return this.fallbackHistory && !deleteDelivered ? (s.fallback ?? []) : [];
  }

  async releaseExpired(): Promise<number> {
    return (await this.sql.query(mysqlReleaseExpired(this.names))).affected;
  }

  async lockOwner(session: SqlRunner, key: number): Promise<boolean> {
    const { rows } = await session.query<{ locked: unknown }>('SELECT GET_LOCK(?, 0) AS locked', [
      mysqlOwnerLockName(key),
    ]);
    return Number(rows[0]?.locked) === 1;
  }
  async unlockOwner(session: SqlRunner): Promise<void> {
    // The owner lock, and the 'leases' mode slot taken beside it.
    await session.query('SELECT RELEASE_ALL_LOCKS()');
  }

  /**
   * The port's `'leases'` mode interlock, left out while MySQL/MariaDB offer no `'partitions'`
   * mode (`MYSQL_DELIVERY_PARTITIONS_OFFERED`): the owner lock's claims then never wait on it.
   */
  readonly enterLeasesMode = MYSQL_DELIVERY_PARTITIONS_OFFERED
    ? (session: SqlRunner): Promise<readonly string[]> => this.takeLeasesModeSlot(session)
    : undefined;

  /**
   * Takes one of the table's `'leases'` mode slots on the owner-lock `session` unless
   * `'partitions'` dispatchers work the table (then keeps none and names them): the interlock
   * `enterLeasesMode` offers once the mode is.
   */
  async takeLeasesModeSlot(session: SqlRunner): Promise<readonly string[]> {
    const slots = await this.leasesModeSlots();
    const { rows } = await session.query<{ slot: number | string | null }>(
      mysqlTakeSlot(slots.length),
      slots,
    );
    const slot = rows[0]?.slot;
    if (slot === null || slot === undefined) {
      return [`every one of the table's ${slots.length} 'leases' mode slots is held`];
    }
    const release = async (): Promise<void> => {
      await session.query('SELECT RELEASE_LOCK(?)', [slots[Number(slot)]]);
    };
    // Read after taking the slot: a 'partitions' dispatcher that starts delivering from now on
    // finds it held, and one that started before is in the table (mysqlBeatWorking). A
    // heartbeat deciding now keeps the read from knowing which: the slot is given back and the
    // next beat of the owner lock asks again (the read does not wait on the lock's session).
    let working: readonly string[];
    try {
      working = await mysqlWorkingPartitionOwners(
        session,
        this.names,
        await this.sharedNowait(session),
      );
    } catch (error) {
      await release().catch(() => undefined);
      if (!mysqlLockNotGranted(error)) throw error;
      return [`a heartbeat of a 'partitions' dispatcher deciding (asked again at the next beat)`];
    }
    if (working.length > 0) await release();
    return working;
  }

  private nowait: Promise<MysqlSharedNowait> | undefined;

  /** The server's form of a locking read that does not wait (read once, on `session`). */
  private sharedNowait(session: SqlRunner): Promise<MysqlSharedNowait> {
    this.nowait ??= readMysqlVersion(session)
      .then(mysqlSharedNowait)
      .catch((error: unknown) => {
        this.nowait = undefined;
        throw error;
      });
    return this.nowait;
  }

  private slotNames: Promise<readonly string[]> | undefined;

  /**
   * The table's `'leases'` mode slots; named by its database, which the connection's own is
   * where the names are not qualified (read once).
   */
  private leasesModeSlots(): Promise<readonly string[]> {
    const schema = this.names.schema;
    this.slotNames ??= (
      schema !== null
        ? Promise.resolve(schema)
        : this.sql
            .query<{ db: unknown }>('SELECT DATABASE() AS db')
            .then(({ rows }) => (typeof rows[0]?.db === 'string' ? rows[0].db : ''))
    )
      .then((database) => mysqlLeasesModeSlots(this.names, database))
      .catch((error: unknown) => {
        this.slotNames = undefined;
        throw error;
      });
    return this.slotNames;
  }

  private partitionStore: MysqlDeliveryPartitionsStore | undefined;

  /**
   * Partitioned delivery's statements (schema step 9), in this store's dispatch transactions.
   * Bootstrap refuses `dispatcher.claims: 'partitions'` on MySQL/MariaDB for now
   * (`OutboxDatabase.deliveryPartitionsOffered`), so only the tests reach it.
   */
  get deliveryPartitions(): OutboxDeliveryPartitionsPort {
    this.partitionStore ??= new MysqlDeliveryPartitionsStore({
      names: this.names,
      policy: this.policy,
      transact: (work) => this.transaction(work),
      run: (sql, params) => this.sql.query(sql, params),
      lockForDispatch: (query, keys) => this.lockForDispatch(query, keys),
      promoteAll: (query, keys) => this.promote(query, keys, true),
      recordAttempts: (query, failed, owner) => this.recordAttempts(query, failed, { owner }),
      leasesModeSlots: () => this.leasesModeSlots(),
      fallbackHistory: this.fallbackHistory,
      partitioned: this.partitioned,
      promoteOrphans: (limit) => this.promoteOrphans(limit),
    });
    return this.partitionStore;
  }

  // MySQL/MariaDB list no session's named locks (without a plugin): every look reads the leases'
  // owners, a range of the pending index that holds only leased and backing-off rows.
  async shortenOrphanedLeases(graceMs: number): Promise<number> {
    const looked = (
      await this.sql.query<{ k: string }>(mysqlOrphanedOwners(this.names), [graceMs])
    ).rows.flatMap((r) => ownerKeyOf(String(r.k)) ?? []);
    if (looked.length === 0) return 0;
    // Each owner's lock is held while its leases are shortened, so no owner can take that key
    // meanwhile.
    return this.sql.transaction((tx) =>
      withFreeOwnerLocks(tx, looked, async (held) =>
        held.length === 0
          ? 0
          : (
              await tx.query(mysqlShortenOwnerLeases(this.names, held.length), [
                graceMs,
                graceMs,
                graceMs,
                ...held.map(ownerHex),
              ])
            ).affected,
      ),
    );
  }

  async renewLease(
    ids: readonly string[],
    token: string,
    leaseMs: number,
    newToken?: string,
  ): Promise<number> {
    if (ids.length === 0) return 0;
    return (
      await this.sql.query(mysqlRenewLease(this.names, ids.length), [
        leaseMs,
        leaseMs,
        newToken ?? null,
        token,
        ...ids,
      ])
    ).affected;
  }

  async releaseClaim(token: string): Promise<number> {
    return (await this.sql.query(mysqlReleaseClaim(this.names), [token])).affected;
  }

  async promoteOrphans(limit: number): Promise<number> {
    if (!this.policy.ordered) {
      return (await this.sql.query(mysqlReleaseAllWaiting(this.names), [limit])).affected;
    }
    const { rows } = await this.sql.query<{ k: string }>(mysqlOrphanKeys(this.names, this.policy), [
      limit,
    ]);
    if (rows.length === 0) return 0;
    const keys = rows.map((r) => r.k);
    return this.transaction(async (query) => {
      await this.lockForDispatch(query, keys);
      return this.promote(query, keys);
    });
  }

  async purge(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    limit: number,
    archive = false,
    types?: PurgeTypes,
  ): Promise<number> {
    return this.deleteWhere(
      status,
      mysqlPurgeCandidates(this.names, status, types),
      [olderThanMs, limit],
      archive,
    );
  }

  async purgeByAge(olderThanMs: number, limit: number): Promise<number> {
    return this.transaction(async (query) => {
      const { rows } = await query<{ id: string | number }>(mysqlPurgeByAgeCandidates(this.names), [
        limit,
        olderThanMs,
      ]);
      if (rows.length === 0) return 0;
      const ids = rows.map((r) => r.id);
      await query(mysqlDeleteAttemptsOfIds(this.names, ids.length), ids);
      return (await query(mysqlDeleteIds(this.names, ids.length), ids)).affected;
    });
  }

  async deleteDead(messageIds: readonly string[]): Promise<number> {
    if (messageIds.length === 0) return 0;
    const ids = await this.messageIdCodec();
    return this.deleteWhere(
      'dead',
      mysqlDeadByMessageIds(this.names, messageIds.length),
      messageIds.map(ids.param),
    );
  }

  /** Deletes the rows `select` finds; deleted dead messages no longer block their keys. */
  private deleteWhere(
    status: 'delivered' | 'dead',
    select: string,
    params: readonly unknown[],
    archive = false,
  ): Promise<number> {
    return this.transaction(async (query) => {
      const { rows: found } = await query<{ id: string | number; k: string | null }>(
        select,
        params,
      );
      if (found.length === 0) return 0;
      // Key locks first, so the promotion below cannot miss a park; rows after, as a settle does.
      const keys =
        status === 'dead' && this.policy.ordered
          ? [...new Set(found.flatMap((r) => (r.k === null ? [] : [r.k])))]
          : [];
      await this.lockForDispatch(query, keys);
      // The read above takes no locks: a row requeued since is no longer `status` and is left.
      const { rows } = await query<{ id: string | number }>(
        mysqlLockByIds(this.names, found.length),
        [status, ...found.map((r) => r.id)],
      );
      if (rows.length === 0) return 0;
      // Copied and deleted under those locks: a row is in the outbox or the archive, not both.
      if (archive) {
        await query(mysqlArchiveByIds(this.names, rows.length), [status, ...rows.map((r) => r.id)]);
      }
      await query(mysqlDeleteAttemptsOf(this.names, rows.length), [
        status,
        ...rows.map((r) => r.id),
      ]);
      if (this.partitioned) {
        await query(mysqlDeleteGuardOf(this.names, rows.length, false), [
          status,
          ...rows.map((r) => r.id),
        ]);
      }
      const { affected: deleted } = await query(mysqlDeleteByIds(this.names, rows.length), [
        status,
        ...rows.map((r) => r.id),
      ]);
      await this.promote(query, keys);
      return deleted;
    });
  }

  async requeueDead(messageIds?: readonly string[]): Promise<RequeueReport> {
    if (messageIds !== undefined && messageIds.length === 0) return { requeued: 0, resequenced: 0 };
    const codec = await this.messageIdCodec();
    const ids = messageIds?.map(codec.param);
    return this.transaction(async (query) => {
      if (this.policy.ordered && someDeadSkip(this.policy)) {
        // The keys' enqueue locks, taken before deciding where each message goes: no message of
        // these keys can commit (and so be claimed) between the decision and the requeue, and
        // every one that committed before is seen by it.
        const { rows: keys } = await query<{ message_key: string }>(
          mysqlDeadKeys(this.names, ids?.length ?? null),
          [...(ids ?? [])],
        );
        await this.lockBuckets(
          query,
          keys.map((k) => k.message_key),
          0,
        );
      }
      const { rows } = await query<
        RequeuedRow & {
          id: string | number;
          message_key: string | null;
          overtaken: number | string;
        }
      >(mysqlDeadToRequeue(this.names, ids?.length ?? null, this.policy), [...(ids ?? [])]);
      const inPlace = rows.filter((r) => Number(r.overtaken) === 0).map((r) => r.id);
      const moved = rows.filter((r) => Number(r.overtaken) !== 0);
      const requeued =
        inPlace.length === 0
          ? 0
          : (await query(mysqlRequeueInPlace(this.names, inPlace.length), inPlace)).affected;
      if (moved.length > 0) {
        // Moved to the end of their key's queue, like an enqueue under the locks taken above.
        await query(mysqlDeleteByIds(this.names, moved.length), [
          'dead',
          ...moved.map((r) => r.id),
        ]);
        for (let start = 0; start < moved.length; start += MAX_EXTENDED_ROWS_PER_INSERT) {
          const chunk = moved.slice(start, start + MAX_EXTENDED_ROWS_PER_INSERT);
          // The id goes back as it came (Buffer, Uint8Array or text, by driver): bound anew.
          const values = chunk.flatMap((r) =>
            requeueValues({ ...r, message_id: codec.param(messageIdText(r.message_id)) }),
          );
          await query(mysqlReinsert(this.names, chunk.length), values);
        }
      }
      return { requeued, resequenced: moved.length };
    });
  }

  /**
   * Makes the next waiting messages of each key claimable when nothing earlier holds them:
   * when a key's first blocking row is waiting, every waiting row among its first
   * `promotionRun` blocking rows (the next claim can take them as one run); with `all`, every
   * waiting row of the key (a partition owner's settle: the owner reads them back in order).
   */
  private async promote(query: Query, keys: readonly string[], all = false): Promise<number> {
    if (keys.length === 0) return 0;
    const { rows: firsts } = await query<{ k: string; first: string | number }>(
      mysqlFirstWaiting(this.names, keys.length),
      [...keys],
    );
    if (firsts.length === 0) return 0;
    const { rows: holders } = await query<{ k: string }>(
      mysqlStillHeld(this.names, this.policy, firsts.length),
      firsts.flatMap((f) => [f.k, f.first]),
    );
    const held = new Set(holders.map((r) => r.k));
    const heads = firsts.filter((f) => !held.has(f.k));
    if (all) {
      if (heads.length === 0) return 0;
      return (
        await query(
          mysqlPromoteKeys(this.names, heads.length),
          heads.map((f) => f.k),
        )
      ).affected;
    }
    const ids: (string | number)[] = heads.map((f) => f.first);
    const limit = promotionRun(this.policy, keys.length) - 1;
    for (let start = 0; limit > 0 && start < heads.length; start += MAX_KEYS_PER_RUN_QUERY) {
      const chunk = heads
        .slice(start, start + MAX_KEYS_PER_RUN_QUERY)
        .map((f) => ({ key: f.k, after: f.first, limit }));
      const { rows } = await query<KeyRow>(
        mysqlKeyRows(this.names, this.policy, chunk.length),
        mysqlKeyRowsParams(this.policy, chunk),
      );
      for (const { key } of chunk) {
        for (const row of firstRows(rows, key, limit)) {
          if (row.status === 'waiting') ids.push(row.id);
        }
      }
    }
    if (ids.length === 0) return 0;
    return (await query(mysqlPromote(this.names, ids.length), ids)).affected;
  }

  private lockForDispatch(query: Query, keys: readonly (string | null)[]): Promise<void> {
    return this.lockBuckets(query, keys, MYSQL_DISPATCH_LOCK_OFFSET);
  }

  /** Locks existing bucket rows by primary key, in ascending order: record locks only. */
  private async lockBuckets(
    query: Query,
    keys: readonly (string | null)[],
    offset: number,
  ): Promise<void> {
    await this.lockBucketRows(
      query,
      sortedKeyLocks(keys, MYSQL_KEY_LOCK_BUCKETS).map((b) => b + offset),
    );
  }

  /**
   * Fails (and so fails the enqueue or the dispatch step, which then changes nothing) when a
   * bucket row is missing, rather than go on without that key's lock.
   */
  private async lockBucketRows(query: Query, buckets: readonly number[]): Promise<void> {
    if (buckets.length === 0) return;
    const { rows } = await query<{ locked: number | string }>(
      mysqlLockKeys(this.names, buckets.length),
      buckets,
    );
    const locked = Number(rows[0]?.locked ?? 0);
    if (locked !== buckets.length) {
      throw this.lockTableBroken(
        `has ${buckets.length - locked} of the ${buckets.length} bucket rows this step locks missing`,
      );
    }
  }

  /** A guarded write that wrote nothing although the caller's transaction was open. */
  private noRowWritten(): Error {
    return new OutboxError(OutboxMessages.insertIncomplete(this.names.tableName));
  }

  private lockTableBroken(problem: string): OutboxTableMissingError {
    return new OutboxTableMissingError(
      OutboxMessages.keyLockTableBroken(this.names.lockTable, problem, {
        tableName: this.names.tableName,
        schema: this.names.schema ?? undefined,
        keyLock: true,
      }),
      this.names.lockTable,
      { cause: undefined },
    );
  }

  /**
   * A READ COMMITTED transaction on a connection of its own, whose row-lock waits end after
   * `dbTimeoutMs` (rounded up to whole seconds, InnoDB's unit) instead of the server's 50 s
   * default. The session value goes back to the server default before the connection returns
   * to the application's pool: a lock-wait timeout rolls back only its statement, so the
   * connection still takes the reset after a failure.
   */
  private transaction<T>(work: (query: Query) => Promise<T>): Promise<T> {
    return this.sql.transaction(async (tx) => {
      await tx.query('SET SESSION innodb_lock_wait_timeout = ?', [this.lockWaitSeconds]);
      try {
        return await work((sql, params) => tx.query(sql, params));
      } finally {
        await tx.query('SET SESSION innodb_lock_wait_timeout = DEFAULT').catch(() => undefined);
      }
    });
  }

  async hasDue(): Promise<boolean> {
    const { rows } = await this.sql.query<{ due: unknown }>(mysqlHasDue(this.names));
    return Number(rows[0]?.due ?? 0) === 1;
  }

  async stats(): Promise<OutboxStats> {
    const [row] = (await this.sql.query<StatsRow>(mysqlStats(this.names))).rows;
    return {
      pending: Number(row?.pending ?? 0),
      leased: Number(row?.leased ?? 0),
      delivered: Number(row?.delivered ?? 0),
      dead: Number(row?.dead ?? 0),
      oldestPendingAgeMs:
        row?.oldest_ms === null || row?.oldest_ms === undefined
          ? null
          : Math.round(Number(row.oldest_ms)),
    };
  }

  async close(): Promise<void> {
    // The DataSource belongs to the application.
  }
}

type Query = <R = SqlRow>(sql: string, params: readonly unknown[]) => Promise<SqlResult<R>>;

type WindowRow = { id: string | number; message_key: string | null; behind: number | string };
type KeyRow = { k: string; id: string | number; status: string };

/** Keys per mysqlKeyRows statement: 3 parts of 3 params each, far below mysql2's 65 535. */
const MAX_KEYS_PER_RUN_QUERY = 1_000;

/** The first `limit` rows of `key` among mysqlKeyRows' answer, in queue (id) order. */
function firstRows(rows: readonly KeyRow[], key: string, limit: number): KeyRow[] {
  return rows
    .filter((r) => r.k === key)
    .sort((a, b) => compareIds({ id: String(a.id) }, { id: String(b.id) }))
    .slice(0, limit);
}

/**
 * The locked rows to lease: a row at place p of its key's run only when the rows at places 1
 * to p - 1 were locked too. A row another dispatcher holds (or that stopped being due) ends
 * its key's run there, so no message is leased while an earlier one of its key is elsewhere.
 */
function wholeRuns<R extends { id: string | number; message_key: string | null }>(
  locked: readonly R[],
  places: ReadonlyMap<string, number>,
): R[] {
  const placesOf = new Map<string, Set<number>>();
  for (const row of locked) {
    if (row.message_key === null) continue;
    const set = placesOf.get(row.message_key) ?? new Set<number>();
    set.add(places.get(String(row.id)) ?? 0);
    placesOf.set(row.message_key, set);
  }
  return locked.filter((row) => {
    if (row.message_key === null) return true;
    const have = placesOf.get(row.message_key) ?? new Set<number>();
    const place = places.get(String(row.id)) ?? 0;
    for (let p = 1; p < place; p++) if (!have.has(p)) return false;
    return place >= 1;
  });
}

/**
 * What MySQL and MariaDB answer when a connection's prepared statement is gone or cannot be
 * made: 1243 (unknown statement handler: the server side was reset or switched, as a proxy that
 * multiplexes connections does) and 1461 (the server's max_prepared_stmt_count is reached).
 */
function lostPreparedStatement(error: unknown): boolean {
  const errno = (error as { errno?: unknown } | null)?.errno;
  return errno === 1243 || errno === 1461;
}

/** What a caller-given message id is locked by (a bucket shared with keys, in a space of its own). */
function messageIdLockName(messageId: string): string {
  return `\u0000message-id:${messageId}`;
}
