import {
  DEFAULT_LOG_LINGER_MS,
  type OutboxLogObserver,
} from '../../store/ports/outbox-log-source.port';
import type { DeliverySource, SourceContext, SourceStop } from '../delivery-source';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { RowLeases } from '../leases/row-leases';
import { LogBesideTable } from './log-beside-table';
import { LogTailer } from './log-tailer';
import { logSweepIntervalMs, type LogSourceNeeds } from './open-log-source';
import { RetrySweeps } from './retry-sweeps';

/**
 * The log's source (`delivery: logTailing()`): the database's log
 * reader, checked at module init; the `LogTailer` that leases what it brings and hands it to the
 * pipeline; and the table's sweep (a `PollSource` on a slow timer, without LISTEN or commit
 * nudges), which takes retries, promotions and what the tailer left to the table, and is asked
 * to look when a retry falls due. States: not made (before init), checked, reading, stopped.
 */
export class LogSource extends LogBesideTable {
  readonly unsettled = 'the messages of a batch not settled are claimed again once its lease ends';
  private tailer: LogTailer | undefined;
  /** The sweeps retries ask for. */
  private readonly retrySweeps: RetrySweeps;

  /**
   * `sweep` is the table's source on the sweep's timer (see `chooseDeliverySource`): the log
   * source wakes it for what it leaves to the table and for retries falling due.
   */
  constructor(
    observer: OutboxLogObserver,
    private readonly pipeline: DeliveryPipeline,
    context: SourceContext,
    private readonly leases: RowLeases,
    private readonly sweep: DeliverySource,
  ) {
    super(observer, context);
    this.retrySweeps = new RetrySweeps(() => this.sweep.wake());
    pipeline.onRetries((delaysMs) => this.retrySweeps.due(delaysMs));
  }

  /** How often the table is still polled: retries, promotions and rows the reader left. */
  get sweepIntervalMs(): number {
    return logSweepIntervalMs(this.observer);
  }

  get description(): string {
    return `log tailing (${this.reader}), table swept every ${this.sweepIntervalMs} ms`;
  }

  protected get table(): DeliverySource {
    return this.sweep;
  }

  protected get readerRunning(): boolean {
    return this.tailer !== undefined && !this.tailer.idle;
  }

  protected logNeeds(): LogSourceNeeds {
    return { leasesById: true };
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
}
