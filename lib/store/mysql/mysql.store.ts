import { insertChunks } from '../sql-values';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import type {
  ClaimOptions,
  ClaimedBatch,
  NewOutboxRow,
  OutboxQueuePolicy,
  OutboxStats,
  OutboxStore,
  RequeueReport,
  Settlement,
} from '../outbox-store.port';
import {
  MYSQL_DISPATCH_LOCK_OFFSET,
  MYSQL_KEY_LOCK_BUCKETS,
  mysqlClaimLease,
  mysqlClaimLock,
  mysqlClaimWindow,
  mysqlDeadByMessageIds,
  mysqlDeadKeys,
  mysqlDeadToRequeue,
  mysqlDeleteByIds,
  mysqlFirstBlocking,
  mysqlFirstWaiting,
  mysqlInsert,
  mysqlLockKeys,
  mysqlOrphanKeys,
  mysqlPark,
  mysqlPromote,
  mysqlPurgeCandidates,
  mysqlReinsert,
  mysqlRelease,
  mysqlReleaseAllWaiting,
  mysqlReleaseExpired,
  mysqlRequeueInPlace,
  mysqlSettleDead,
  mysqlSettleDelivered,
  mysqlSettleRetry,
  mysqlStats,
  mysqlStillHeld,
} from './mysql.sql';
import { claimWindow } from '../claim-window';
import { hashKey, requeueValues, toClaimedRecords, type ClaimedRow } from '../outbox-row.mapper';
import type { OutboxTableNames } from '../sql-identifier';

// mysql2 allows 65 535 placeholders per statement; stay well below with the widest row (8).
const MAX_ROWS_PER_INSERT = 4_000;

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', string | number> & {
  oldest_ms: string | number | null;
};

/** MySQL 8 / MariaDB 10.6+: a short READ COMMITTED claim transaction with SKIP LOCKED. */
export class MysqlOutboxStore implements OutboxStore {
  /** InnoDB row-lock wait bound of the dispatcher's transactions, in seconds. */
  private readonly lockWaitSeconds: number;

  constructor(
    private readonly dataSource: DataSource,
    private readonly names: OutboxTableNames,
    private readonly policy: OutboxQueuePolicy,
    timeoutMs = 10_000,
  ) {
    this.lockWaitSeconds = Math.max(1, Math.ceil(timeoutMs / 1_000));
  }

