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

const ORPHANS_PER_RUN = 1_000;

/**
 * Clears the expired leases of dispatchers that crashed or stalled (claims already treat an
 * expired lease as free; the unlocker makes the table tell the truth and reports the count),
 * and promotes waiting messages left with nothing ahead of them, e.g. after
 * `ordering.onDeadLetter` or `ordering.enabled` changed between deployments.
 */
@Injectable()
export class OutboxUnlocker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(OutboxUnlocker.name);
  private readonly runner: IntervalRunner<number>;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry?: SchedulerRegistry,
  ) {
    this.runner = new IntervalRunner(
      outboxTimerName(options.name, 'unlocker'),
      registry,
      this.logger,
      () => this.release(),
    );
  }

  onApplicationBootstrap(): void {
    if (this.options.autoStart) this.start();
  }

  start(): void {
    this.runner.start(this.options.unlocker.intervalMs);
  }

  /** Releases expired leases now; resolves to how many. */
  runOnce(): Promise<number> {
    return this.runner.run();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.runner.stop();
    await this.runner.idle();
  }

  private async release(): Promise<number> {
    const promoted = await this.store.promoteOrphans(ORPHANS_PER_RUN);
    if (promoted > 0) {
      this.logger.warn(`Promoted ${promoted} waiting message(s) that nothing was holding back`);
    }
    const count = await this.store.releaseExpired();
    if (count > 0) {
      this.logger.warn(`Released ${count} expired lease(s) of a crashed or stalled dispatcher`);
      try {
        this.options.observer.onLeasesReleased?.(count);
      } catch (error) {
        this.logger.error(`An outbox hook threw: ${describeError(error)}`);
      }
    }
    return count;
  }
}
