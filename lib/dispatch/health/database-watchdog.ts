import { OutboxDatabaseTimeoutError } from '../../errors/outbox-database-timeout.error';
import { describeError } from '../../internal/describe-error';
import { pausedPast } from './process-pause';

// Part of the lease budget that the options check, so it is defined with them.
export { watchdogMarginMs } from '../../options/resolve-dispatcher-options';

/** How a call behaves while an earlier one is abandoned, and what happens to a late answer. */
export interface WatchdogCallOptions<T> {
  /**
   * Run even while an earlier call is still waiting for the database. Settles use it: a batch
   * the broker accepted must get its outcome recorded, or it is published again.
   * @default false
   */
  readonly evenWhileStalled?: boolean;
  /** Receives the answer of this call if it arrives after the watchdog gave up on it. */
  readonly onLateResult?: (value: T) => void;
}

/**
 * Bounds every dispatcher database call, including the wait for a pool connection (which
 * PostgreSQL's statement_timeout does not cover). The server cancels slow statements itself
 * where it can; the watchdog covers what it cannot: a connection that never answers. It gives
 * up on such a call, and refuses new claims until the abandoned one settles, so a dead
 * connection cannot drain the application's pool one claim at a time.
 */
export class DatabaseWatchdog {
  private abandoned: string | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly logger: { warn(text: string): void; error(text: string): void },
  ) {}

  /** The operation given up on and still waiting for the database, if any. */
  get stalled(): string | undefined {
    return this.abandoned;
  }

  async run<T>(
    operation: string,
    call: () => Promise<T>,
    options: WatchdogCallOptions<T> = {},
  ): Promise<T> {
    if (this.abandoned !== undefined && options.evenWhileStalled !== true) {
      throw new OutboxDatabaseTimeoutError(
        operation,
        this.timeoutMs,
        `An earlier outbox ${this.abandoned} is still waiting for the database; not starting a ${operation}`,
      );
    }
    const pending = call();
    const dueAt = performance.now() + this.timeoutMs;
    let answer = await within(pending, this.timeoutMs);
    if (answer === undefined) {
      // On waking from a pause, the timer fires before the answer that came meanwhile is read:
      // the database is not to blame, so it gets its time again.
      const paused = pausedPast(dueAt);
      if (paused > 0) {
        this.logger.warn(
          `This process was paused for at least ${paused} ms (its event loop did not run: a long GC, SIGSTOP, a debugger, or blocking code); the outbox ${operation} was waiting for the database meanwhile, so it waits ${this.timeoutMs} ms more`,
        );
        answer = await within(pending, this.timeoutMs);
      }
    }
    if (answer !== undefined) return answer.value;
    this.abandoned = operation;
    this.logger.error(
      `The outbox ${operation} got no database answer within ${this.timeoutMs} ms; giving up on it and pausing (is a connection or lock stuck?)`,
    );
    pending.then(
      (value) => {
        this.recover(operation, 'finished late');
        options.onLateResult?.(value);
      },
      (error: unknown) => this.recover(operation, `failed late: ${describeError(error)}`),
    );
    throw new OutboxDatabaseTimeoutError(operation, this.timeoutMs);
  }

  private recover(operation: string, how: string): void {
    if (this.abandoned === undefined) return;
    this.abandoned = undefined;
    this.logger.warn(`The abandoned outbox ${operation} ${how}; resuming`);
  }
}

/** `{ value }` once `pending` resolves within `ms`; undefined when `ms` passes first. */
async function within<T>(pending: Promise<T>, ms: number): Promise<{ value: T } | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([pending.then((value) => ({ value })), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
