import type { LoggerService } from '@nestjs/common';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import { ReconnectBackoff, type ReconnectDelays } from './reconnect-backoff';

/** What one broker's client gives {@link ReconnectingConnection}: its calls, nothing else. */
export interface ConnectionCalls<C> {
  /** The broker and where it is, safe to log: `RabbitMQ at amqp://host:5672`. */
  readonly what: string;
  readonly reconnect: ReconnectDelays;
  readonly logger: Pick<LoggerService, 'log' | 'error'>;
  /**
   * Opens a connection, ready to publish on. On failure it releases what it opened and throws
   * the cause, which `failure` turns into what the batches see.
   */
  open(): Promise<C>;
  /** Whether a connection opened before can still carry a publish. */
  usable(connection: C): boolean;
  /**
   * The failure a batch sees for a failed attempt (the cause of `open`'s rejection).
   * @default {@link couldNotConnect}
   */
  failure?(error: unknown): PublisherUnavailableError;
  /**
   * A failure retrying cannot fix (wrong credentials, a vhost refused): the text logged as an
   * error on every attempt, since nothing is published until someone fixes the configuration.
   */
  refusal?(failure: PublisherUnavailableError, cause: unknown): string | undefined;
  /**
   * Whether batches that come while waiting to reconnect fail with the last failure as it is
   * (a typed refusal an app may catch), rather than with "unreachable".
   */
  keepsLastFailure?(last: PublisherUnavailableError): boolean;
}

/** The failure of an attempt to connect to `what` that failed with `cause`. */
export function couldNotConnect(what: string, cause: unknown): PublisherUnavailableError {
  return new PublisherUnavailableError(`Could not connect to ${what}: ${describeError(cause)}`, {
    cause,
  });
}

/**
 * The one connection of a publisher, opened on first use and again after it was lost, with
 * backoff between failed attempts. While waiting to reconnect a batch fails at once (an outage:
 * the dispatcher hands it back without counting attempts and pauses claiming) instead of
 * opening a connection per batch; `connect()` and `ping()` try at once. Attempts made at the
 * same time share one. No client-side reconnection: the outbox table is the only buffer.
 */
export class ReconnectingConnection<C> {
  readonly #backoff: ReconnectBackoff;
  #current: C | undefined;
  #connecting: Promise<C> | undefined;

  constructor(private readonly calls: ConnectionCalls<C>) {
    this.#backoff = new ReconnectBackoff(calls.reconnect);
  }

  /** The connection in use, if one is open (it may have stopped being usable). */
  get current(): C | undefined {
    return this.#current;
  }

  /**
   * The open connection, or a new one; fails fast while waiting to reconnect after a failed
   * attempt (unless `now`, for `connect()` and `ping()`).
   */
  get(now: boolean): Promise<C> {
    const current = this.#current;
    if (current !== undefined && this.calls.usable(current)) return Promise.resolve(current);
    const waitMs = this.#backoff.waitMs();
    if (!now && waitMs > 0 && this.#connecting === undefined) {
      const last = this.#backoff.lastFailure;
      return Promise.reject(
        last !== undefined && this.calls.keepsLastFailure?.(last) === true
          ? last
          : this.#backoff.unreachable(this.calls.what, waitMs),
      );
    }
    this.#connecting ??= this.open().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /**
   * Forgets `connection` if it is the one in use (it ended, or can no longer be trusted), so the
   * next publish opens another; with `failure`, the batches that fail fast meanwhile say why.
   * Answers whether it was the one in use.
   */
  forget(connection: C, failure?: PublisherUnavailableError): boolean {
    if (this.#current !== connection) return false;
    this.#current = undefined;
    if (failure !== undefined) this.#backoff.lost(failure);
    return true;
  }

  /** Records why the connection in use is failing (it is still the one in use). */
  failing(failure: PublisherUnavailableError): void {
    this.#backoff.lost(failure);
  }

  /** For `close()`: the connection in use or being opened, forgotten; the next publish opens another. */
  async take(): Promise<C | undefined> {
    const connection = (await this.#connecting?.catch(() => undefined)) ?? this.#current;
    this.#current = undefined;
    return connection;
  }

  private async open(): Promise<C> {
    let connection: C;
    try {
      connection = await this.calls.open();
    } catch (error) {
      const failure = this.calls.failure?.(error) ?? couldNotConnect(this.calls.what, error);
      const delayMs = this.#backoff.failed(failure);
      const refusal = this.calls.refusal?.(failure, error);
      if (refusal !== undefined) {
        // Retrying cannot help until someone fixes the configuration: say so loudly, every time.
        this.calls.logger.error(`${refusal} Next attempt in ${delayMs} ms.`);
      }
      throw failure;
    }
    this.#current = connection;
    this.#backoff.succeeded();
    this.calls.logger.log(`Connected to ${this.calls.what}`);
    return connection;
  }
}
