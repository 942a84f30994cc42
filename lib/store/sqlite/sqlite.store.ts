import { OutboxMessageExpiredError } from '../../errors/outbox-message-expired.error';
import type { PurgeTypes } from '../ports/outbox-store.port';
import { insertChunks, isExtended, cachedStatement } from '../shared-sql/sql-values';
import { randomUUID } from 'node:crypto';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type {
  ClaimOptions,
  ClaimedBatch,
  KeyedRow,
  NewOutboxRow,
  OutboxQueuePolicy,
  OutboxStats,
  OutboxStore,
  RequeueReport,
  Settlement,
} from '../ports/outbox-store.port';
import { OutboxMessages } from '../../outbox.messages';
import { countersOf, keyCounts, numbersOf } from '../shared-sql/key-sequence';
import { sqliteBumpCounters, sqliteSetNumbers } from './sqlite.key-sequence-sql';
import { sqliteDueTenants } from './sqlite.tenant-sql';
import {
  sqliteBoundAttempts,
  sqliteClaimLease,
  sqliteClaimWindow,
  sqliteDeadToRequeue,
  sqliteDeleteAttempts,
  sqliteDeleteDead,
  sqliteDeleteDeadByMessageIds,
  sqliteDeleteDeliveredAttempts,
  sqliteInsert,
  sqliteOrphanKeys,
  sqlitePark,
  sqlitePromote,
  sqlitePurge,
  sqlitePurgeByAge,
  sqlitePurgeCandidates,
  sqliteArchiveByIds,
  sqliteDeleteByIds,
  sqliteRecordAttempts,
  sqliteReinsert,
  sqliteRelease,
  sqliteReleaseAllWaiting,
  sqliteReleaseClaim,
  sqliteRenewLease,
  sqliteReleaseExpired,
  sqliteRequeueInPlace,
  sqliteSettleDead,
  sqliteSettleDelivered,
  sqliteSettleRetry,
  sqliteHasDue,
  sqliteInFlightHeads,
  sqliteStats,
} from './sqlite.sql';
import { IN_FLIGHT_GRACE_MS, rowsOfFirstKeys, windowOf } from '../shared-sql/claim-window';
import { promotionRun } from '../../options/queue-policy';
import {
  alreadyPresent,
  requeueValues,
  type RequeuedRow,
  toClaimedRecords,
  type ClaimedRow,
} from '../rows/outbox-row.mapper';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort, SqlRunner } from '../ports/sql-port';
import {
  openSqliteConnection,
  type SqliteConnection,
  type SqliteStatement,
} from './sqlite-connection';

const MAX_ROWS_PER_INSERT = 4_000;
// Rows with the step-4 columns bind 12 values: stay under SQLite's 32 766 placeholders.
const MAX_EXTENDED_ROWS_PER_INSERT = 2_500;
const BUSY_TIMEOUT_MS = 5_000;
const MAX_BUSY_RETRY_DELAY_MS = 50;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The write lock is held elsewhere (an application transaction on the file). */
function isBusy(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, driverError } = error as { code?: unknown; driverError?: { code?: unknown } };
  const busy = (c: unknown) =>
    typeof c === 'string' && (c.startsWith('SQLITE_BUSY') || c.startsWith('SQLITE_LOCKED'));
  return busy(code) || busy(driverError?.code);
}

/** Statements of one synchronous transaction. */
interface SqliteTx {
  all<R>(sql: string, params: readonly unknown[]): R[];
  run(sql: string, params: readonly unknown[]): number;
}

/**
 * SQLite (better-sqlite3), the embedded default. ORMs share one connection for every
 * transaction on SQLite, so the dispatcher works on a connection of its own to the same file:
 * otherwise its settles could land inside, and roll back with, an application transaction.
 *
 * Each dispatcher transaction runs synchronously, start to commit. better-sqlite3 waits for a
 * lock synchronously, freezing the event loop: were a dispatcher transaction to await between
 * statements, an application write in this process could block the loop waiting for it while it
 * waits for the loop. So the dispatcher's connection never waits inside SQLite (timeout 0), and
 * a transaction that finds the write lock taken starts over after an asynchronous pause.
 */
