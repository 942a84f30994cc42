import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { describeError } from '../../internal/describe-error';
import type { OutboxPublisher } from '../../publishers/outbox-publisher.interface';
import type { DispatcherLog } from '../dispatcher-log';

/**
 * Asks the publisher once, in the background, whether its broker can be reached, so that a
 * wrong URL or refused credentials show in the startup log instead of at the first message.
 * It never fails or holds up the start: the outbox is there for a broker that is down, and
 * messages wait for it.
 */
export class StartupCheck {
  private readonly abort = new AbortController();
  private readonly done: Promise<void>;

  constructor(
    publisher: OutboxPublisher,
    timeoutMs: number,
    stopping: () => boolean,
    log: DispatcherLog,
  ) {
    const ping = publisher.ping?.bind(publisher);
    if (ping === undefined) {
      this.done = Promise.resolve();
      return;
    }
    const timer = setTimeout(() => this.abort.abort(new PublishTimeoutError(timeoutMs)), timeoutMs);
    timer.unref();
    this.done = Promise.resolve()
      .then(() => ping(this.abort.signal))
      .catch((error: unknown) => {
        if (stopping()) return;
        log.warn(
          `The publisher cannot reach its broker at startup (${log.label}): ${describeError(error)}; messages wait in the outbox and are published once it can`,
        );
      })
      .finally(() => clearTimeout(timer));
  }

  /** Cuts the question short (at shutdown) and waits for it to end. */
  async cancel(): Promise<void> {
    this.abort.abort(new PublisherUnavailableError('dispatcher shutting down'));
    await this.done;
  }
}
