import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import type {
  ClaimOptions,
  ClaimedBatch,
  NewOutboxRow,
  OutboxStats,
  OutboxStore,
  Settlement,
} from '../interfaces/outbox-store.interface';
import { describeError } from '../internal/describe-error';
import {
  postgresClaim,
  postgresInsert,
  postgresPurge,
  postgresReleaseExpired,
  postgresRequeueDead,
  postgresSettle,
  postgresStats,
} from './dialects/postgres.sql';
import { hashKey, toClaimedRecords, type ClaimedRow } from './outbox-row.mapper';
import type { OutboxTableNames } from './sql-identifier';

// The subset of node-postgres' client that LISTEN needs.
interface NotifyingClient {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
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
  private readonly lockNamespace: number;
  private readonly insertSql = new Map<string, string>();
  private readonly claimSql = new Map<string, string>();

  constructor(
    private readonly dataSource: DataSource,
    private readonly names: OutboxTableNames,
    private readonly notify: boolean,
  ) {
    this.channel = `${names.schema ?? 'public'}_${names.tableName}`.slice(0, 63);
    this.lockNamespace = hashKey(`nestjs-outbox:${this.channel}`);
  }

  async insert(
    manager: EntityManager,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<void> {
    const scheduled = rows.some((r) => r.availableAt !== null || r.delayMs !== null);
    const keys = lockKeys
      ? [...new Set(rows.flatMap((r) => (r.key === null ? [] : [hashKey(r.key)])))].sort(
          (a, b) => a - b,
        )
      : [];
    const lock = keys.length > 0;
    const variant = `${scheduled}:${lock}:${this.notify}`;
    let sql = this.insertSql.get(variant);
    if (sql === undefined) {
      sql = postgresInsert(this.names, scheduled, lock, this.notify);
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
    await manager.query(sql, params);
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const variant = `${options.ordered}:${options.deadBlocksKey}`;
    let sql = this.claimSql.get(variant);
    if (sql === undefined) {
      sql = postgresClaim(this.names, options.ordered, options.deadBlocksKey);
      this.claimSql.set(variant, sql);
    }
    const token = randomUUID();
    const { records: rows } = await this.run<ClaimedRow>(sql, [
      options.owner,
      token,
      options.leaseMs,
      options.limit,
    ]);
    return { token, records: toClaimedRecords(rows) };
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
    if (groups.release) params.push(s.release);
    const { records: rows } = await this.run<{ changed: number }>(sql, params);
    return rows[0]?.changed ?? 0;
  }

  async releaseExpired(): Promise<number> {
    return (await this.run(postgresReleaseExpired(this.names), [])).affected ?? 0;
  }

  async purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number> {
    return (await this.run(postgresPurge(this.names), [status, olderThanMs, limit])).affected ?? 0;
  }

  async requeueDead(ids?: readonly string[]): Promise<number> {
    const withIds = ids !== undefined;
    if (withIds && ids.length === 0) return 0;
    return (
      (await this.run(postgresRequeueDead(this.names, withIds), withIds ? [ids] : [])).affected ?? 0
    );
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
      await client.query(`LISTEN ${this.names.quote(this.channel)}`);
    };
    const drop = (error?: unknown): void => {
      if (current === undefined) return;
      current.client.removeAllListeners('notification');
      current.client.removeAllListeners('error');
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
