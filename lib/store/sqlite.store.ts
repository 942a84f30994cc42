import { randomUUID } from 'node:crypto';
import { DataSource, type EntityManager } from 'typeorm';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type {
  ClaimOptions,
  ClaimedBatch,
  NewOutboxRow,
  OutboxStats,
  OutboxStore,
  Settlement,
} from '../interfaces/outbox-store.interface';
import { OutboxMessages } from '../outbox.messages';
import {
  sqliteClaim,
  sqliteInsert,
  sqlitePurge,
  sqliteRelease,
  sqliteReleaseExpired,
  sqliteRequeueDead,
  sqliteSettleDead,
  sqliteSettleDelivered,
  sqliteSettleRetry,
  sqliteStats,
} from './dialects/sqlite.sql';
import { toClaimedRecords, type ClaimedRow } from './outbox-row.mapper';
import type { OutboxTableNames } from './sql-identifier';

const MAX_ROWS_PER_INSERT = 4_000;
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

function utc(date: Date): string {
  return date.toISOString().replace('T', ' ').replace('Z', '');
}

/**
 * SQLite (better-sqlite3), the embedded default. TypeORM shares one connection for every
 * transaction on SQLite, so the dispatcher works on a connection of its own to the same file:
 * otherwise its settles could land inside, and roll back with, an application transaction.
 */
export class SqliteOutboxStore implements OutboxStore {
  private dispatch: DataSource | undefined;

  constructor(
    private readonly dataSource: DataSource,
    private readonly names: OutboxTableNames,
  ) {}

  /** Opens the dispatcher's own connection; only apps that run workers need it. */
  async open(): Promise<void> {
    if (this.dispatch !== undefined) return;
    const database = (this.dataSource.options as { database?: unknown }).database;
    if (typeof database !== 'string' || database === '' || database === ':memory:') {
      throw new OutboxOptionsError(OutboxMessages.sqliteNeedsFile(), 'dataSource');
    }
    // better-sqlite3 waits for a lock synchronously, freezing the event loop, and with it the
    // application transaction in this process that holds the lock, for the whole timeout. So the
    // dispatcher's connection never waits inside SQLite (timeout 0): busy statements are retried
    // with asynchronous pauses instead (see retryBusy).
    const dispatch =
      this.dataSource.options.type === 'sqlite'
        ? new DataSource({
            type: 'sqlite',
            database,
            enableWAL: true,
            busyTimeout: BUSY_TIMEOUT_MS,
          })
        : new DataSource({ type: 'better-sqlite3', database, enableWAL: true, timeout: 0 });
    await dispatch.initialize();
    this.dispatch = dispatch;
  }

  async insert(manager: EntityManager, rows: readonly NewOutboxRow[]): Promise<void> {
    // SQLite lets one writer in at a time, so a key's id order is its commit order without locks.
    for (let start = 0; start < rows.length; start += MAX_ROWS_PER_INSERT) {
      const chunk = rows.slice(start, start + MAX_ROWS_PER_INSERT);
      const scheduled = chunk.some((r) => r.availableAt !== null || r.delayMs !== null);
      const params: unknown[] = [];
      for (const r of chunk) {
        params.push(r.messageId, r.topic, r.key, r.type, r.payload, r.headers);
        if (scheduled)
          params.push(r.availableAt === null ? null : utc(r.availableAt), r.delayMs ?? 0);
      }
      await manager.query(sqliteInsert(this.names, chunk.length, scheduled), params);
    }
  }

  async claim(options: ClaimOptions): Promise<ClaimedBatch> {
    const token = randomUUID();
    const rows = (await this.query(
      sqliteClaim(this.names, options.ordered, options.deadBlocksKey),
      [options.owner, token, options.leaseMs, options.limit],
    )) as ClaimedRow[];
    return { token, records: toClaimedRecords(rows) };
  }

  async settle(token: string, s: Settlement, deleteDelivered: boolean): Promise<number> {
    let changed = 0;
    if (s.delivered.length > 0) {
      changed += await this.run(sqliteSettleDelivered(this.names, deleteDelivered), [
        token,
        JSON.stringify(s.delivered.map(Number)),
      ]);
    }
    if (s.retry.length > 0) {
      changed += await this.run(sqliteSettleRetry(this.names), [
        JSON.stringify(s.retry.map((r) => [Number(r.id), r.delayMs, r.error])),
        token,
      ]);
    }
    if (s.dead.length > 0) {
      changed += await this.run(sqliteSettleDead(this.names), [
        JSON.stringify(s.dead.map((r) => [Number(r.id), r.error])),
        token,
      ]);
    }
    if (s.release.length > 0) {
      changed += await this.run(sqliteRelease(this.names), [
        token,
        JSON.stringify(s.release.map(Number)),
      ]);
    }
    return changed;
  }

  releaseExpired(): Promise<number> {
    return this.run(sqliteReleaseExpired(this.names), []);
  }

  purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number> {
    return this.run(sqlitePurge(this.names, status), [status, olderThanMs, limit]);
  }

  requeueDead(ids?: readonly string[]): Promise<number> {
    return this.run(
      sqliteRequeueDead(this.names, ids !== undefined),
      ids === undefined ? [] : [JSON.stringify(ids)],
    );
  }

  async stats(): Promise<OutboxStats> {
    const [row] = (await this.query(sqliteStats(this.names), [])) as {
      pending: number;
      leased: number;
      delivered: number;
      dead: number;
      oldest_ms: number | null;
    }[];
    return {
      pending: Number(row?.pending ?? 0),
      leased: Number(row?.leased ?? 0),
      delivered: Number(row?.delivered ?? 0),
      dead: Number(row?.dead ?? 0),
      oldestPendingAgeMs:
        row?.oldest_ms === null || row?.oldest_ms === undefined ? null : Math.round(row.oldest_ms),
    };
  }

  async close(): Promise<void> {
    const dispatch = this.dispatch;
    this.dispatch = undefined;
    if (dispatch?.isInitialized) await dispatch.destroy();
  }

  private async connection(): Promise<DataSource> {
    await this.open();
    return this.dispatch as DataSource;
  }

  private async query(sql: string, params: unknown[]): Promise<unknown> {
    const connection = await this.connection();
    return this.retryBusy(() => connection.query(sql, params));
  }

  private async run(sql: string, params: unknown[]): Promise<number> {
    const runner = (await this.connection()).createQueryRunner();
    const result = await this.retryBusy(() => runner.query(sql, params, true));
    return result.affected ?? 0;
  }

  /** Every statement here is a single autocommit statement: a busy one did nothing and can rerun. */
  private async retryBusy<T>(statement: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + BUSY_TIMEOUT_MS;
    for (let delay = 2; ; delay = Math.min(delay * 2, MAX_BUSY_RETRY_DELAY_MS)) {
      try {
        return await statement();
      } catch (error) {
        if (!isBusy(error) || Date.now() >= deadline) throw error;
        await sleep(delay);
      }
    }
  }
}
