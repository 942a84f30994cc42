import { Logger } from '@nestjs/common';
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
import { describeError } from '../../internal/describe-error';
import {
  POSTGRES_PLANNER_SETTINGS,
  postgresClaim,
  postgresDeadKeys,
  postgresDeadToRequeue,
  postgresDeleteDead,
  postgresInsert,
  postgresLockKeys,
  postgresOrphanKeys,
  postgresPark,
  postgresPromote,
  postgresPurge,
  postgresReleaseAllWaiting,
  postgresReleaseExpired,
  postgresRequeueInPlace,
  postgresResequence,
  postgresSettle,
  postgresStats,
} from './postgres.sql';
import { claimWindow } from '../claim-window';
import { alreadyPresent, hashKey, toClaimedRecords, type ClaimedRow } from '../outbox-row.mapper';
import type { OutboxTableNames } from '../sql-identifier';

// The subset of node-postgres' client that LISTEN needs.
interface NotifyingClient {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeAllListeners(event: string): unknown;
}
interface PostgresDriverLike {
  obtainMasterConnection(): Promise<[NotifyingClient, (error?: unknown) => void]>;
}

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', number> & {
  oldest_ms: string | number | null;
};

const RELISTEN_DELAY_MS = 1_000;

/** PostgreSQL: single-statement claim with SKIP LOCKED, advisory locks per key, LISTEN/NOTIFY. */
export class PostgresOutboxStore implements OutboxStore {
  private readonly logger = new Logger('OutboxStore');
  private readonly channel: string;
  /** Advisory-lock namespace of enqueues: a key's writers commit in id order. */
  private readonly lockNamespace: number;
  /** Advisory-lock namespace of parking and promotion, apart so they never wait on enqueues. */
  private readonly dispatchNamespace: number;
  private readonly insertSql = new Map<string, string>();
  private readonly claimSql: string;

  constructor(
    private readonly dataSource: DataSource,
    private readonly names: OutboxTableNames,
    private readonly notify: boolean,
    private readonly policy: OutboxQueuePolicy,
    private readonly timeoutMs: number,
    /** The schema the table resolves to (the table's own, else the connection's). */
    schema: string = names.schema ?? 'public',
  ) {
    this.channel = `${schema}_${names.tableName}`.slice(0, 63);
    this.lockNamespace = hashKey(`nestjs-outbox:${this.channel}`);
    this.dispatchNamespace = hashKey(`nestjs-outbox-dispatch:${this.channel}`);
    this.claimSql = postgresClaim(names, policy);
  }

