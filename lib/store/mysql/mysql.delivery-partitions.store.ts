import type {
  EndingMember,
  OutboxDeliveryPartitionsPort,
  OutboxPartitionOwner,
  OutboxQueuePolicy,
  OwnedRead,
  OwnedReadRange,
  OwnedSettle,
  PartitionBeat,
  PartitionFence,
  PartitionMember,
  Settlement,
  TakenPartition,
} from '../ports/outbox-store.port';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { partitionOwnerOf, type PartitionOwnerRow } from '../shared-sql/delivery-partitions';
import type { SqlResult, SqlRow } from '../ports/sql-port';
import { toClaimedRecords, type ClaimedRow } from '../rows/outbox-row.mapper';
import { failedAttempts, type FailedAttempt } from '../shared-sql/attempt-history';
import { leasesModeHolder } from '../shared-sql/leases-mode-lock';
import { withFreeOwnerLocks } from './mysql-owner-locks';
import {
  mysqlClaimedColumns,
  mysqlDeleteAttemptsOf,
  mysqlDeleteByIds,
  mysqlDeleteGuardOf,
} from './mysql.sql';
import {
  mysqlBeatTouch,
  mysqlBeatWorking,
  mysqlCutMember,
  mysqlEndingMembers,
  mysqlForgetMembers,
  mysqlGenerations,
  mysqlGoneCandidates,
  mysqlHoldOwned,
  mysqlLeave,
  mysqlLockFence,
  mysqlMembers,
  mysqlOwnedBy,
  mysqlOwnedDead,
  mysqlOwnedDelivered,
  mysqlOwnedRelease,
  mysqlOwnedRetry,
  mysqlOwnedRows,
  mysqlOwners,
  mysqlPreviousBlocking,
  mysqlPreviousParams,
  mysqlReadOwned,
  mysqlRelease,
  mysqlSlotHolders,
  mysqlTake,
  mysqlTakeCandidates,
} from './mysql.delivery-partitions-sql';

/** One statement on the connection of the transaction it runs in. */
export type MysqlQuery = <R = SqlRow>(
  sql: string,
  params: readonly unknown[],
) => Promise<SqlResult<R>>;

/** What the MySQL store hands its delivery partitions: its connection's ways, its helpers. */
export interface MysqlPartitionParts {
  readonly names: OutboxTableNames;
  readonly policy: OutboxQueuePolicy;
  /** Runs `work` in one of the store's dispatch transactions (its lock-wait bound). */
  transact<T>(work: (query: MysqlQuery) => Promise<T>): Promise<T>;
  /** One statement on its own. */
  readonly run: MysqlQuery;
  /** The keys' dispatch locks, as a park and the lease settle take them first. */
  lockForDispatch(query: MysqlQuery, keys: readonly string[]): Promise<void>;
  /** Every parked row of the keys nothing holds back any more, pending again; how many. */
  promoteAll(query: MysqlQuery, keys: readonly string[]): Promise<number>;
  /** The settle's failures in the attempt history (the store's, fenced by an owner's settle). */
  recordAttempts(query: MysqlQuery, failed: readonly FailedAttempt[], owner: string): Promise<void>;
  /** The table's `'leases'` mode slots (shared-sql/leases-mode-lock.ts). */
  leasesModeSlots(): Promise<readonly string[]>;
  /** Whether the attempt history takes 'fallback' rows (schema step 8). */
  readonly fallbackHistory: boolean;
  /** Whether the table is time-partitioned: a deleted row's id guard goes with it. */
  readonly partitioned: boolean;
  /** The store's promotion of orphaned waiting rows (OutboxUpkeepPort.promoteOrphans). */
  promoteOrphans(limit: number): Promise<number>;
}

type OwnedRow = ClaimedRow & { partition: number | string };

/**
 * Partitioned delivery on MySQL/MariaDB (OutboxDeliveryPartitionsPort): the statements of
 * mysql.delivery-partitions-sql.ts, each of PostgreSQL's one-statement steps a short transaction
 * of the store's. There is no `announce`: MySQL has no NOTIFY, so the others learn of a change
 * of the shares at their next beat.
 */
export class MysqlDeliveryPartitionsStore implements OutboxDeliveryPartitionsPort {
  private readonly names: OutboxTableNames;

  constructor(private readonly parts: MysqlPartitionParts) {
    this.names = parts.names;
  }

  promoteOrphans(limit: number): Promise<number> {
    return this.parts.promoteOrphans(limit);
  }

