import type { ClaimedRecord, OwnedRead } from '../../store/ports/outbox-store.port';
import { laneOf } from '../../store/rows/redrive-lane';
import { idAfter } from '../../store/rows/outbox-row.mapper';

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
  /** The chain it is in: its lane, or none when order is not kept. */
  readonly lane: string | null;
  inFlight: boolean;
}

const byId = (a: ClaimedRecord, b: ClaimedRecord): number =>
  idAfter(a.id, b.id) ? 1 : a.id === b.id ? 0 : -1;

/**
 * Ids in id order. Reads bring ids mostly above every id held, so an insert is mostly an append;
 * a pick takes from the front.
 */
class SortedIds {
  private ids: string[] = [];

  get size(): number {
    return this.ids.length;
  }

  add(id: string): void {
    const last = this.ids[this.ids.length - 1];
    if (last === undefined || idAfter(id, last)) {
      this.ids.push(id);
      return;
    }
    const at = this.indexOf(id);
    if (this.ids[at] !== id) this.ids.splice(at, 0, id);
  }

  at(index: number): string | undefined {
    return this.ids[index];
  }

  /** Removes the first `count` ids. */
  shift(count: number): void {
    if (count > 0) this.ids.splice(0, count);
  }

  /** The position of `id`, or where it would go. */
  private indexOf(id: string): number {
    let lo = 0;
    let hi = this.ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (idAfter(id, this.ids[mid] as string)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

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
  /**
   * `ordered` false (`ordering.enabled: false`): every row goes on its own, keyed or not.
   * `maxRun`: the most rows of one key a batch carries.
   */
  constructor(private readonly ordering: { readonly ordered: boolean; readonly maxRun: number }) {}

  private readonly rows = new Map<string, HeldRow>();
  private readonly chains = new Map<string, string[]>();
  /**
   * The rows that may go now, in id order: each key's first row while nothing of the key is in
   * flight (a key's rows in flight are always the first of its chain), and every row without a
   * key. A pick walks these, not every row held behind them.
   */
  private readonly ready = new SortedIds();
  private readonly inFlightPerPartition = new Map<number, number>();
  /** Rows in flight (picked, their batch not ended): `queued` without a walk of every row. */
  private inFlight = 0;
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
    return this.rows.size - this.inFlight;
  }

  /** Whether a pick may find a row that can go now. */
  get pickable(): boolean {
    return this.ready.size > 0;
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
   * Takes in the rows of a read. Answers the keys (lanes) of rows left out for being held back by
   * a row not in memory, where nothing of the key is in memory: the owner parks their rows, which
   * come back when that row moves on. A key with rows in memory is held here but not parked: the
   * park takes every row after the key's head in the table, and those rows (queued, or in flight)
   * would be parked under the batch that publishes them, whose settle then changes nothing (it
   * settles pending rows only), and they would be promoted and published again. Its refused rows
   * stay pending and are read again once the key's chain has gone.
   */
  takeIn(read: BacklogRead, found: OwnedRead): string[] {
    const refused = new Set<string>();
    const toPark: string[] = [];
    for (const record of found.records) {
      if (this.rows.has(record.id)) continue;
      const partition = found.partitions.get(record.id);
      if (partition === undefined) continue;
      // Chains go by lane: a re-drive copy's, not its key's (rows/redrive-lane.ts).
      const key = this.laneOf(record);
      if (key !== null) {
        if (refused.has(key)) continue;
        if (!this.follows(read, key, record.id, found.previous.get(record.id))) {
          refused.add(key);
          this.heldKeys.add(key);
          if (!this.chains.has(key)) toPark.push(key);
          continue;
        }
        const chain = this.chains.get(key);
        if (chain === undefined) {
          this.chains.set(key, [record.id]);
          this.ready.add(record.id);
        } else chain.push(record.id);
      } else this.ready.add(record.id);
      this.rows.set(record.id, { record, partition, lane: key, inFlight: false });
    }
    return toPark;
  }

  /**
   * Picks up to `limit` rows that may go now, in id order: for each key with nothing in flight,
   * its queued run; rows of partitions no longer readable are dropped.
   */
  pick(limit: number, readable: (partition: number) => boolean): PickedBatch {
    const records: ClaimedRecord[] = [];
    const partitionOf = new Map<string, number>();
    // Every head visited is taken or dropped: the walk removes a prefix of `ready`.
    let visited = 0;
    for (let head = this.ready.at(0); head !== undefined; head = this.ready.at(visited)) {
      if (records.length >= limit) break;
      visited++;
      const row = this.rows.get(head);
      if (row === undefined) continue;
      if (!readable(row.partition)) {
        this.dropQueued(head, row);
        continue;
      }
      const run =
        row.lane === null
          ? [head]
          : (this.chains.get(row.lane) ?? [head]).slice(0, this.ordering.maxRun);
      for (const id of run) {
        const next = this.rows.get(id);
        if (next === undefined || records.length >= limit) break;
        next.inFlight = true;
        this.inFlight++;
        records.push(next.record);
        partitionOf.set(id, next.partition);
        this.inFlightPerPartition.set(
          next.partition,
          (this.inFlightPerPartition.get(next.partition) ?? 0) + 1,
        );
      }
    }
    this.ready.shift(visited);
    records.sort(byId);
    return { records, partitionOf };
  }

  /**
   * A batch ended: `delivered` names the rows settled as delivered. Every other row of it goes
   * back to the table with the rest of its key's chain.
   */
  end(records: readonly ClaimedRecord[], delivered: ReadonlySet<string>): void {
    this.ends++;
    // Per key of the batch, whether a row of it ended other than delivered.
    const lanes = new Map<string, boolean>();
    for (const record of records) {
      const row = this.rows.get(record.id);
      if (row === undefined) continue;
      const ok = delivered.has(record.id);
      if (this.reads.size > 0) this.ended.set(record.id, { at: this.ends, delivered: ok });
      this.rows.delete(record.id);
      if (row.inFlight) this.inFlight--;
      const left = (this.inFlightPerPartition.get(row.partition) ?? 1) - 1;
      if (left > 0) this.inFlightPerPartition.set(row.partition, left);
      else this.inFlightPerPartition.delete(row.partition);
      if (row.lane !== null) lanes.set(row.lane, lanes.get(row.lane) === true || !ok);
    }
    for (const [key, failed] of lanes) {
      const chain = this.chains.get(key) ?? [];
      // Its later rows wait behind it in the table, not here.
      if (failed)
        for (const id of chain) if (this.rows.get(id)?.inFlight === false) this.rows.delete(id);
      const kept = chain.filter((id) => this.rows.has(id));
      if (kept.length === 0) {
        this.chains.delete(key);
        continue;
      }
      this.chains.set(key, kept);
      // Nothing of the key is in flight any more (a key's run goes in one batch): its next row
      // may go.
      if (this.rows.get(kept[0] as string)?.inFlight === false) this.ready.add(kept[0] as string);
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

  /** The chain a record joins: its lane, or none when order is not kept. */
  private laneOf(record: ClaimedRecord): string | null {
    return this.ordering.ordered ? laneOf(record) : null;
  }

  /**
   * Drops a queued head of a partition no longer readable, with its key's chain (all queued: a
   * head is queued only while nothing of its key is in flight).
   */
  private dropQueued(head: string, row: HeldRow): void {
    this.rows.delete(head);
    if (row.lane === null) return;
    for (const id of this.chains.get(row.lane) ?? []) this.rows.delete(id);
    this.chains.delete(row.lane);
  }
}
