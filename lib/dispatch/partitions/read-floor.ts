import type { OwnedRead } from '../../store/ports/outbox-store.port';
import { idAfter } from '../../store/rows/outbox-row.mapper';

/**
 * Where an owner's next read may start. Ids are taken at insert and rows become visible at
 * commit, so a lower id can commit after a higher one was read: a read after the highest id
 * seen would miss it. A read's range is left behind only once every transaction that was running
 * when it ran has ended, which the snapshots of later reads tell (`xmin` reaching its `xmax`).
 * Rows not due yet when a read passed them, and rows of keys held back, are below the floor:
 * the periodic sweep from the start of the table finds them.
 */
export class ReadFloor {
  private floor = '0';
  /** Reads whose range is not behind the floor yet: what they covered, and their `xmax`. */
  private pending: { readonly upTo: string; readonly xmax: bigint }[] = [];

  get after(): string {
    return this.floor;
  }

  /**
   * A read came back: it covered the ids up to its last row (a row it could not see yet there
   * belongs to a transaction running then, ended once a later snapshot's `xmin` reaches its
   * `xmax`).
   */
  saw(after: string, found: OwnedRead): void {
    const { xmin, xmax } = found.snapshot;
    const last = found.records[found.records.length - 1];
    // Only a read from the floor or below covers the ids from the floor up to its last row.
    // A read whose own snapshot had no transaction running (xmin = xmax: a drain with no writer)
    // is behind at once: the next read starts after its last row and skips nothing in memory.
    if (last !== undefined && !idAfter(after, this.floor))
      this.pending.push({ upTo: last.id, xmax });
    const ready = this.pending.filter((p) => p.xmax <= xmin);
    if (ready.length > 0) {
      for (const p of ready) if (idAfter(p.upTo, this.floor)) this.floor = p.upTo;
      this.pending = this.pending.filter((p) => p.xmax > xmin);
    }
  }

  /** Reads start from the start of the table again (a dispatcher starting). */
  reset(): void {
    this.floor = '0';
    this.pending = [];
  }
}