export class SqliteOutboxStore implements OutboxStore {
  private database: SqliteConnection | undefined;
  private readonly statements = new Map<string, SqliteStatement>();
  private readonly oneRowInserts = new Map<string, string>();
  private readonly tx: SqliteTx = {
    all: <R>(sql: string, params: readonly unknown[]) => this.statement(sql).all(...params) as R[],
    run: (sql, params) => this.statement(sql).run(...params).changes,
  };

  constructor(
    private readonly sql: SqlPort,
    private readonly names: OutboxTableNames,
    private readonly policy: OutboxQueuePolicy,
    /** Whether the attempt history takes `fallback` rows (schema step 8). */
    private readonly fallbackHistory = false,
  ) {}

  /** Opens the dispatcher's own connection; only apps that run workers need it. */
  open(): void {
    if (this.database !== undefined) return;
    const file = this.sql.databaseFile;
    if (file === undefined || file === '' || file === ':memory:') {
      throw new OutboxOptionsError(OutboxMessages.sqliteNeedsFile(), 'dataSource');
    }
    this.database = openSqliteConnection(file, this.sql.sqliteDriver);
  }

  async insert(tx: SqlRunner, rows: readonly NewOutboxRow[]): Promise<readonly string[]> {
    // SQLite lets one writer in at a time, so a key's id order is its commit order without locks.
    const present: string[] = [];
    const perStatement = rows.some(isExtended) ? MAX_EXTENDED_ROWS_PER_INSERT : MAX_ROWS_PER_INSERT;
    // SQLite binds a Buffer as a BLOB and has no base64 function: the bytes go as they are.
    for (const chunk of insertChunks(rows, perStatement, 'buffer')) {
      const build = (): string =>
        sqliteInsert(
          this.names,
          chunk.rows.length,
          chunk.scheduled,
          chunk.idempotent,
          chunk.extended,
        );
      const text =
        chunk.rows.length === 1
          ? cachedStatement(
              this.oneRowInserts,
              `${chunk.scheduled}:${chunk.idempotent}:${chunk.extended}`,
              build,
            )
          : build();
      const { rows: written } = await tx.query(text, chunk.params);
      if (chunk.idempotent) present.push(...alreadyPresent(chunk.rows, written));
    }
    return present;
  }

  async numberKeys(tx: SqlRunner, rows: readonly KeyedRow[]): Promise<void> {
    if (rows.length === 0) return;
    const counts = keyCounts(rows);
    const { rows: counters } = await tx.query<{
      topic: string;
      message_key: string;
      last_seq: number | bigint;
    }>(sqliteBumpCounters(this.names, counts.length), counts.flat());
    const numbers = numbersOf(rows, countersOf(counters));
    await tx.query(
      sqliteSetNumbers(this.names, rows.length),
      rows.flatMap((r, i) => [r.messageId, numbers[i]]),
    );
  }

