import { describeError } from '../../internal/describe-error';
import { idAfter } from '../../store/rows/outbox-row.mapper';
import { ALL_PARTITIONS } from '../../store/shared-sql/delivery-partitions';
import type { LoggedBatch, OutboxLogObserver } from '../../store/ports/outbox-log-source.port';
import type { DeliverySource, SourceContext, SourceStop } from '../delivery-source';
import { LogBesideTable } from './log-beside-table';
import { logSweepIntervalMs, type LogSourceNeeds } from './open-log-source';

/**
 * How long after the log named a commit the owner reads once more: the log may hand a commit
 * over a moment before a new snapshot shows it, and a read in that moment finds nothing.
 */
const SEEN_AGAIN_MS = 25;
/**
 * How long past a delayed message's due time its sweep runs: the database's clock decides, and
 * a sweep a little early finds nothing.
 */
const DUE_MARGIN_MS = 20;

/**
 * How the partition source this one feeds learns of rows (the partition source's `PartitionFeed`,
 * written out here: the sources do not import each other, the chooser makes both).
 */
export interface LogFeed {
  /** The owner's own sweep of the table: the log's `sweepIntervalMs`. */
  readonly intervalMs: number;
  /** No NOTIFY: the log wakes the owner. */
  readonly listen: false;
  /** Every partition while this process reads the log, none otherwise. */
  readonly share: (self: string, live: readonly string[]) => readonly number[];
  readonly describe: () => string;
}

/** What this source uses of the partition source it feeds, besides a source's face. */
export interface FedPartitions extends DeliverySource {
  /** Sweeps the owned partitions `delayMs` from now (a delayed message falls due then). */
  sweepSoon(delayMs: number): void;
  /** The share changed: worked out again now rather than at the next heartbeat. */
  shareChanged(): void;
  /** The log named rows as committed, the lowest of them `id`: read now, from it if need be. */
  committed(id: string): void;
}

/**
 * Log tailing on delivery partitions (`delivery: logTailing()` with `dispatcher.claims:
 * 'partitions'`; docs/log-tailing.md, "On delivery partitions (PostgreSQL)"). The process that
 * reads the log (it alone holds the slot) owns every partition of the table and the others own
 * none: the partitions' generations rise whenever the log changes hands, which fences a former
 * reader's late settles, and standbys read nothing while a reader lives. The log tells the owner
 * when rows committed, in place of polling and NOTIFY (writers pay nothing for it): each handover
 * wakes the owner loop, which reads the rows from the table without a lease or any write and
 * keeps each key's order in memory, as every partition owner does. Positions are acknowledged as
 * they come: the rows are pending in the table, and whoever holds the partitions next reads them
 * from there. The owner's sweep of the table, on the log's sweep interval, brings back what the
 * log cannot tell (rows re-driven, dead letters retried); retries and delayed messages it sweeps
 * for when they fall due.
 */
export class LogPartitionSource extends LogBesideTable {
  readonly unsettled =
    "the messages of a batch not settled are read again by the log's next reader once this dispatcher's heartbeat runs out";
  private readonly partitions: FedPartitions;
  private readonly abort = new AbortController();
  /** Whether this process reads the log now (holds the slot): it then wants every partition. */
  private holdsLog = false;
  private running: Promise<void> | undefined;
  private reading = false;
  private seenAgain: NodeJS.Timeout | undefined;
  /** The newest position not acknowledged yet, and the acknowledgement under way. */
  private toAcknowledge: string | undefined;
  private acknowledging: Promise<void> | undefined;
  /** Whether the log was found not to say when rows fall due (said once). */
  private noDueTimesSaid = false;

  /** `partitionsOf` makes the partition source fed by this one (see `LogFeed`). */
  constructor(
    observer: OutboxLogObserver,
    context: SourceContext,
    partitionsOf: (feed: LogFeed) => FedPartitions,
  ) {
    super(observer, context);
    const sweepMs = logSweepIntervalMs(observer);
    this.partitions = partitionsOf({
      intervalMs: sweepMs,
      listen: false,
      share: () => (this.holdsLog ? ALL_PARTITIONS : []),
      describe: () =>
        `all held by the process that reads the log and woken by it, table swept every ${sweepMs} ms`,
    });
  }