  async refreshStatistics(): Promise<void> {
    await this.parts.run(`ANALYZE TABLE ${this.names.table}`, []);
  }

  async beat(member: PartitionMember, stayWorking: boolean): Promise<PartitionBeat> {
    const slots = await this.parts.leasesModeSlots();
    const { id, label } = member;
    // Rows of processes gone for long are removed on their own, before the transaction: it
    // then locks this process's row alone, and a 'leases' dispatcher's locking read of the rows
    // (mysqlWorkingMembers) cannot deadlock with it.
    await this.parts.run(mysqlForgetMembers(this.names), [id]);
    return this.parts.transact(async (query) => {
      await query(mysqlBeatTouch(this.names), [id, label, member.validMs, member.lockKey ?? null]);
      await query(mysqlBeatWorking(this.names, slots.length), [stayWorking, ...slots, id]);
      const { rows: members } = await query<{
        instance: string;
        label: string;
        working: unknown;
        live: unknown;
      }>(mysqlMembers(this.names), []);
      const { rows: owned } = await query<{ p: number | string; generation: string }>(
        mysqlOwnedBy(this.names),
        [id],
      );
      const others = members.filter((m) => m.instance !== id && Number(m.live) === 1);
      return {
        working: Number(members.find((m) => m.instance === id)?.working) === 1,
        live: others
          .filter((m) => Number(m.working) === 1)
          .map((m) => m.instance)
          .sort(),
        labelShared: others.some((m) => m.label === label),
        owned: new Map(owned.map((r) => [Number(r.p), String(r.generation)])),
      };
    });
  }

  async take(
    id: string,
    partitions: readonly number[],
  ): Promise<ReadonlyMap<number, TakenPartition>> {
    if (partitions.length === 0) return new Map();
    return this.parts.transact(async (query) => {
      const { rows: free } = await query<{ p: number | string; previous: string | null }>(
        mysqlTakeCandidates(this.names, partitions.length),
        [...partitions, id],
      );
      if (free.length === 0) return new Map();
      const taken = free.map((r) => Number(r.p));
      await query(mysqlTake(this.names, taken.length), [id, id, ...taken]);
      const { rows } = await query<{ p: number | string; generation: string }>(
        mysqlGenerations(this.names, taken.length),
        taken,
      );
      const previous = new Map(free.map((r) => [Number(r.p), r.previous]));
      return new Map(
        rows.map((r) => [
          Number(r.p),
          { generation: String(r.generation), previous: previous.get(Number(r.p)) ?? null },
        ]),
      );
    });
  }

  async release(id: string, partitions: readonly number[]): Promise<void> {
    if (partitions.length === 0) return;
    await this.parts.run(mysqlRelease(this.names, partitions.length), [id, ...partitions]);
  }

  async owners(): Promise<readonly OutboxPartitionOwner[]> {
    const { rows } = await this.parts.run<PartitionOwnerRow>(mysqlOwners(this.names), []);
    return rows.map(partitionOwnerOf);
  }

  async leasesModeHolders(): Promise<readonly string[]> {
    const slots = await this.parts.leasesModeSlots();
    const { rows } = await this.parts.run<{
      holder: number | string;
      user: string | null;
      host: string | null;
    }>(mysqlSlotHolders(slots.length), slots);
    return rows.map((r) => leasesModeHolder(r.holder, [r.user, r.host]));
  }

  async holdOwned(
    id: string,
    fence: PartitionFence,
    ids: readonly string[],
    leaseMs: number,
    token: string,
  ): Promise<number> {
    if (ids.length === 0) return 0;
    return this.parts.transact(async (query) => {
      const held = await this.lockFence(query, id, fence);
      if (held.length === 0) return 0;
      const sql = mysqlHoldOwned(this.names, ids.length, held.length);
      return (await query(sql, [id, token, leaseMs, leaseMs, ...ids, ...held])).affected;
    });
  }

