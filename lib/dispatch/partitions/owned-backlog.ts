import type { ClaimedRecord, OwnedRead } from '../../store/ports/outbox-store.port';
import { laneOf } from '../../store/rows/redrive-lane';

/** A read of the table, opened before its statement was sent (see `OwnedBacklog.open`). */
export interface BacklogRead {
  readonly since: number;
}

/** A batch picked from the backlog: its records in id order and each one's partition. */
export interface PickedBatch {
  readonly records: readonly ClaimedRecord[];
  readonly partitionOf: ReadonlyMap<string, number>;
}

interface HeldRow {
  readonly record: ClaimedRecord;
  readonly partition: number;
  inFlight: boolean;
}

/** Whether message id `a` is after `b` (ids are decimal strings of any length). */
export function idAfter(a: string, b: string): boolean {
  return a.length !== b.length ? a.length > b.length : a > b;
}

const byId = (a: ClaimedRecord, b: ClaimedRecord): number =>
  idAfter(a.id, b.id) ? 1 : a.id === b.id ? 0 : -1;

/**
 * What an owner of delivery partitions holds in memory: the rows it has read and not yet
 * settled, queued or in flight, and per key the chain of them in id order. Per-key order is kept
 * here, not in the table: a row is taken into a key's chain only when everything before it that
 * still holds the key back is in the chain (the read's `previous` names the latest such row),
 * and only a key's first row, with the run queued behind it, goes out while nothing of the key
 * is in flight. So each row is read once, however long its key's backlog.
 *
 * A row that ends other than delivered (a retry, a release, a dead letter, a refused settle)
 * drops the rest of its key's chain: those rows are read again, behind it, once it is due.
 */
export class OwnedBacklog {
  private readonly rows = new Map<string, HeldRow>();
  private readonly chains = new Map<string, string[]>();
  private readonly inFlightPerPartition = new Map<number, number>();
  /** Bumped each time a batch ends. */
  private ends = 0;
  /** Rows that ended while a read that may predate it was open: whether each was delivered. */
  private readonly ended = new Map<string, { readonly at: number; readonly delivered: boolean }>();
  private readonly reads = new Set<BacklogRead>();
  /**
   * Keys a read found held back by a row this owner does not hold (backing off, waiting, dead
   * under `'block'`): sweeps skip them until `forgetHeld`, so that their backlog does not fill
   * every sweep.
   */
  private readonly heldKeys = new Set<string>();

  /** Rows read and not yet picked. */
  get queued(): number {
    let n = 0;
    for (const row of this.rows.values()) if (!row.inFlight) n++;
    return n;
  }

  /** Whether any message of `partition` is in flight. */
  busy(partition: number): boolean {
    return (this.inFlightPerPartition.get(partition) ?? 0) > 0;
  }

  /** The ids held in memory after `after`: a read after it skips them. */
  idsAfter(after: string): string[] {
    return [...this.rows.keys()].filter((id) => idAfter(id, after));
  }

  get held(): string[] {
    return [...this.heldKeys];
  }

  /** Held keys are looked at again (at each periodic sweep, when their rows may be due). */
  forgetHeld(): void {
    this.heldKeys.clear();
  }

  /** Call before sending a read's statement; `close` it once its rows are taken in. */
  open(): BacklogRead {
    const read = { since: this.ends };
    this.reads.add(read);
    return read;
  }

  close(read: BacklogRead): void {
    this.reads.delete(read);
    if (this.reads.size === 0) this.ended.clear();
  }

  /**
   * Takes in the rows of a read. Answers whether a row was left out for its key being held back
   * by a row not in memory (a sweep finds it once that row is due).
   */
  takeIn(read: BacklogRead, found: OwnedRead): boolean {
    const refused = new Set<string>();
    let heldBack = false;
    for (const record of found.records) {
      if (this.rows.has(record.id)) continue;
      const partition = found.partitions.get(record.id);
      if (partition === undefined) continue;
      // Chains go by lane: a re-drive copy's, not its key's (rows/redrive-lane.ts).
      const key = laneOf(record);
      if (key !== null) {
        if (refused.has(key)) continue;
        if (!this.follows(read, key, record.id, found.previous.get(record.id))) {
          refused.add(key);
          this.heldKeys.add(key);
          heldBack = true;
          continue;
        }
        const chain = this.chains.get(key);
        if (chain === undefined) this.chains.set(key, [record.id]);
        else chain.push(record.id);
      }
      this.rows.set(record.id, { record, partition, inFlight: false });
    }
    return heldBack;
  }

