import type { BeforeApplicationShutdown, Logger, OnApplicationBootstrap } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../internal/describe-error';
import { outboxTimerName } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { IntervalRunner } from './interval-runner';

/** The workers that do one piece of work every `options[worker].intervalMs`. */
export type IntervalWorkerName = 'unlocker' | 'cleaner' | 'partitions';

/**
 * A worker that does one piece of work on a timer of its own (see `IntervalRunner`, which keeps
 * runs from overlapping and lists the timer in the app's `SchedulerRegistry`): started at
 * bootstrap unless `autoStart: false`, stopped and drained at shutdown, and driven by hand with
 * `runOnce()`. A subclass supplies only `work()`.
 */
export abstract class IntervalWorker<T>
  implements OnApplicationBootstrap, BeforeApplicationShutdown
{
  private readonly runner: IntervalRunner<T>;

  protected constructor(
    protected readonly options: ResolvedOutboxOptions,
    registry: SchedulerRegistry | undefined,
    private readonly worker: IntervalWorkerName,
    protected readonly logger: Logger,
  ) {
    this.runner = new IntervalRunner(outboxTimerName(options.name, worker), registry, logger, () =>
      this.work(),
    );
  }

  onApplicationBootstrap(): void {
    if (this.options.autoStart) this.start();
  }

  start(): void {
    const intervalMs = this.intervalMs();
    if (intervalMs === null) return;
    this.runner.start(intervalMs);
    // In the background: a failed first run is logged, as a timer's run is.
    if (this.runsAtStart()) this.runner.request();
  }

  /** Whether the first run comes at start rather than one interval later. */
  protected runsAtStart(): boolean {
    return false;
  }

  /** Time between runs; null when the worker has nothing to do on a timer. */
  protected intervalMs(): number | null {
    const worker = this.worker;
    return worker === 'partitions' ? null : this.options[worker].intervalMs;
  }

  /** Does the work now, after the run in progress (if any); resolves to what it did. */
  runOnce(): Promise<T> {
    return this.runner.run();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.runner.stop();
    await this.runner.idle();
  }

  protected abstract work(): Promise<T>;

  /** Observer hooks must never stop the work. */
  protected safely(hook: () => void): void {
    try {
      hook();
    } catch (error) {
      this.logger.error(`An outbox hook threw: ${describeError(error)}`);
    }
  }
}