  /**
   * Under ordering, a claim takes each key's head and, behind it, the rows of its key that
   * follow with no gap (a run of up to `policy.maxRun`): a window row is in its key's run when
   * the blocking row right before it (`prev`) is a window row in that run. Heads first, then
   * every key's second row, and so on, up to the limit. The transaction holds the write lock
   * from the window read to the lease: no other claim can take part of a run.
   */
  claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = options.token ?? randomUUID();
    // In process: the claim's work runs on this thread whenever it runs, so nothing to wait for.
    options.onSent?.();
    return this.transaction((tx) => {
      const window = rowsOfFirstKeys(
        tx.all<{ id: number; message_key: string | null; prev: number | null }>(
          sqliteClaimWindow(
            this.names,
            this.policy,
            options.tenant === undefined ? 'all' : options.tenant.id === null ? 'none' : 'one',
          ),
          options.tenant?.id == null ? [windowOf(options)] : [options.tenant.id, windowOf(options)],
        ),
        options.limit,
      );
      const places = new Map<number, number>();
      // A row's prev has a smaller id: in id order, it is placed before the row is looked at.
      for (const row of [...window].sort((a, b) => a.id - b.id)) {
        const before = row.prev === null ? 0 : places.get(row.prev);
        if (before !== undefined && before < this.policy.maxRun) places.set(row.id, before + 1);
      }
      const heldBack = [
        ...new Set(
          window.flatMap((r) =>
            r.message_key !== null && !places.has(r.id) ? [r.message_key] : [],
          ),
        ),
      ];
      // Window order is due order; a stable sort by place keeps it within each place.
      const candidates = window
        .filter((r) => places.has(r.id))
        .sort((a, b) => (places.get(a.id) ?? 0) - (places.get(b.id) ?? 0))
        .slice(0, options.limit);
      const rows =
        candidates.length === 0
          ? []
          : tx.all<ClaimedRow>(sqliteClaimLease(this.names), [
              options.owner,
              token,
              options.leaseMs,
              options.leaseMs,
              JSON.stringify(candidates.map((r) => r.id)),
            ]);
      // A key whose head this claim took is in flight; the others' heads are looked up.
      const taken = new Set(rows.map((r) => r.message_key));
      const asked = heldBack.filter((k) => !taken.has(k));
      const flying = new Set(
        asked.length === 0
          ? []
          : tx
              .all<{ k: string }>(sqliteInFlightHeads(this.names, this.policy), [
                JSON.stringify(asked),
                IN_FLIGHT_GRACE_MS,
              ])
              .map((r) => r.k),
      );
      const blockedKeys = asked.filter((k) => !flying.has(k));
      return {
        token,
        records: toClaimedRecords(rows),
        blockedKeys,
        inFlightKeys: heldBack.length - blockedKeys.length,
      };
    });
  }

  park(keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return Promise.resolve(0);
    return this.transaction((tx) =>
      tx.run(sqlitePark(this.names, this.policy), [JSON.stringify(keys)]),
    );
  }

  settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    // One transaction: a crash between the groups must not leave half a batch settled.
    return this.transaction((tx) => {
      let changed = 0;
      this.recordAttempts(tx, token, s, deleteDelivered);
      if (s.delivered.length > 0) {
        // Deleted rows take their history with them (a message delivered after failures).
        if (deleteDelivered) {
          tx.run(sqliteDeleteDeliveredAttempts(this.names), [
            token,
            JSON.stringify(s.delivered.map(Number)),
          ]);
        }
        changed += tx.run(sqliteSettleDelivered(this.names, deleteDelivered), [
          token,
          JSON.stringify(s.delivered.map(Number)),
        ]);
      }
      if (s.retry.length > 0) {
        changed += tx.run(sqliteSettleRetry(this.names), [
          JSON.stringify(s.retry.map((r) => [Number(r.id), r.delayMs, r.error])),
          token,
        ]);
      }
      if (s.dead.length > 0) {
        changed += tx.run(sqliteSettleDead(this.names), [
          JSON.stringify(
            s.dead.map((r) => [Number(r.id), r.error, r.unpublished === true ? 1 : 0]),
          ),
          token,
        ]);
      }
      if (s.release.length > 0) {
        changed += tx.run(sqliteRelease(this.names), [
          JSON.stringify(s.release.map((r) => [Number(r.id), r.delayMs, r.error])),
          token,
        ]);
      }
      if (this.policy.ordered && s.advancedKeys.length > 0) {
        this.promote(tx, s.advancedKeys);
      }
      return changed;
    });
  }

  /**
   * The failures of a settle in the attempt history, fenced by the token, before the updates
   * clear the lease; then the history of those messages is cut to its bound. No statement
   * when the batch went through.
   */
  private recordAttempts(
    tx: SqliteTx,
    token: string,
    s: Settlement,
    deleteDelivered: boolean,
  ): void {
    // Where delivered rows are deleted, their history goes with them in this very settle.
    const fallback = this.fallbackHistory && !deleteDelivered ? (s.fallback ?? []) : [];
    const failed = [
      ...fallback.map((r) => [Number(r.id), 'fallback', r.errorClass, r.error]),
      ...s.retry.map((r) => [Number(r.id), 'retry', r.errorClass, r.error]),
      ...s.dead.map((r) => [Number(r.id), 'dead', r.errorClass, r.error]),
      ...s.release.flatMap((r) =>
        r.error === null ? [] : [[Number(r.id), 'outage', r.errorClass, r.error]],
      ),
    ];
    if (failed.length === 0) return;
    if (tx.run(sqliteRecordAttempts(this.names), [JSON.stringify(failed), token]) === 0) return;
    tx.run(sqliteBoundAttempts(this.names), [JSON.stringify(failed.map(([id]) => id))]);
  }

  releaseExpired(): Promise<number> {
    return this.transaction((tx) => tx.run(sqliteReleaseExpired(this.names), []));
  }

  renewLease(
    ids: readonly string[],
    token: string,
    leaseMs: number,
    newToken?: string,
  ): Promise<number> {
    return this.transaction((tx) =>
      tx.run(sqliteRenewLease(this.names), [
        leaseMs,
        leaseMs,
        newToken ?? null,
        token,
        JSON.stringify(ids.map(Number)),
      ]),
    );
  }

  releaseClaim(token: string): Promise<number> {
    return this.transaction((tx) => tx.run(sqliteReleaseClaim(this.names), [token]));
  }

  promoteOrphans(limit: number): Promise<number> {
    return this.transaction((tx) => {
      if (!this.policy.ordered) return tx.run(sqliteReleaseAllWaiting(this.names), [limit]);
      const keys = tx
        .all<{ key: string }>(sqliteOrphanKeys(this.names, this.policy), [limit])
        .map((r) => r.key);
      if (keys.length === 0) return 0;
      return this.promote(tx, keys);
    });
  }

  purge(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    limit: number,
    archive = false,
    types?: PurgeTypes,
  ): Promise<number> {
    return this.transaction((tx) => {
      const rows = archive
        ? this.archiveAndDelete(tx, status, olderThanMs, limit, types)
        : tx.all<DeletedRow>(sqlitePurge(this.names, status, types), [olderThanMs, limit]);
      this.deleteAttempts(tx, rows);
      if (status === 'dead') this.advanceDeleted(tx, rows);
      return rows.length;
    });
  }

  purgeByAge(olderThanMs: number, limit: number): Promise<number> {
    return this.transaction((tx) => {
      const rows = tx.all<DeletedRow>(sqlitePurgeByAge(this.names), [limit, olderThanMs]);
      this.deleteAttempts(tx, rows);
      return rows.length;
    });
  }

  expiredDead(messageIds: readonly string[]): Promise<readonly string[]> {
    if (messageIds.length === 0) return Promise.resolve([]);
    return this.transaction((tx) =>
      tx
        .all<{ message_id: string }>(
          `SELECT message_id FROM ${this.names.table} WHERE status = 'dead' AND last_error LIKE ? AND message_id IN (SELECT value FROM json_each(?))`,
          [`${OutboxMessageExpiredError.name}:%`, JSON.stringify(messageIds)],
        )
        .map((r) => r.message_id),
    );
  }

  deleteDead(messageIds: readonly string[]): Promise<number> {
    if (messageIds.length === 0) return Promise.resolve(0);
    return this.transaction((tx) => {
      const rows = tx.all<DeletedRow>(sqliteDeleteDeadByMessageIds(this.names), [
        JSON.stringify(messageIds),
      ]);
      this.deleteAttempts(tx, rows);
      this.advanceDeleted(tx, rows);
      return rows.length;
    });
  }

  /** Copies the rows due into the archive, then deletes them, in the caller's transaction. */
  private archiveAndDelete(
    tx: SqliteTx,
    status: 'delivered' | 'dead',
    olderThanMs: number,
    limit: number,
    types?: PurgeTypes,
  ): DeletedRow[] {
    const ids = tx
      .all<{ id: number }>(sqlitePurgeCandidates(this.names, status, types), [olderThanMs, limit])
      .map((r) => r.id);
    if (ids.length === 0) return [];
    const list = JSON.stringify(ids);
    tx.run(sqliteArchiveByIds(this.names), [list]);
    return tx.all<DeletedRow>(sqliteDeleteByIds(this.names), [list]);
  }

  /** Deleted messages take their attempt history with them, in the same transaction. */
  private deleteAttempts(tx: SqliteTx, rows: readonly DeletedRow[]): void {
    if (rows.length === 0) return;
    tx.run(sqliteDeleteAttempts(this.names), [JSON.stringify(rows.map((r) => r.message_id))]);
  }

  /** A deleted dead message no longer blocks its key: the next one may go. */
  private advanceDeleted(tx: SqliteTx, rows: readonly { key: string | null }[]): void {
    const keys = [...new Set(rows.flatMap((r) => (r.key === null ? [] : [r.key])))];
    if (this.policy.ordered && keys.length > 0) this.promote(tx, keys);
  }

  /** Makes the next waiting messages of each key claimable (`promotionRun`): see sqlitePromote. */
  private promote(tx: SqliteTx, keys: readonly string[]): number {
    return tx.run(sqlitePromote(this.names, this.policy), [
      JSON.stringify(keys),
      promotionRun(this.policy, keys.length) - 1,
    ]);
  }

  requeueDead(ids?: readonly string[]): Promise<RequeueReport> {
    if (ids !== undefined && ids.length === 0) {
      return Promise.resolve({ requeued: 0, resequenced: 0 });
    }
    return this.transaction((tx) => {
      const rows = tx.all<DeadRow>(
        sqliteDeadToRequeue(this.names, ids !== undefined, this.policy),
        ids === undefined ? [] : [JSON.stringify(ids)],
      );
      const inPlace = rows.filter((r) => !r.overtaken).map((r) => r.id);
      const moved = rows.filter((r) => r.overtaken);
      const requeued =
        inPlace.length === 0
          ? 0
          : tx.run(sqliteRequeueInPlace(this.names), [JSON.stringify(inPlace)]);
      if (moved.length > 0) {
        // Same message, new row id: the end of its key's queue (one writer at a time on SQLite).
        tx.run(sqliteDeleteDead(this.names), [JSON.stringify(moved.map((r) => r.id))]);
        for (let start = 0; start < moved.length; start += MAX_EXTENDED_ROWS_PER_INSERT) {
          const chunk = moved.slice(start, start + MAX_EXTENDED_ROWS_PER_INSERT);
          tx.run(sqliteReinsert(this.names, chunk.length), chunk.flatMap(requeueValues));
        }
      }
      return { requeued, resequenced: moved.length };
    });
  }

  async dueTenants(after: string | null, limit: number): Promise<readonly (string | null)[]> {
    const sql = sqliteDueTenants(this.names);
    const params = [after ?? '', limit];
    const rows =
      this.database === undefined
        ? (await this.sql.query<{ tenant: string | null }>(sql, params)).rows
        : (this.statement(sql).all(...params) as { tenant: string | null }[]);
    return rows.map((r) => r.tenant);
  }

  async hasDue(): Promise<boolean> {
    const sql = sqliteHasDue(this.names);
    // Through the dispatcher's connection when open, as the claim reads (see stats).
    const [row] =
      this.database === undefined
        ? (await this.sql.query<{ due: unknown }>(sql, [])).rows
        : (this.statement(sql).all() as { due: unknown }[]);
    return Number(row?.due ?? 0) === 1;
  }

  async stats(): Promise<OutboxStats> {
    const sql = sqliteStats(this.names);
    // Through the dispatcher's connection when open (a fresh WAL snapshot), else the app's.
    const [row] =
      this.database === undefined
        ? (await this.sql.query<StatsRow>(sql, [])).rows
        : (this.statement(sql).all() as StatsRow[]);
    return {
      pending: Number(row?.pending ?? 0),
      leased: Number(row?.leased ?? 0),
      delivered: Number(row?.delivered ?? 0),
      dead: Number(row?.dead ?? 0),
      oldestPendingAgeMs:
        row?.oldest_ms === null || row?.oldest_ms === undefined ? null : Math.round(row.oldest_ms),
    };
  }

  close(): Promise<void> {
    const database = this.database;
    this.database = undefined;
    this.statements.clear();
    database?.close();
    return Promise.resolve();
  }

  private statement(sql: string): SqliteStatement {
    let statement = this.statements.get(sql);
    if (statement === undefined) {
      if (this.database === undefined)
        throw new Error('The SQLite dispatcher connection is closed');
      statement = this.database.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement;
  }

  /** One IMMEDIATE transaction, run synchronously; a busy one rolled back and starts over. */
  private async transaction<T>(work: (tx: SqliteTx) => T): Promise<T> {
    this.open();
    const database = this.database as SqliteConnection;
    return this.retryBusy(() => database.transaction(() => work(this.tx)).immediate());
  }

  private async retryBusy<T>(attempt: () => T): Promise<T> {
    const deadline = Date.now() + BUSY_TIMEOUT_MS;
    for (let delay = 2; ; delay = Math.min(delay * 2, MAX_BUSY_RETRY_DELAY_MS)) {
      try {
        return attempt();
      } catch (error) {
        if (!isBusy(error) || Date.now() >= deadline) throw error;
        await sleep(delay);
      }
    }
  }
}

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', number> & {
  oldest_ms: number | null;
};

type DeletedRow = { key: string | null; message_id: string };

type DeadRow = RequeuedRow & { id: number; overtaken: number };
