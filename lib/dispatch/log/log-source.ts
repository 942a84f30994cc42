import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import {
  DEFAULT_LOG_LINGER_MS,
  type OutboxLogLag,
  type OutboxLogObserver,
  type OutboxLogSource,
} from '../../store/ports/outbox-log-source.port';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from '../delivery-source';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { RowLeases } from '../leases/row-leases';
import { LogTailer } from './log-tailer';
import {
  logReaderName,
  logSweepIntervalMs,
  openLogSource,
  type LogDialect,
} from './open-log-source';
import { RetrySweeps } from './retry-sweeps';

/**
 * The log's source (`delivery: logTailing()`): the database's log
 * reader, checked at module init; the `LogTailer` that leases what it brings and hands it to the
 * pipeline; and the table's sweep (a `PollSource` on a slow timer, without LISTEN or commit
 * nudges), which takes retries, promotions and what the tailer left to the table, and is asked
 * to look when a retry falls due. States: not made (before init), checked, reading, stopped.
 */
export class LogSource implements DeliverySource {
  readonly delivers = true;
  readonly unsettled = 'the messages of a batch not settled are claimed again once its lease ends';
  private source: OutboxLogSource | undefined;
  private database: LogDialect | undefined;
  private tailer: LogTailer | undefined;
  /** The sweeps retries ask for. */
  private readonly retrySweeps: RetrySweeps;

  /**
   * `sweep` is the table's source on the sweep's timer (see `chooseDeliverySource`): the log
   * source wakes it for what it leaves to the table and for retries falling due.
   */
  constructor(
    private readonly observer: OutboxLogObserver,
    private readonly pipeline: DeliveryPipeline,
    private readonly context: SourceContext,
    private readonly leases: RowLeases,
    private readonly sweep: DeliverySource,
  ) {
    this.retrySweeps = new RetrySweeps(() => this.sweep.wake());
    pipeline.onRetries((delaysMs) => this.retrySweeps.due(delaysMs));
  }

  /** How often the table is still polled: retries, promotions and rows the reader left. */
  get sweepIntervalMs(): number {
    return logSweepIntervalMs(this.observer);
  }

  /** Which log is read, for the start's line: known once the source is made (`prepare`). */
  get reader(): string {
    return logReaderName(this.database);
  }

  get description(): string {
    return `log tailing (${this.reader}), table swept every ${this.sweepIntervalMs} ms`;
  }

  get drainTimes(): DrainTimes {
    return this.sweep.drainTimes;
  }

  /**
   * Makes the source and checks the server (settings, grants, publication or position table):
   * a missing setting fails the app's start, naming it.
   */
  async prepare(): Promise<void> {
    if (this.source !== undefined) return;
    const { source, dialect } = await openLogSource(this.observer, this.context, {
      leasesById: true,
    });
    this.database = dialect;
    this.source = source;
  }

  /** Starts reading the log and the sweep's timer. */
  async start(): Promise<void> {
    await this.prepare();
    const source = this.source;
    const claimIds = this.context.store.claimIds?.bind(this.context.store);
    if (this.tailer === undefined && source !== undefined && claimIds !== undefined) {
      const { options, log } = this.context;
      const { instanceId, dispatcher, ordering } = options;
      this.tailer = new LogTailer({
        source,
        store: { claimIds },
        pipeline: this.pipeline,
        leases: this.leases,
        log,
        owner: instanceId,
        leaseMs: dispatcher.leaseMs,
        batchSize: dispatcher.batchSize,
        batchesInFlight: dispatcher.batchesInFlight,
        lingerMs: this.observer.lingerMs ?? DEFAULT_LOG_LINGER_MS,
        ordered: ordering.enabled,
        maxRun: ordering.maxRun,
        handOff: () => this.sweep.wake(),
        sweepAfter: (delayMs) => this.retrySweeps.due([delayMs]),
      });
      this.tailer.start();
    }
    await this.sweep.start();
  }

  /** A sweep of the table now. */
  wake(): void {
    this.sweep.wake();
  }

  drain(): Promise<number> {
    return this.sweep.drain();
  }

  runOnce(): Promise<OutboxBatchReport> {
    return this.sweep.runOnce();
  }

  /** How far the log's durable position is behind; null before the source is made. */
  async lag(): Promise<OutboxLogLag | null> {
    return this.source === undefined ? null : this.source.lag();
  }

  /**
   * Stops the reader first: the batches it leased finish (settled), what it had not leased stays
   * unacknowledged. Then the sweep.
   */
  stop(): SourceStop {
    const tailer = this.tailer;
    this.retrySweeps.stop();
    const tailing = tailer?.stop() ?? Promise.resolve();
    const sweep = this.sweep.stop();
    return {
      idle: Promise.all([tailing, sweep.idle]).then(() => undefined),
      closing: sweep.closing,
    };
  }

  stillRunning(idleDone: boolean): string[] {
    const left = this.sweep.stillRunning(idleDone);
    if (!idleDone && this.tailer !== undefined && !this.tailer.idle) left.unshift('the log reader');
    return left;
  }
}
