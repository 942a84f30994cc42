import type { OwnedRead } from '../../store/ports/outbox-store.port';
import { idAfter } from '../../store/rows/outbox-row.mapper';

/**
 * Where an owner's next read may start. Ids are taken at insert and rows become visible at
 * commit, so a lower id can commit after a higher one was read: a read after the highest id
 * seen would miss it. A read's range is left behind only once every transaction that could still
 * commit a row in it has ended. Such a transaction had its transaction id before the read's
 * snapshot (the library's enqueue gives it one before its rows take their ids), so it is below
 * the id the read itself was given after its snapshot (`OwnedRead.snapshot.xid`); once a later
 * read's `xmin` reaches that id, all of them have ended. The snapshot's own `xmax` is no such
 * bound: it is one past the newest transaction that had *ended*, and a transaction given a
 * higher id before the snapshot is running without being listed (bench P4 found rows passed so
 * and delivered only by the next sweep, 0.2-1 s late). Rows not due yet when a read passed
 * them, and rows of keys held back, are below the floor: the periodic sweep from the start of
 * the table finds them.
 */
export class ReadFloor {
  private floor = '0';
  /** Reads whose range is not behind the floor yet: what they covered, and their own id. */
  private pending: { readonly upTo: string; readonly xid: bigint }[] = [];

  get after(): string {
    return this.floor;
  }

  /**
   * A read came back: it covered the ids up to its last row (a row it could not see yet there
   * belongs to a transaction given its id before the read's, ended once a later snapshot's
   * `xmin` reaches the read's own id). Under writers the floor so trails the reads by one: the
   * next read starts below this one's rows and passes over those held in memory. With no id
   * given out between a read's snapshot and its own, `xmin` is that id and the floor moves at
   * once.
   */
  saw(after: string, found: OwnedRead): void {
    const { xmin, xid } = found.snapshot;
    const last = found.records[found.records.length - 1];
    // Only a read from the floor or below covers the ids from the floor up to its last row.
    if (last !== undefined && !idAfter(after, this.floor))
      this.pending.push({ upTo: last.id, xid });
    const ready = this.pending.filter((p) => p.xid <= xmin);
    if (ready.length > 0) {
      for (const p of ready) if (idAfter(p.upTo, this.floor)) this.floor = p.upTo;
      this.pending = this.pending.filter((p) => p.xid > xmin);
    }
  }

  /** Reads start from the start of the table again (a dispatcher starting). */
  reset(): void {
    this.floor = '0';
    this.pending = [];
  }
}
