import type { LoggedBatch, LoggedInsert } from '../../store/ports/outbox-log-source.port';
import type { BinlogClientEvent } from './mysql-binlog-client';
import { formatBinlogPosition, type BinlogPosition } from './mysql-binlog-position';
import { OpenTransaction } from '../open-transaction';

/** A committed transaction's inserts into the outbox table, and the position after it. */
interface CommittedTransaction {
  readonly inserts: readonly LoggedInsert[];
  /** Inserts not kept: the transaction passed the bound, and the table's sweep has them. */
  readonly leftToTable: number;
  readonly position: BinlogPosition;
}

/**
 * Turns the binlog's events into committed transactions of the outbox table's inserts, and
 * those into batches. A position is only ever one after a whole transaction: the binlog of a
 * transaction runs from its BEGIN (a GTID event on MariaDB) to its XID event (or a `COMMIT`
 * query for a non-transactional engine, or the DDL statement itself), and resuming inside that
 * span would lose the transaction's first rows.
 */
export class BinlogTransactions {
  private file: string;
  private readonly open: OpenTransaction;
  private readonly committed: CommittedTransaction[] = [];
  /** Inserts in `committed`, for the batch size and the back-pressure. */
  private waitingInserts = 0;
  /** The position after the last transaction seen, outbox inserts or not. */
  private read: BinlogPosition;
  /** The position after the last transaction handed over in a batch. */
  private handed: BinlogPosition;

  constructor(
    private readonly schema: string,
    private readonly table: string,
    start: BinlogPosition,
    /** Most inserts of one transaction kept (see OpenTransaction), and who hears of one past it. */
    bound: { readonly maxInserts: number; overflowed(insertsSoFar: number): void } = {
      maxInserts: Number.MAX_SAFE_INTEGER,
      overflowed: () => undefined,
    },
  ) {
    this.open = new OpenTransaction(bound.maxInserts, (soFar) => bound.overflowed(soFar));
    this.file = start.file;
    this.read = start;
    this.handed = start;
  }

  /** Takes one event; answers whether it completed a transaction with outbox inserts. */
  accept(event: BinlogClientEvent): boolean {
    switch (event.getEventName()) {
      case 'rotate':
        if (event.binlogName !== undefined) this.file = event.binlogName;
        return false;
      case 'writerows':
        if (this.isOutbox(event)) {
          for (const row of event.rows ?? []) this.open.add(insertOf(row));
        }
        return false;
      case 'xid':
        return this.commit(event.nextPosition);
      case 'gtid':
      case 'mariadbgtid':
        // A transaction starts (MariaDB writes no BEGIN query). Rows still open belong to an
        // XA transaction only prepared: they are not handed over (the table's poll finds them).
        this.open.begin();
        return false;
      case 'query':
        // BEGIN opens a transaction; anything else (COMMIT, DDL) closes a group.
        if (event.query?.trim().toUpperCase() === 'BEGIN') {
          this.open.begin();
          return false;
        }
        return this.commit(event.nextPosition);
      default:
        return false;
    }
  }

  /** Inserts of committed transactions not handed over yet. */
  get waiting(): number {
    return this.waitingInserts;
  }

  /** The position after the last transaction read, whether or not it had outbox inserts. */
  get readPosition(): BinlogPosition {
    return this.read;
  }

  /** The position of the last batch taken (the start position before the first). */
  get handedPosition(): BinlogPosition {
    return this.handed;
  }

  /**
   * The next batch: whole transactions, in commit order, up to `max` inserts. A transaction
   * of more than `max` inserts comes in parts; the parts before its last carry the position of
   * the batch before (acknowledging one skips nothing), the last the position after it.
   */
  take(max: number): LoggedBatch | null {
    const inserts: LoggedInsert[] = [];
    let leftToTable = 0;
    let position = this.handed;
    while (this.committed.length > 0) {
      const next = this.committed[0] as CommittedTransaction;
      if (inserts.length > 0 && inserts.length + next.inserts.length > max) break;
      if (next.inserts.length > max - inserts.length) {
        const part = next.inserts.slice(0, max - inserts.length);
        inserts.push(...part);
        this.committed[0] = {
          inserts: next.inserts.slice(part.length),
          leftToTable: 0,
          position: next.position,
        };
        break;
      }
      inserts.push(...next.inserts);
      leftToTable += next.leftToTable;
      position = next.position;
      this.committed.shift();
    }
    if (inserts.length === 0 && leftToTable === 0) return null;
    this.waitingInserts -= inserts.length;
    this.handed = position;
    const batch = { inserts, position: formatBinlogPosition(position) };
    return leftToTable === 0 ? batch : { ...batch, leftToTable };
  }

  private commit(nextPosition: number): boolean {
    // zongji's opening rotate carries no offset of the file it starts in.
    if (nextPosition <= 0) return false;
    const position = { file: this.file, offset: nextPosition };
    this.read = position;
    const { inserts, leftToTable } = this.open.end();
    if (inserts.length === 0 && leftToTable === 0) return false;
    this.committed.push({ inserts, leftToTable, position });
    this.waitingInserts += inserts.length;
    return true;
  }

  private isOutbox(event: BinlogClientEvent): boolean {
    const entry = event.tableId === undefined ? undefined : event.tableMap?.[event.tableId];
    return entry?.parentSchema === this.schema && entry.tableName === this.table;
  }
}

function insertOf(inserted: object): LoggedInsert {
  // A writerows row: the inserted values by column name.
  const row = inserted as Readonly<Record<string, unknown>>;
  return { id: String(row['id']), key: textOf(row['message_key']) };
}

function textOf(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  return Buffer.isBuffer(value) ? value.toString('utf8') : JSON.stringify(value);
}