  async insert(
    manager: EntityManager,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<readonly string[]> {
    const scheduled = rows.some((r) => r.availableAt !== null || r.delayMs !== null);
    const keys = lockKeys ? sortedLockIds(rows.map((r) => r.key)) : [];
    const lock = keys.length > 0;
    const idempotent = rows.some((r) => r.idempotent === true);
    const variant = `${scheduled}:${lock}:${this.notify}:${idempotent}`;
    let sql = this.insertSql.get(variant);
    if (sql === undefined) {
      sql = postgresInsert(this.names, scheduled, lock, this.notify, idempotent);
      this.insertSql.set(variant, sql);
    }
    // Parameters in the order postgresInsert numbers them: arrays, then the optional groups.
    const params: unknown[] = [
      rows.map((r) => r.messageId),
      rows.map((r) => r.topic),
      rows.map((r) => r.key),
      rows.map((r) => r.type),
      rows.map((r) => r.payload),
      rows.map((r) => r.headers),
    ];
    if (scheduled)
      params.push(
        rows.map((r) => r.availableAt),
        rows.map((r) => r.delayMs),
      );
    if (lock) params.push(this.lockNamespace, keys);
    if (this.notify) params.push(this.channel);
    const written: unknown = await manager.query(sql, params);
    return idempotent ? alreadyPresent(rows, written) : [];
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = randomUUID();
    const { records: rows } = await this.transaction((run) =>
      run<ClaimRow>(this.claimSql, [
        options.owner,
        token,
        options.leaseMs,
        options.limit,
        claimWindow(options.limit),
      ]),
    );
    const claimed = rows.filter((row): row is ClaimedRow & ClaimRow => row.id !== null);
    return {
      token,
      records: toClaimedRecords(claimed),
      blockedKeys: rows[0]?.blocked ?? [],
    };
  }

  async park(keys: readonly string[]): Promise<number> {
    if (keys.length === 0) return 0;
    return this.transaction(async (run) => {
      await this.lockForDispatch(run, keys);
      return (await run(postgresPark(this.names, this.policy), [keys])).affected ?? 0;
    });
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    const groups = {
      delivered: s.delivered.length > 0,
      retry: s.retry.length > 0,
      dead: s.dead.length > 0,
      release: s.release.length > 0,
    };
    if (!groups.delivered && !groups.retry && !groups.dead && !groups.release) return 0;
    const sql = postgresSettle(this.names, groups, deleteDelivered);
    const params: unknown[] = [token];
    if (groups.delivered) params.push(s.delivered);
    if (groups.retry)
      params.push(
        s.retry.map((r) => r.id),
        s.retry.map((r) => r.delayMs),
        s.retry.map((r) => r.error),
      );
    if (groups.dead)
      params.push(
        s.dead.map((r) => r.id),
        s.dead.map((r) => r.error),
      );
    if (groups.release)
      params.push(
        s.release.map((r) => r.id),
        s.release.map((r) => r.delayMs),
        s.release.map((r) => r.error),
      );
    return this.transaction(async (run) => {
      const keys = this.policy.ordered ? s.advancedKeys : [];
      // The dispatch locks come first so that the promotion below sees every park committed
      // before it, and a park after it sees this settle (see `park`).
      await this.lockForDispatch(run, keys);
      const { records: rows } = await run<{ changed: number }>(sql, params);
      if (keys.length > 0) await run(postgresPromote(this.names, this.policy), [keys]);
      return rows[0]?.changed ?? 0;
    });
  }

  async releaseExpired(): Promise<number> {
    return (await this.run(postgresReleaseExpired(this.names), [])).affected ?? 0;
  }

  async promoteOrphans(limit: number): Promise<number> {
    if (!this.policy.ordered) {
      return (await this.run(postgresReleaseAllWaiting(this.names), [limit])).affected ?? 0;
    }
    // In a transaction for its planner settings (see `transaction`).
    const { records } = await this.transaction((run) =>
      run<{ key: string | null }>(postgresOrphanKeys(this.names, this.policy), [limit]),
    );
    const keys = records.flatMap((r) => (r.key === null ? [] : [r.key]));
    if (keys.length === 0) return 0;
    return this.promoteKeys(keys);
  }

  async purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number> {
    const { records } = await this.run<{ key: string | null }>(postgresPurge(this.names), [
      status,
      olderThanMs,
      limit,
    ]);
    if (status === 'dead') await this.advanceDeleted(records);
    return records.length;
  }

  async deleteDead(messageIds: readonly string[]): Promise<number> {
    if (messageIds.length === 0) return 0;
    const { records } = await this.run<{ key: string | null }>(postgresDeleteDead(this.names), [
      messageIds,
    ]);
    await this.advanceDeleted(records);
    return records.length;
  }

  /** A deleted dead message no longer blocks its key: the next one may go. */
  private async advanceDeleted(rows: readonly { key: string | null }[]): Promise<void> {
    if (!this.policy.ordered) return;
    const keys = [...new Set(rows.flatMap((r) => (r.key === null ? [] : [r.key])))];
    if (keys.length > 0) await this.promoteKeys(keys);
  }

  async requeueDead(messageIds?: readonly string[]): Promise<RequeueReport> {
    if (messageIds !== undefined && messageIds.length === 0) return { requeued: 0, resequenced: 0 };
    return this.transaction(async (run) => {
      if (this.policy.ordered && !this.policy.deadBlocksKey) {
        // The keys' enqueue locks, taken before deciding where each message goes: no message of
        // these keys can commit (and so be claimed) between the decision and the requeue, and
        // every one that committed before is seen by it.
        const { records: keys } = await run<{ key: string }>(postgresDeadKeys(this.names), [
          messageIds ?? null,
        ]);
        await run(postgresLockKeys(), [this.lockNamespace, sortedLockIds(keys.map((k) => k.key))]);
      }
      const { records } = await run<{ id: string; key: string | null; overtaken: boolean }>(
        postgresDeadToRequeue(this.names, this.policy),
        [messageIds ?? null],
      );
      const inPlace = records.filter((r) => !r.overtaken).map((r) => r.id);
      const moved = records.filter((r) => r.overtaken);
      // Moved to the end of their key's queue, like an enqueue under the locks taken above.
      const resequenced =
        moved.length === 0
          ? 0
          : ((await run(postgresResequence(this.names), [moved.map((r) => r.id)])).affected ?? 0);
      const requeued =
        inPlace.length === 0
          ? 0
          : ((await run(postgresRequeueInPlace(this.names), [inPlace])).affected ?? 0);
      return { requeued, resequenced };
    });
  }

  async stats(): Promise<OutboxStats> {
    const [row] = (await this.run<StatsRow>(postgresStats(this.names), [])).records;
    return {
      pending: row?.pending ?? 0,
      leased: row?.leased ?? 0,
      delivered: row?.delivered ?? 0,
      dead: row?.dead ?? 0,
      oldestPendingAgeMs:
        row?.oldest_ms === null || row?.oldest_ms === undefined
          ? null
          : Math.round(Number(row.oldest_ms)),
    };
  }

  async listen(onWake: () => void): Promise<() => Promise<void>> {
    let stopped = false;
    let current: { client: NotifyingClient; release: (error?: unknown) => void } | undefined;
    let retry: NodeJS.Timeout | undefined;
    const driver = this.dataSource.driver as unknown as PostgresDriverLike;

    const connect = async (): Promise<void> => {
      const [client, release] = await driver.obtainMasterConnection();
      current = { client, release };
      client.on('notification', onWake);
      client.on('error', (error: Error) => {
        // A dropped LISTEN connection only costs latency (polling continues); reconnect.
        this.logger.warn(`LISTEN connection lost: ${describeError(error)}; reconnecting`);
        drop(error);
        schedule();
      });
      // A connection the server closes cleanly (pg_terminate_backend, a restart, an idle
      // timeout) ends without an 'error': without this, wake-ups would stop for good.
      client.on('end', () => {
        if (current?.client !== client) return;
        this.logger.warn('LISTEN connection ended; reconnecting');
        drop(new Error('LISTEN connection ended'));
        schedule();
      });
      await client.query(`LISTEN ${this.names.quote(this.channel)}`);
    };
    const drop = (error?: unknown): void => {
      if (current === undefined) return;
      current.client.removeAllListeners('notification');
      current.client.removeAllListeners('error');
      current.client.removeAllListeners('end');
      current.release(error ?? true);
      current = undefined;
    };
    const schedule = (): void => {
      if (stopped || retry !== undefined) return;
      retry = setTimeout(() => {
        retry = undefined;
        connect().then(onWake, (error: unknown) => {
          this.logger.warn(`LISTEN reconnect failed: ${describeError(error)}`);
          drop(error);
          schedule();
        });
      }, RELISTEN_DELAY_MS);
    };

    await connect();
    return async () => {
      stopped = true;
      if (retry !== undefined) clearTimeout(retry);
      const client = current?.client;
      if (client !== undefined) {
        await client.query(`UNLISTEN ${this.names.quote(this.channel)}`).catch(() => undefined);
      }
      drop();
    };
  }

  async close(): Promise<void> {
    // The DataSource belongs to the application; nothing of ours to close.
  }

  /** Promotes the next waiting message of each key, under the keys' dispatch locks. */
  private promoteKeys(keys: readonly string[]): Promise<number> {
    return this.transaction(async (run) => {
      await this.lockForDispatch(run, keys);
      return (await run(postgresPromote(this.names, this.policy), [keys])).affected ?? 0;
    });
  }

  private async lockForDispatch(run: Run, keys: readonly (string | null)[]): Promise<void> {
    const ids = sortedLockIds(keys);
    if (ids.length > 0) await run(postgresLockKeys(), [this.dispatchNamespace, ids]);
  }

  /**
   * Runs statements in one READ COMMITTED transaction whose statements the server cancels
   * after `dbTimeoutMs`, so a stuck lock or connection cannot hold the dispatcher forever.
   */
  private async transaction<T>(work: (run: Run) => Promise<T>): Promise<T> {
    const runner = this.dataSource.createQueryRunner('master');
    try {
      await runner.connect();
      await runner.startTransaction('READ COMMITTED');
      const run: Run = async <R>(sql: string, params: unknown[]) => {
        const result = await runner.query(sql, params, true);
        return { records: result.records as R[], affected: result.affected };
      };
      // JIT off: a promotion over a key with a large parked backlog is estimated near
      // jit_above_cost, and compiling it cost 15× the statement (bench P9). The idle timeout
      // ends this transaction on the server if its process freezes (SIGSTOP, a long pause)
      // between statements, so its row and advisory locks cannot hold up other dispatchers.
      // The planner settings keep every key-head lookup an index probe whatever the
      // statistics say (POSTGRES_PLANNER_SETTINGS). All in one round trip.
      await run(
        `SELECT set_config('statement_timeout', $1, true), set_config('jit', 'off', true),
  set_config('idle_in_transaction_session_timeout', $1, true), ${POSTGRES_PLANNER_SETTINGS}`,
        [String(this.timeoutMs)],
      );
      const value = await work(run);
      await runner.commitTransaction();
      return value;
    } catch (error) {
      if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
      throw error;
    } finally {
      await runner.release();
    }
  }

  /**
   * Runs one statement with TypeORM's structured result: `DataSource.query` answers UPDATE …
   * RETURNING as [rows, count] on PostgreSQL, which would hide the rows.
   */
  private async run<T = unknown>(
    sql: string,
    params: unknown[],
  ): Promise<{ records: T[]; affected: number | undefined }> {
    const runner = this.dataSource.createQueryRunner();
    try {
      const result = await runner.query(sql, params, true);
      return { records: result.records as T[], affected: result.affected };
    } finally {
      await runner.release();
    }
  }
}

/** A claim answers one row even when it leased nothing, to carry the blocked keys. */
type ClaimRow = Omit<ClaimedRow, 'id'> & { id: ClaimedRow['id'] | null; blocked: string[] | null };

type Run = <R = unknown>(
  sql: string,
  params: unknown[],
) => Promise<{ records: R[]; affected: number | undefined }>;

/** Distinct lock ids of keys, ascending: every locker takes them in one order, so none deadlock. */
function sortedLockIds(keys: readonly (string | null)[]): number[] {
  return [...new Set(keys.flatMap((k) => (k === null ? [] : [hashKey(k)])))].sort((a, b) => a - b);
}
