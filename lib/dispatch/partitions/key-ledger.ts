import type { ClaimedRecord } from '../../store/ports/outbox-store.port';

/** A read of the table, opened before its statement was sent (see `KeyLedger.open`). */
export interface LedgerRead {
  readonly since: number;
}

/**
 * Per-key order in memory, for an owner that reads its partitions without locking rows: which
 * messages and keys are in flight, and which partitions have any. A key has at most one batch
 * in flight; a read skips the ids in flight; and a read that began before a key's batch settled
 * may show that key's next message as free when its predecessor has just been set to back off
 * (its snapshot is older than the settle), so such a read's rows of that key are passed over
 * (`stale`) and found again by the next read.
 */
export class KeyLedger {
  private readonly ids = new Set<string>();
  private readonly keys = new Map<string, number>();
  private readonly perPartition = new Map<number, number>();
  /** Bumped each time a batch ends: the settles a read may not have seen. */
  private settles = 0;
  /** When each key's last batch ended (a value of `settles`), while a read may predate it. */
  private readonly freedAt = new Map<string, number>();
  private readonly reads = new Set<LedgerRead>();

  /**
   * Keys found held back (an earlier message backing off, waiting or dead under `'block'`):
   * reads skip them until `forgetHeld`, so that their backlog does not fill every read.
   */
  private readonly heldKeys = new Set<string>();

  /** What a read skips: the ids in flight, and the keys in flight or found held back. */
  skip(): { ids: string[]; keys: string[] } {
    return { ids: [...this.ids], keys: [...this.keys.keys(), ...this.heldKeys] };
  }

  /** Held keys are looked at again (each drain, when their earlier message may be due). */
  forgetHeld(): void {
    this.heldKeys.clear();
  }

  /** Whether any message of `partition` is in flight. */
  busy(partition: number): boolean {
    return (this.perPartition.get(partition) ?? 0) > 0;
  }

  /** Call before sending a read's statement; `close` it once its rows are handled. */
  open(): LedgerRead {
    const read = { since: this.settles };
    this.reads.add(read);
    return read;
  }

  close(read: LedgerRead): void {
    this.reads.delete(read);
    if (this.reads.size === 0) this.freedAt.clear();
  }

  /**
   * The rows of a read that may be published now, in id order: not held, not of a key in
   * flight or freed since the read began, and no row of a key after one that was passed over.
   */
  select(
    read: LedgerRead,
    records: readonly ClaimedRecord[],
    held: ReadonlySet<string>,
    limit: number,
  ): { chosen: ClaimedRecord[]; passedOver: boolean } {
    const blocked = new Set<string>();
    const chosen: ClaimedRecord[] = [];
    // A row passed over for its key's batch ending after the read began, or for being held:
    // reading again may find it free (or skip its key), so the loop must look again.
    let passedOver = false;
    for (const record of records) {
      if (chosen.length >= limit) break;
      if (this.ids.has(record.id)) continue;
      const key = record.key;
      if (key !== null) {
        if (blocked.has(key)) continue;
        const stale = (this.freedAt.get(key) ?? -1) > read.since;
        if (held.has(record.id)) this.heldKeys.add(key);
        if (held.has(record.id) || stale) passedOver = true;
        if (held.has(record.id) || this.keys.has(key) || stale) {
          blocked.add(key);
          continue;
        }
      }
      chosen.push(record);
    }
    return { chosen, passedOver };
  }

  /** Marks a batch in flight. */
  take(records: readonly ClaimedRecord[], partitionOf: ReadonlyMap<string, number>): void {
    for (const record of records) {
      this.ids.add(record.id);
      if (record.key !== null) this.keys.set(record.key, (this.keys.get(record.key) ?? 0) + 1);
      const partition = partitionOf.get(record.id);
      if (partition !== undefined) {
        this.perPartition.set(partition, (this.perPartition.get(partition) ?? 0) + 1);
      }
    }
  }

  /** A batch ended (settled or given up): its messages and keys are free again. */
  release(records: readonly ClaimedRecord[], partitionOf: ReadonlyMap<string, number>): void {
    this.settles++;
    for (const record of records) {
      this.ids.delete(record.id);
      const key = record.key;
      if (key !== null) {
        const left = (this.keys.get(key) ?? 1) - 1;
        if (left > 0) this.keys.set(key, left);
        else this.keys.delete(key);
        if (this.reads.size > 0) this.freedAt.set(key, this.settles);
      }
      const partition = partitionOf.get(record.id);
      if (partition !== undefined) {
        const left = (this.perPartition.get(partition) ?? 1) - 1;
        if (left > 0) this.perPartition.set(partition, left);
        else this.perPartition.delete(partition);
      }
    }
  }
}