  async endGoneMembers(id: string, graceMs: number): Promise<readonly EndingMember[]> {
    return this.parts.transact(async (query) => {
      const { rows: found } = await query<{ instance: string; label: string; lock_key: unknown }>(
        mysqlGoneCandidates(this.names),
        [id, graceMs],
      );
      // A key the library never writes is left to the heartbeat's own end.
      const gone = found.flatMap((r) => {
        const key = Number(r.lock_key);
        return isOwnerKey(key) ? [{ instance: r.instance, label: r.label, key }] : [];
      });
      const cut: { instance: string; label: string }[] = [];
      if (gone.length > 0) {
        // Each key held while its process's heartbeat is cut: no one can take it meanwhile, and
        // the cut itself finds the row with that key only (a beat under a new key is left).
        await withFreeOwnerLocks(
          { query },
          gone.map((g) => g.key),
          async (held) => {
            for (const g of gone.filter((x) => held.includes(x.key))) {
              const { affected } = await query(mysqlCutMember(this.names), [
                graceMs,
                g.instance,
                g.key,
                graceMs,
              ]);
              if (affected === 1) cut.push(g);
            }
          },
        );
      }
      const { rows: ending } = await query<{
        instance: string;
        label: string;
        ends_in_ms: number | string;
      }>(mysqlEndingMembers(this.names), [id, graceMs]);
      const wasCut = new Set(cut.map((c) => c.instance));
      return [
        ...cut.map((c) => ({ label: c.label, cut: true, endsInMs: graceMs })),
        ...ending
          .filter((e) => !wasCut.has(e.instance))
          .map((e) => ({ label: e.label, cut: false, endsInMs: Number(e.ends_in_ms) })),
      ];
    });
  }

  async leave(id: string): Promise<void> {
    for (const statement of mysqlLeave(this.names)) await this.parts.run(statement, [id]);
  }

  /**
   * MySQL has no snapshot horizon to answer: every read counts as ended at once (`xmin` and
   * `xid` 0), so the owner's floor moves past what it read without waiting. On MySQL the owned
   * reads are to be driven by the binlog, which names every committed id (`OwnedReader.named`):
   * a row committed late below the floor is read when the log names it, not left to a sweep.
   */
  async readOwned(
    partitions: readonly number[],
    limit: number,
    range: OwnedReadRange,
  ): Promise<OwnedRead> {
    const snapshot = { xmin: 0n, xid: 0n };
    if (partitions.length === 0 || limit <= 0) {
      return { records: [], partitions: new Map(), previous: new Map(), snapshot };
    }
    const shape = {
      partitions: partitions.length,
      ids: range.ids.length,
      keys: range.keys.length,
    };
    const { rows } = await this.parts.run<OwnedRow>(
      mysqlReadOwned(this.names, mysqlClaimedColumns('o'), shape),
      [range.after, ...partitions, ...range.ids, ...range.keys, limit],
    );
    const partitionOf = new Map<string, number>();
    for (const row of rows) partitionOf.set(String(row.id), Number(row.partition));
    const previous = this.parts.policy.ordered ? await this.previousOf(rows) : new Map();
    return { records: toClaimedRecords(rows), partitions: partitionOf, previous, snapshot };
  }

  /**
   * Each keyed row's latest earlier row of its key that still holds it back, by id
   * (mysqlPreviousBlocking): read after the rows, in a statement of its own. What it may see
   * that the read did not changes nothing: a blocking row leaves that state only by moving its
   * key on, and none appears below a row already read (a key's ids follow its commits, and a
   * dead message requeued behind later ones takes a new id).
   */
  private async previousOf(rows: readonly OwnedRow[]): Promise<Map<string, string>> {
    const previous = new Map<string, string>();
    const keyed = rows.filter((r) => r.message_key !== null);
    const first = keyed[0];
    const last = keyed[keyed.length - 1];
    if (first === undefined || last === undefined) return previous;
    const keys = [...new Set(keyed.map((r) => r.message_key as string))];
    const { policy } = this.parts;
    const { rows: blocking } = await this.parts.run<{ k: string; id: string | number }>(
      mysqlPreviousBlocking(this.names, policy, keys.length),
      mysqlPreviousParams(policy, keys, first.id, last.id),
    );
    const byKey = new Map<string, bigint[]>();
    for (const b of blocking) {
      const ids = byKey.get(b.k);
      if (ids === undefined) byKey.set(b.k, [BigInt(b.id)]);
      else ids.push(BigInt(b.id));
    }
    for (const ids of byKey.values()) ids.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    // The rows come in id order: one pass over each key's ids.
    const passed = new Map<string, number>();
    for (const row of keyed) {
      const key = row.message_key as string;
      const ids = byKey.get(key) ?? [];
      const id = BigInt(row.id);
      let i = passed.get(key) ?? 0;
      while (i < ids.length && (ids[i] as bigint) < id) i++;
      passed.set(key, i);
      const latest = ids[i - 1];
      if (latest !== undefined) previous.set(String(row.id), latest.toString());
    }
    return previous;
  }

