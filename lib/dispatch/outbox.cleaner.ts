import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxStore } from '../store/outbox-store.port';
import { describeError } from '../internal/describe-error';
import { OUTBOX_OPTIONS, OUTBOX_STORE, outboxTimerName } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { IntervalRunner } from './interval-runner';

// One run deletes at most this many batches, so a huge backlog of history is spread over runs
// instead of holding the database busy.
const MAX_BATCHES_PER_RUN = 100;

/** What one cleaner run deleted. */
export interface OutboxCleanReport {
  readonly delivered: number;
  readonly dead: number;
}

/** Deletes delivered rows past their retention (and dead rows, when configured) in bounded batches. */
@Injectable()
export class OutboxCleaner implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(OutboxCleaner.name);
  private readonly runner: IntervalRunner<OutboxCleanReport>;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry?: SchedulerRegistry,
  ) {
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'cleaner'),
      registry,
      this.logger,
      () => this.clean(),
    );
  }

  onApplicationBootstrap(): void {
    if (this.options.autoStart) this.start();
  }

  start(): void {
    this.runner.start(this.options.cleaner.intervalMs);
  }

  /** Deletes what is past retention now. */
  runOnce(): Promise<OutboxCleanReport> {
    return this.runner.run();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.runner.stop();
    await this.runner.idle();
  }

  private async clean(): Promise<OutboxCleanReport> {
    const { deliveredRetentionMs, deadRetentionMs } = this.options.cleaner;
    const delivered = await this.purge('delivered', deliveredRetentionMs);
    const dead = deadRetentionMs === null ? 0 : await this.purge('dead', deadRetentionMs);
    return { delivered, dead };
  }

  private async purge(status: 'delivered' | 'dead', olderThanMs: number): Promise<number> {
    const { batchSize } = this.options.cleaner;
    let total = 0;
    for (let i = 0; i < MAX_BATCHES_PER_RUN; i++) {
      const deleted = await this.store.purge(status, olderThanMs, batchSize);
      total += deleted;
      if (deleted < batchSize) break;
    }
    if (total > 0) {
      try {
        this.options.observer.onPurged?.(status, total);
      } catch (error) {
        this.logger.error(`An outbox hook threw: ${describeError(error)}`);
      }
    }
    return total;
  }
}