  async insert(
    manager: EntityManager,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<readonly string[]> {
    if (lockKeys) {
      const buckets = bucketsOf(rows.map((r) => r.key));
      if (buckets.length > 0)
        await manager.query(mysqlLockKeys(this.names, buckets.length), buckets);
    }
    const present: string[] = [];
    // With caller-given ids, one row per statement: MySQL has no RETURNING, and only a single
    // row's insert id (0 for a duplicate left alone) says whether it was written.
    const perStatement = rows.some((r) => r.idempotent === true) ? 1 : MAX_ROWS_PER_INSERT;
    for (const chunk of insertChunks(rows, perStatement)) {
      const result: unknown = await manager.query(
        mysqlInsert(this.names, chunk.rows.length, chunk.scheduled, chunk.idempotent),
        chunk.params,
      );
      const [only] = chunk.rows;
      if (chunk.idempotent && only !== undefined && !wroteRow(result)) present.push(only.messageId);
    }
    return present;
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = randomUUID();
    return this.transaction(async (query) => {
      const window = (await query(mysqlClaimWindow(this.names, this.policy), [
        claimWindow(options.limit),
      ])) as { id: string | number; message_key: string | null; behind: number | string }[];
      const heads = window.filter((r) => Number(r.behind) === 0).slice(0, options.limit);
      const blockedKeys = [
        ...new Set(
          window.flatMap((r) =>
            Number(r.behind) !== 0 && r.message_key !== null ? [r.message_key] : [],
          ),
        ),
      ];
      if (heads.length === 0) return { token, records: [], blockedKeys };
      const ids = heads.map((c) => c.id);
      const locked = (await query(mysqlClaimLock(this.names, ids.length), ids)) as ClaimedRow[];
      if (locked.length > 0) {
        await query(mysqlClaimLease(this.names, locked.length), [
          options.owner,
          token,
          options.leaseMs,
          options.leaseMs,
          ...locked.map((r) => r.id),
        ]);
      }
      return { token, records: toClaimedRecords(locked), blockedKeys };
    });
  }

  async park(keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return 0;
    return this.transaction(async (query) => {
      await this.lockForDispatch(query, keys);
      const heads = (await query(
        mysqlFirstBlocking(this.names, this.policy, keys.length),
        keys,
      )) as { k: string; first: string | number }[];
      if (heads.length === 0) return 0;
      return affected(
        await query(
          mysqlPark(this.names, heads.length),
          heads.flatMap((h) => [h.k, h.first]),
        ),
      );
    });
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    // One transaction: a crash between the groups must not leave half a batch settled.
    return this.transaction(async (query) => {
      const keys = this.policy.ordered ? s.advancedKeys : [];
      await this.lockForDispatch(query, keys);
      let changed = 0;
      if (s.delivered.length > 0) {
        changed += affected(
          await query(mysqlSettleDelivered(this.names, s.delivered.length, deleteDelivered), [
            token,
            ...s.delivered,
          ]),
        );
      }
      if (s.retry.length > 0) {
        changed += affected(
          await query(mysqlSettleRetry(this.names, s.retry.length), [
            ...s.retry.flatMap((r) => [r.id, r.delayMs, r.error]),
            token,
          ]),
        );
      }
      if (s.dead.length > 0) {
        changed += affected(
          await query(mysqlSettleDead(this.names, s.dead.length), [
            ...s.dead.flatMap((r) => [r.id, r.error]),
            token,
          ]),
        );
      }
      if (s.release.length > 0) {
        changed += affected(
          await query(mysqlRelease(this.names, s.release.length), [
            ...s.release.flatMap((r) => [r.id, r.delayMs, r.error]),
            token,
          ]),
        );
      }
      await this.promote(query, keys);
      return changed;
    });
  }

  async releaseExpired(): Promise<number> {
    return affected(await this.dataSource.query(mysqlReleaseExpired(this.names)));
  }

  async promoteOrphans(limit: number): Promise<number> {
    if (!this.policy.ordered) {
      return affected(await this.dataSource.query(mysqlReleaseAllWaiting(this.names), [limit]));
    }
    const rows = await this.dataSource.query<{ k: string }[]>(
      mysqlOrphanKeys(this.names, this.policy),
      [limit],
    );
    if (rows.length === 0) return 0;
    const keys = rows.map((r) => r.k);
    return this.transaction(async (query) => {
      await this.lockForDispatch(query, keys);
      return this.promote(query, keys);
    });
  }

  async purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number> {
    return this.deleteWhere(status, mysqlPurgeCandidates(this.names, status), [
      status,
      olderThanMs,
      limit,
    ]);
  }

  async deleteDead(messageIds: readonly string[]): Promise<number> {
    if (messageIds.length === 0) return 0;
    return this.deleteWhere(
      'dead',
      mysqlDeadByMessageIds(this.names, messageIds.length),
      messageIds,
    );
  }

  /** Deletes the rows `select` finds; deleted dead messages no longer block their keys. */
  private deleteWhere(
    status: 'delivered' | 'dead',
    select: string,
    params: readonly unknown[],
  ): Promise<number> {
    return this.transaction(async (query) => {
      const rows = (await query(select, params)) as { id: string | number; k: string | null }[];
      if (rows.length === 0) return 0;
      // Locks first, so the promotion below cannot miss a park.
      const keys =
        status === 'dead' && this.policy.ordered
          ? [...new Set(rows.flatMap((r) => (r.k === null ? [] : [r.k])))]
          : [];
      await this.lockForDispatch(query, keys);
      const deleted = affected(
        await query(mysqlDeleteByIds(this.names, rows.length), [status, ...rows.map((r) => r.id)]),
      );
      await this.promote(query, keys);
      return deleted;
    });
  }

  async requeueDead(ids?: readonly string[]): Promise<RequeueReport> {
    if (ids !== undefined && ids.length === 0) return { requeued: 0, resequenced: 0 };
    return this.transaction(async (query) => {
      if (this.policy.ordered && !this.policy.deadBlocksKey) {
        // The keys' enqueue locks, taken before deciding where each message goes: no message of
        // these keys can commit (and so be claimed) between the decision and the requeue, and
        // every one that committed before is seen by it.
        const keys = (await query(mysqlDeadKeys(this.names, ids?.length ?? null), [
          ...(ids ?? []),
        ])) as { message_key: string }[];
        await this.lockBuckets(
          query,
          keys.map((k) => k.message_key),
          0,
        );
      }
      const rows = (await query(mysqlDeadToRequeue(this.names, ids?.length ?? null, this.policy), [
        ...(ids ?? []),
      ])) as (Record<
        'message_id' | 'topic' | 'event_type' | 'payload' | 'headers' | 'created_at',
        string
      > & {
        id: string | number;
        message_key: string | null;
        overtaken: number | string;
      })[];
      const inPlace = rows.filter((r) => Number(r.overtaken) === 0).map((r) => r.id);
      const moved = rows.filter((r) => Number(r.overtaken) !== 0);
      const requeued =
        inPlace.length === 0
          ? 0
          : affected(await query(mysqlRequeueInPlace(this.names, inPlace.length), inPlace));
      if (moved.length > 0) {
        // Moved to the end of their key's queue, like an enqueue under the locks taken above.
        await query(mysqlDeleteByIds(this.names, moved.length), [
          'dead',
          ...moved.map((r) => r.id),
        ]);
        for (let start = 0; start < moved.length; start += MAX_ROWS_PER_INSERT) {
          const chunk = moved.slice(start, start + MAX_ROWS_PER_INSERT);
          await query(mysqlReinsert(this.names, chunk.length), chunk.flatMap(requeueValues));
        }
      }
      return { requeued, resequenced: moved.length };
    });
  }

  /** Makes the first waiting message of each key claimable when nothing earlier holds it. */
  private async promote(query: Query, keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return 0;
    const firsts = (await query(mysqlFirstWaiting(this.names, keys.length), [...keys])) as {
      k: string;
      first: string | number;
    }[];
    if (firsts.length === 0) return 0;
    const held = new Set(
      (
        (await query(
          mysqlStillHeld(this.names, this.policy, firsts.length),
          firsts.flatMap((f) => [f.k, f.first]),
        )) as { k: string }[]
      ).map((r) => r.k),
    );
    const ids = firsts.filter((f) => !held.has(f.k)).map((f) => f.first);
    if (ids.length === 0) return 0;
    return affected(await query(mysqlPromote(this.names, ids.length), ids));
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
    const buckets = bucketsOf(keys).map((b) => b + offset);
    if (buckets.length > 0) await query(mysqlLockKeys(this.names, buckets.length), buckets);
  }

  /**
   * A READ COMMITTED transaction on a connection of its own, whose row-lock waits end after
   * `dbTimeoutMs` (rounded up to whole seconds, InnoDB's unit) instead of the server's 50 s
   * default. The session value goes back to the server default before the connection returns
   * to the application's pool.
   */
  private async transaction<T>(work: (query: Query) => Promise<T>): Promise<T> {
    const runner = this.dataSource.createQueryRunner('master');
    let bounded = false;
    try {
      await runner.connect();
      await runner.query('SET SESSION innodb_lock_wait_timeout = ?', [this.lockWaitSeconds]);
      bounded = true;
      await runner.startTransaction('READ COMMITTED');
      const value = await work((sql, params) => runner.query(sql, [...params]));
      await runner.commitTransaction();
      return value;
    } catch (error) {
      if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
      throw error;
    } finally {
      if (bounded)
        await runner.query('SET SESSION innodb_lock_wait_timeout = DEFAULT').catch(() => undefined);
      await runner.release();
    }
  }

  async stats(): Promise<OutboxStats> {
    const [row] = await this.dataSource.query<StatsRow[]>(mysqlStats(this.names));
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

type Query = (sql: string, params: readonly unknown[]) => Promise<unknown>;

/** Distinct buckets of keys, ascending, so that every locker takes them in one order. */
function bucketsOf(keys: readonly (string | null)[]): number[] {
  return [
    ...new Set(keys.flatMap((k) => (k === null ? [] : [hashKey(k) % MYSQL_KEY_LOCK_BUCKETS]))),
  ].sort((a, b) => a - b);
}

function affected(result: unknown): number {
  // mysql2 answers an OkPacket / ResultSetHeader for UPDATE and DELETE.
  if (result !== null && typeof result === 'object' && 'affectedRows' in result) {
    return Number(result.affectedRows);
  }
  return 0;
}

/** Whether a one-row INSERT … ON DUPLICATE KEY UPDATE id = id wrote a new row (got an id). */
function wroteRow(result: unknown): boolean {
  // mysql2 sets CLIENT_FOUND_ROWS, so affectedRows is 1 for a duplicate too; insertId is not.
  return (
    result !== null &&
    typeof result === 'object' &&
    'insertId' in result &&
    Number(result.insertId) > 0
  );
}
