import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type {
  OutboxLogLag,
  OutboxLogObserver,
  OutboxLogSource,
} from '../../store/ports/outbox-log-source.port';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import {
  logReaderName,
  openLogSource,
  type LogDialect,
  type LogSourceNeeds,
} from './open-log-source';

/**
 * What both log sources share: the database's log reader, made and checked at module init,
 * beside the table's source that delivers (the leases' sweep, or the partition owner), whose
 * drains, wake-ups and drain times they are. Each adds how it starts and stops the reader and
 * what it does with what the log hands over.
 */
export abstract class LogBesideTable implements DeliverySource {
  readonly delivers = true;
  abstract readonly unsettled: string;
  abstract readonly description: string;
  protected source: OutboxLogSource | undefined;
  private dialect: LogDialect | undefined;

  protected constructor(
    protected readonly observer: OutboxLogObserver,
    protected readonly context: SourceContext,
  ) {}

  /** The table's source beside the reader. */
  protected abstract get table(): DeliverySource;
  /** Whether the reader still runs, for what an abandoned shutdown leaves. */
  protected abstract get readerRunning(): boolean;
  /** What the dispatcher asks of the log besides its rows. */
  protected abstract logNeeds(): LogSourceNeeds;

  /** Which log is read, for the start's line: known once the source is made (`prepare`). */
  get reader(): string {
    return logReaderName(this.dialect);
  }

  get drainTimes(): DrainTimes {
    return this.table.drainTimes;
  }

  /**
   * Makes the source and checks the server (settings, grants, publication or position table):
   * a missing setting fails the app's start, naming it.
   */
  async prepare(): Promise<void> {
    if (this.source !== undefined) return;
    const { source, dialect } = await openLogSource(this.observer, this.context, this.logNeeds());
    this.dialect = dialect;
    this.source = source;
  }

  abstract start(): Promise<void>;
  abstract stop(): SourceStop;

  wake(): void {
    this.table.wake();
  }

  drain(): Promise<number> {
    return this.table.drain();
  }

  runOnce(): Promise<OutboxBatchReport> {
    return this.table.runOnce();
  }

  /** How far the log's durable position is behind; null before the source is made. */
  async lag(): Promise<OutboxLogLag | null> {
    return this.source === undefined ? null : this.source.lag();
  }

  stillRunning(idleDone: boolean): string[] {
    const left = this.table.stillRunning(idleDone);
    if (!idleDone && this.readerRunning) left.unshift('the log reader');
    return left;
  }
}