  async settleOwned(
    id: string,
    fence: PartitionFence,
    s: Settlement,
    deleteDelivered: boolean,
    token: string,
  ): Promise<OwnedSettle> {
    if (s.delivered.length + s.retry.length + s.dead.length + s.release.length === 0) {
      return { changed: 0, promoted: 0 };
    }
    const keys = this.parts.policy.ordered ? s.advancedKeys : [];
    return this.parts.transact(async (query) => {
      // The dispatch locks first, as a park takes them: the promotion sees every park committed
      // before it, and a park after it sees this settle.
      await this.parts.lockForDispatch(query, keys);
      const held = await this.lockFence(query, id, fence);
      // A former owner's settle (another took a partition since) changes nothing at all.
      if (held.length === 0) return { changed: 0, promoted: 0 };
      const asked = [
        ...new Set([...s.delivered, ...[...s.retry, ...s.dead, ...s.release].map((r) => r.id)]),
      ];
      const { rows } = await query<{ id: string | number; lock_token: string | null }>(
        mysqlOwnedRows(this.names, asked.length, held.length),
        [...asked, ...held],
      );
      const open = new Set(rows.map((r) => String(r.id)));
      // Rows that stay pending carry the settle's token once settled: the same settle sent
      // again after its answer was lost finds them holding it and leaves them.
      const unsettled = new Set(
        rows.filter((r) => r.lock_token !== token).map((r) => String(r.id)),
      );
      const kept: Settlement = {
        delivered: s.delivered.filter((i) => open.has(i)),
        retry: s.retry.filter((r) => unsettled.has(r.id)),
        dead: s.dead.filter((r) => open.has(r.id)),
        release: s.release.filter((r) => unsettled.has(r.id)),
        advancedKeys: keys,
      };
      const fallback =
        this.parts.fallbackHistory && !deleteDelivered
          ? (s.fallback ?? []).filter((f) => open.has(f.id))
          : [];
      await this.parts.recordAttempts(query, failedAttempts(kept, fallback), id);
      const changed = await this.write(query, kept, deleteDelivered, token);
      const promoted = keys.length > 0 ? await this.parts.promoteAll(query, keys) : 0;
      return { changed, promoted };
    });
  }

  /** The settle's groups, on rows locked and fenced already; how many rows it changed. */
  private async write(
    query: MysqlQuery,
    s: Settlement,
    deleteDelivered: boolean,
    token: string,
  ): Promise<number> {
    const n = this.names;
    let changed = 0;
    const { delivered, retry, dead, release } = s;
    if (delivered.length > 0) {
      if (deleteDelivered) {
        // Deleted rows take their history, and on a partitioned table their id guard, along.
        const pending = ['pending', ...delivered];
        await query(mysqlDeleteAttemptsOf(n, delivered.length), pending);
        if (this.parts.partitioned) {
          await query(mysqlDeleteGuardOf(n, delivered.length, false), pending);
        }
        changed += (await query(mysqlDeleteByIds(n, delivered.length), pending)).affected;
      } else {
        changed += (await query(mysqlOwnedDelivered(n, delivered.length), delivered)).affected;
      }
    }
    if (retry.length > 0) {
      const values = retry.flatMap((r) => [r.id, r.delayMs, r.error]);
      changed += (await query(mysqlOwnedRetry(n, retry.length), [...values, token])).affected;
    }
    if (dead.length > 0) {
      const values = dead.flatMap((r) => [r.id, r.error, r.unpublished === true ? 1 : 0]);
      changed += (await query(mysqlOwnedDead(n, dead.length), values)).affected;
    }
    if (release.length > 0) {
      const values = release.flatMap((r) => [r.id, r.delayMs, r.error]);
      changed += (await query(mysqlOwnedRelease(n, release.length), [...values, token])).affected;
    }
    return changed;
  }

  /**
   * The partitions of `fence` whose owner rows still name `id` at the fence's generations,
   * locked shared until the transaction ends (mysqlLockFence).
   */
  private async lockFence(query: MysqlQuery, id: string, fence: PartitionFence): Promise<number[]> {
    const partitions = [...fence.keys()];
    if (partitions.length === 0) return [];
    const { rows } = await query<{ p: number | string; generation: string }>(
      mysqlLockFence(this.names, partitions.length),
      [id, ...partitions],
    );
    return rows
      .filter((r) => fence.get(Number(r.p)) === String(r.generation))
      .map((r) => Number(r.p));
  }
}

/** Whether a stored lock key is one an owner lock can have (`newOwnerKey`'s range). */
function isOwnerKey(key: number): boolean {
  return Number.isInteger(key) && key >= 1 && key <= 0x7fff_ffff;
}
