import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type {
  ClaimOptions,
  ClaimedBatch,
  NewOutboxRow,
  OutboxStats,
  OutboxStore,
  Settlement,
} from '../interfaces/outbox-store.interface';
import {
  MYSQL_KEY_LOCK_BUCKETS,
  mysqlClaimCandidates,
  mysqlClaimLease,
  mysqlClaimLock,
  mysqlInsert,
  mysqlLockKeys,
  mysqlPurge,
  mysqlRelease,
  mysqlReleaseExpired,
  mysqlRequeueDead,
  mysqlSettleDead,
  mysqlSettleDelivered,
  mysqlSettleRetry,
  mysqlStats,
} from './dialects/mysql.sql';
import { hashKey, toClaimedRecords, type ClaimedRow } from './outbox-row.mapper';
import type { OutboxTableNames } from './sql-identifier';

// mysql2 allows 65 535 placeholders per statement; stay well below with the widest row (8).
const MAX_ROWS_PER_INSERT = 4_000;

type StatsRow = Record<'pending' | 'leased' | 'delivered' | 'dead', string | number> & {
  oldest_ms: string | number | null;
};

function utc(date: Date): string {
  return date.toISOString().replace('T', ' ').replace('Z', '');
}

/** MySQL 8 / MariaDB 10.6+: a short READ COMMITTED claim transaction with SKIP LOCKED. */
export class MysqlOutboxStore implements OutboxStore {
  constructor(
    private readonly dataSource: DataSource,
    private readonly names: OutboxTableNames,
  ) {}

  async insert(
    manager: EntityManager,
    rows: readonly NewOutboxRow[],
    lockKeys: boolean,
  ): Promise<void> {
    if (lockKeys) {
      const buckets = [
        ...new Set(
          rows.flatMap((r) => (r.key === null ? [] : [hashKey(r.key) % MYSQL_KEY_LOCK_BUCKETS])),
        ),
      ].sort((a, b) => a - b);
      if (buckets.length > 0)
        await manager.query(mysqlLockKeys(this.names, buckets.length), buckets);
    }
    for (let start = 0; start < rows.length; start += MAX_ROWS_PER_INSERT) {
      const chunk = rows.slice(start, start + MAX_ROWS_PER_INSERT);
      const scheduled = chunk.some((r) => r.availableAt !== null || r.delayMs !== null);
      const params: unknown[] = [];
      for (const r of chunk) {
        params.push(r.messageId, r.topic, r.key, r.type, r.payload, r.headers);
        if (scheduled)
          params.push(r.availableAt === null ? null : utc(r.availableAt), r.delayMs ?? 0);
      }
      await manager.query(mysqlInsert(this.names, chunk.length, scheduled), params);
    }
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = randomUUID();
    const runner = this.dataSource.createQueryRunner('master');
    try {
      await runner.connect();
      await runner.startTransaction('READ COMMITTED');
      const rows = await this.claimIn(runner, options, token);
      await runner.commitTransaction();
      return { token, records: toClaimedRecords(rows) };
    } catch (error) {
      if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
      throw error;
    } finally {
      await runner.release();
    }
  }

  private async claimIn(
    runner: QueryRunner,
    options: ClaimOptions,
    token: string,
  ): Promise<ClaimedRow[]> {
    const candidates = (await runner.query(
      mysqlClaimCandidates(this.names, options.ordered, options.deadBlocksKey),
      [options.limit],
    )) as { id: string | number }[];
    if (candidates.length === 0) return [];
    const ids = candidates.map((c) => c.id);
    const locked = (await runner.query(
      mysqlClaimLock(this.names, ids.length),
      ids,
    )) as ClaimedRow[];
    if (locked.length === 0) return [];
    await runner.query(mysqlClaimLease(this.names, locked.length), [
      options.owner,
      token,
      options.leaseMs,
      ...locked.map((r) => r.id),
    ]);
    return locked;
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    let changed = 0;
    if (s.delivered.length > 0) {
      changed += this.affected(
        await this.dataSource.query(
          mysqlSettleDelivered(this.names, s.delivered.length, deleteDelivered),
          [token, ...s.delivered],
        ),
      );
    }
    if (s.retry.length > 0) {
      const params = s.retry.flatMap((r) => [r.id, r.delayMs, r.error]);
      changed += this.affected(
        await this.dataSource.query(mysqlSettleRetry(this.names, s.retry.length), [
          ...params,
          token,
        ]),
      );
    }
    if (s.dead.length > 0) {
      const params = s.dead.flatMap((r) => [r.id, r.error]);
      changed += this.affected(
        await this.dataSource.query(mysqlSettleDead(this.names, s.dead.length), [...params, token]),
      );
    }
    if (s.release.length > 0) {
      changed += this.affected(
        await this.dataSource.query(mysqlRelease(this.names, s.release.length), [
          token,
          ...s.release,
        ]),
      );
    }
    return changed;
  }

  async releaseExpired(): Promise<number> {
    return this.affected(await this.dataSource.query(mysqlReleaseExpired(this.names)));
  }

  async purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number> {
    return this.affected(
      await this.dataSource.query(mysqlPurge(this.names, status), [status, olderThanMs, limit]),
    );
  }

  async requeueDead(ids?: readonly string[]): Promise<number> {
    if (ids !== undefined && ids.length === 0) return 0;
    return this.affected(
      await this.dataSource.query(mysqlRequeueDead(this.names, ids?.length ?? null), [
        ...(ids ?? []),
      ]),
    );
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

  private affected(result: unknown): number {
    // mysql2 answers an OkPacket / ResultSetHeader for UPDATE and DELETE.
    if (result !== null && typeof result === 'object' && 'affectedRows' in result) {
      return Number(result.affectedRows);
    }
    return 0;
  }
}