  get description(): string {
    return `log tailing (${this.reader}) on ${this.partitions.description}`;
  }

  protected get table(): DeliverySource {
    return this.partitions;
  }

  protected get readerRunning(): boolean {
    return this.reading;
  }

  protected logNeeds(): LogSourceNeeds {
    return { leasesById: false, reading: (reading) => this.readingChanged(reading) };
  }

  /** Starts the partitions' owner (holding none until the log is read here), then the reader. */
  async start(): Promise<void> {
    await this.prepare();
    await this.partitions.start();
    const source = this.source;
    if (this.running !== undefined || source === undefined) return;
    this.reading = true;
    this.running = source
      .run((batch) => this.handle(batch), this.abort.signal)
      .catch((error: unknown) =>
        this.context.log.error(`Log tailing stopped on an error: ${describeError(error)}`),
      )
      .finally(() => {
        this.reading = false;
      });
  }

  /**
   * Stops reading the log first (a standby may take the slot, but not the partitions, which
   * this process holds until its batches have settled), then the partitions' owner.
   */
  stop(): SourceStop {
    clearTimeout(this.seenAgain);
    this.seenAgain = undefined;
    this.abort.abort();
    const reading = (this.running ?? Promise.resolve()).then(() => this.acknowledging);
    const partitions = this.partitions.stop();
    return {
      idle: Promise.all([reading, partitions.idle]).then(() => undefined),
      closing: partitions.closing,
    };
  }

  /** The log was taken here, or lost: the share changes at once rather than at the next beat. */
  private readingChanged(reading: boolean): void {
    if (this.holdsLog === reading) return;
    this.holdsLog = reading;
    this.partitions.shareChanged();
  }

  /**
   * Committed inserts: the owner reads them now (from the lowest, should its read floor have
   * passed it), and again shortly after (in case a new snapshot did not show them yet). The
   * position is acknowledged: they are in the table.
   */
  private handle(batch: LoggedBatch): Promise<void> {
    let lowest: string | undefined;
    for (const insert of batch.inserts) {
      // A delayed message is not read before it is due: the sweep is asked for then.
      if (insert.dueInMs === undefined) this.sayNoDueTimes();
      else if (insert.dueInMs > 0) this.partitions.sweepSoon(insert.dueInMs + DUE_MARGIN_MS);
      else if (lowest === undefined || idAfter(lowest, insert.id)) lowest = insert.id;
    }
    // The owner reads from a named row again itself, a little later, should a new snapshot not
    // show it yet (OwnedReader.named).
    if (lowest !== undefined) this.partitions.committed(lowest);
    else if (batch.inserts.length > 0 || (batch.leftToTable ?? 0) > 0) {
      this.partitions.wake();
      this.seenAgain ??= setTimeout(() => {
        this.seenAgain = undefined;
        this.partitions.wake();
      }, SEEN_AGAIN_MS);
    }
    this.acknowledge(batch.position);
    return Promise.resolve();
  }

  private sayNoDueTimes(): void {
    if (this.noDueTimesSaid) return;
    this.noDueTimesSaid = true;
    this.context.log.warn(
      `The log does not carry available_at (its publication was made by an earlier release): delayed messages go out at the table's sweep, every ${logSweepIntervalMs(this.observer)} ms, rather than when due. Run \`outbox log setup\` (or \`outbox schema migrate --log-tailing\`) once to add the column to the publication.`,
    );
  }

  /** Acknowledges `position`, or a later one, once the acknowledgement under way has answered. */
  private acknowledge(position: string): void {
    this.toAcknowledge = position;
    const source = this.source;
    if (this.acknowledging !== undefined || source === undefined) return;
    this.acknowledging = (async () => {
      for (let next = this.toAcknowledge; next !== undefined; next = this.toAcknowledge) {
        this.toAcknowledge = undefined;
        try {
          await source.acknowledge(next);
        } catch (error) {
          // Read again after a reconnect: it only wakes the owner once more.
          this.context.log.warn(
            `Acknowledging log position ${next} failed: ${describeError(error)}`,
          );
        }
      }
    })().finally(() => {
      this.acknowledging = undefined;
    });
  }
}
