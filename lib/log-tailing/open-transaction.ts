import type { LoggedInsert } from '../store/ports/outbox-log-source.port';

/** What an open transaction's inserts came to at its commit. */
export interface EndedTransaction {
  /** The inserts to hand over; empty once the transaction went past the bound. */
  readonly inserts: LoggedInsert[];
  /** Inserts not handed over (the whole transaction, past the bound): the table's sweep has them. */
  readonly leftToTable: number;
}

/**
 * The outbox inserts of the transaction a log source is reading, kept until its commit, but only
 * up to `max` (`logTailing({ maxTransactionInserts })`). A reader that kept them all would hold
 * a backfill of millions of rows in memory and die of it, and so would every reader after it,
 * since the slot's position is still before that transaction. Past the bound the transaction is
 * *overflowed*: the ids kept are dropped, the rest only counted, and at its commit none is
 * handed over; the whole transaction is left to the table, where its rows are pending and the
 * sweep claims them in order, and its end is acknowledged like any other.
 */
export class OpenTransaction {
  private inserts: LoggedInsert[] = [];
  private count = 0;

  /** `overflowed` is told once per transaction, when it passes `max`, with its size so far. */
  constructor(
    private readonly max: number,
    private readonly overflowed: (insertsSoFar: number) => void,
  ) {}

  /** A transaction begins: what a transaction left open (never committed) is forgotten. */
  begin(): void {
    this.inserts = [];
    this.count = 0;
  }

  add(insert: LoggedInsert): void {
    this.count++;
    if (this.count <= this.max) {
      this.inserts.push(insert);
      return;
    }
    if (this.count === this.max + 1) {
      this.inserts = [];
      this.overflowed(this.count);
    }
  }

  /** The transaction committed: what to hand over; then a new one begins. */
  end(): EndedTransaction {
    const ended =
      this.count > this.max
        ? { inserts: [], leftToTable: this.count }
        : { inserts: this.inserts, leftToTable: 0 };
    this.begin();
    return ended;
  }
}

/** The WARN line of a transaction past the bound (one per transaction). */
export function overflowWarning(table: string, max: number, insertsSoFar: number): string {
  return `A transaction on ${table} passed ${max} outbox inserts (logTailing({ maxTransactionInserts }); ${insertsSoFar} so far): the log reader does not keep its messages in memory and leaves them to the table's sweep, which delivers them in order once it commits.`;
}
