import type { Logger } from '@nestjs/common';
import { OutboxDatabaseTimeoutError } from '../errors/outbox-database-timeout.error';
import { describeError } from '../internal/describe-error';

/**
 * Bounds every dispatcher database call. The server cancels slow statements itself where it
 * can (PostgreSQL statement_timeout); the watchdog covers what it cannot: a connection that
 * never answers. It gives up on such a call, and refuses new calls until the abandoned one
 * settles, so a dead connection cannot drain the application's pool one claim at a time.
 */
export class DatabaseWatchdog {
  private abandoned: string | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly logger: Logger,
  ) {}

  /** The operation given up on and still waiting for the database, if any. */
  get stalled(): string | undefined {
    return this.abandoned;
  }

  async run<T>(operation: string, call: () => Promise<T>): Promise<T> {
    if (this.abandoned !== undefined) {
      throw new OutboxDatabaseTimeoutError(
        operation,
        this.timeoutMs,
        `An earlier outbox ${this.abandoned} is still waiting for the database; not starting a ${operation}`,
      );
    }
    const pending = call();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.timeoutMs);
    });
    try {
      const result = await Promise.race([pending, deadline]);
      if (result !== 'timeout') return result;
    } finally {
      clearTimeout(timer);
    }
    this.abandoned = operation;
    this.logger.error(
      `The outbox ${operation} got no database answer within ${this.timeoutMs} ms; giving up on it and pausing (is a connection or lock stuck?)`,
    );
    pending.then(
      () => this.recover(operation, 'finished late'),
      (error: unknown) => this.recover(operation, `failed late: ${describeError(error)}`),
    );
    throw new OutboxDatabaseTimeoutError(operation, this.timeoutMs);
  }

  private recover(operation: string, how: string): void {
    this.abandoned = undefined;
    this.logger.warn(`The abandoned outbox ${operation} ${how}; resuming`);
  }
}
