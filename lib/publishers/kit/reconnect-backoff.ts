import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';

/** The waits between connection attempts, as the `reconnect` option of a publisher gives them. */
export interface ReconnectDelays {
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
}

/**
 * When a publisher may try to connect again, and why the last attempt failed. The wait doubles
 * after each failed attempt up to `maxDelayMs` and starts again from `initialDelayMs` after a
 * success: a broker that is down is not hammered by every batch, and one that is back is used
 * at once. The last failure is kept so that the batches failing fast meanwhile say why.
 */
export class ReconnectBackoff {
  #nextAttemptAt = 0;
  #delayMs = 0;
  #lastFailure: PublisherUnavailableError | undefined;

  constructor(private readonly delays: ReconnectDelays) {}

  /** Why the last attempt failed, or the connection in use was lost; undefined after a success. */
  get lastFailure(): PublisherUnavailableError | undefined {
    return this.#lastFailure;
  }

  /** How long until the next attempt may be made (0 or less: now). */
  waitMs(): number {
    return this.#nextAttemptAt - Date.now();
  }

  /** Records a failed attempt; answers the wait before the next one. */
  failed(failure: PublisherUnavailableError): number {
    const { initialDelayMs, maxDelayMs } = this.delays;
    this.#delayMs = Math.min(maxDelayMs, this.#delayMs === 0 ? initialDelayMs : this.#delayMs * 2);
    this.#nextAttemptAt = Date.now() + this.#delayMs;
    this.#lastFailure = failure;
    return this.#delayMs;
  }

  /** Records why the connection in use failed or ended, without delaying the next attempt. */
  lost(failure: PublisherUnavailableError): void {
    this.#lastFailure = failure;
  }

  succeeded(): void {
    this.#delayMs = 0;
    this.#nextAttemptAt = 0;
    this.#lastFailure = undefined;
  }

  /**
   * The failure of a batch that came while waiting to reconnect: no attempt is made for it, so
   * it fails at once, saying why the last one failed and when the next comes.
   */
  unreachable(what: string, waitMs: number): PublisherUnavailableError {
    const last = this.#lastFailure;
    return new PublisherUnavailableError(
      `${what} is unreachable (${last === undefined ? 'no attempt yet' : last.message}); next connection attempt in ${waitMs} ms`,
      { cause: last },
    );
  }
}
