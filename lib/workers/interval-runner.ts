import type { SchedulerRegistry } from '@nestjs/schedule';
import { captureAsyncContext } from '../internal/detached-context';
import { describeError } from '../internal/describe-error';

/**
 * Runs one task on a timer of its own without ever overlapping itself: a tick that finds the
 * previous run still going is skipped. Errors are logged, never thrown out of the timer.
 *
 * The timer is listed in the app's `SchedulerRegistry` when the app has one (it imported
 * `ScheduleModule.forRoot()` itself), so it shows beside the app's own jobs; the outbox never
 * brings a scheduler of its own, which would run every `@Interval`/`@Cron` of the app twice.
 *
 * Every run, whether a timer's, a wake-up's or a caller's (`runOnce()`, `drain()`), runs in the
 * async context the runner was made in, never the caller's (see `captureAsyncContext`).
 */
export class IntervalRunner<T> {
  private current: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** A run was asked for while one was going: it goes once more when that one ends. */
  private again = false;
  private readonly detached = captureAsyncContext();

  constructor(
    private readonly name: string,
    private readonly registry: SchedulerRegistry | undefined,
    private readonly logger: { error(text: string): void },
    private readonly task: () => Promise<T>,
  ) {}

  get running(): boolean {
    return this.current !== undefined;
  }

  /** Whether a run was asked for (`request`) since the run in progress last cleared it. */
  get requested(): boolean {
    return this.again;
  }

  /**
   * Runs the task now, or once more right after the run in progress: a request that arrives
   * while a run is finishing is never lost. A run that looks again by itself clears it first
   * (`clearRequest`), so it costs no extra run.
   */
  request(): void {
    if (this.current === undefined) this.tick();
    else this.again = true;
  }

  clearRequest(): void {
    this.again = false;
  }

  start(intervalMs: number): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => this.tick(), intervalMs);
    this.registry?.addInterval(this.name, this.timer);
  }

  stop(): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    if (this.registry?.doesExist('interval', this.name) === true) {
      this.registry.deleteInterval(this.name);
    }
    this.timer = undefined;
  }

  /** Starts a run unless one is going; failures are logged. */
  tick(): void {
    if (this.current !== undefined) return;
    this.run()
      .then(() => undefined)
      .catch((error: unknown) => this.logger.error(`${this.name} failed: ${describeError(error)}`));
  }

  /** Runs the task once the run in progress (if any) has finished; resolves with its result. */
  run(): Promise<T> {
    return this.exclusive(this.task);
  }

  /** Runs `fn` alone: never alongside the task or another exclusive run. */
  async exclusive<R>(fn: () => Promise<R>): Promise<R> {
    while (this.current !== undefined) await this.idle();
    const run = this.detached(fn);
    const current = run.then(
      () => undefined,
      () => undefined,
    );
    this.current = current;
    try {
      return await run;
    } finally {
      if (this.current === current) {
        this.current = undefined;
        if (this.again) {
          this.again = false;
          this.tick();
        }
      }
    }
  }

  /** Resolves when the run in progress (if any) has finished, whatever its outcome. */
  async idle(): Promise<void> {
    await this.current;
  }
}