  /**
   * Picks up to `limit` rows that may go now, in id order: for each key with nothing in flight,
   * its queued run; rows of partitions no longer readable are dropped.
   */
  pick(limit: number, readable: ReadonlySet<number>): PickedBatch {
    const heads: ClaimedRecord[] = [];
    for (const [id, row] of this.rows) {
      if (row.inFlight) continue;
      if (!readable.has(row.partition)) {
        this.drop(id, row);
        continue;
      }
      const key = laneOf(row.record);
      if (key === null || this.chains.get(key)?.[0] === id) heads.push(row.record);
    }
    heads.sort(byId);
    const records: ClaimedRecord[] = [];
    const partitionOf = new Map<string, number>();
    for (const head of heads) {
      if (records.length >= limit) break;
      const lane = laneOf(head);
      const run = lane === null ? [head.id] : (this.chains.get(lane) ?? []);
      for (const id of run) {
        const row = this.rows.get(id);
        if (row === undefined || records.length >= limit) break;
        row.inFlight = true;
        records.push(row.record);
        partitionOf.set(id, row.partition);
        this.inFlightPerPartition.set(
          row.partition,
          (this.inFlightPerPartition.get(row.partition) ?? 0) + 1,
        );
      }
    }
    records.sort(byId);
    return { records, partitionOf };
  }

  /**
   * A batch ended: `delivered` names the rows settled as delivered. Every other row of it goes
   * back to the table with the rest of its key's chain.
   */
  end(records: readonly ClaimedRecord[], delivered: ReadonlySet<string>): void {
    this.ends++;
    for (const record of records) {
      const row = this.rows.get(record.id);
      if (row === undefined) continue;
      const ok = delivered.has(record.id);
      if (this.reads.size > 0) this.ended.set(record.id, { at: this.ends, delivered: ok });
      this.rows.delete(record.id);
      const left = (this.inFlightPerPartition.get(row.partition) ?? 1) - 1;
      if (left > 0) this.inFlightPerPartition.set(row.partition, left);
      else this.inFlightPerPartition.delete(row.partition);
      const key = laneOf(record);
      if (key === null) continue;
      const chain = (this.chains.get(key) ?? []).filter((id) => id !== record.id);
      if (!ok) {
        // Its later rows wait behind it in the table, not here.
        for (const id of chain) {
          const later = this.rows.get(id);
          if (later !== undefined && !later.inFlight) this.drop(id, later);
        }
      }
      const kept = chain.filter((id) => this.rows.has(id));
      if (kept.length > 0) this.chains.set(key, kept);
      else this.chains.delete(key);
    }
  }

  /**
   * Whether a row of `key` read by `read` may join the key's chain: everything before it that
   * holds the key back is in the chain (its `previous` is the chain's last row), or nothing is
   * and the chain is empty, or its `previous` was delivered since the read began.
   */
  private follows(read: BacklogRead, key: string, id: string, previous?: string): boolean {
    const chain = this.chains.get(key) ?? [];
    const tail = chain[chain.length - 1];
    if (tail !== undefined && !idAfter(id, tail)) return false;
    if (previous === undefined) return true;
    if (previous === tail) return true;
    const ended = this.ended.get(previous);
    return tail === undefined && ended !== undefined && ended.at > read.since && ended.delivered;
  }

  private drop(id: string, row: HeldRow): void {
    this.rows.delete(id);
    const key = laneOf(row.record);
    if (key === null) return;
    const chain = (this.chains.get(key) ?? []).filter((other) => other !== id);
    if (chain.length > 0) this.chains.set(key, chain);
    else this.chains.delete(key);
  }
}
