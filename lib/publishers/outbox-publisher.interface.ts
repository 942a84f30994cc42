import type { OutboxRecord } from '../message/outbox-record.interface';

/** The broker's answer for one message. */
export type PublishOutcome =
  { readonly ok: true } | { readonly ok: false; readonly error: unknown };

/**
 * Sends claimed messages to a broker. `publish` resolves to one outcome per message, in input
 * order, and counts a message as published only once the broker acknowledged it.
 *
 * Return `{ ok: false, error: new PermanentPublishError(...) }` for a message that can never be
 * delivered; throw `PublisherUnavailableError` (or any error) when the broker cannot be reached
 * at all: the batch is then released without burning attempts.
 */
export interface OutboxPublisher {
  publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]>;
  /** Called once when the module shuts down. */
  close?(): Promise<void>;
  /**
   * Checks, without publishing anything, that the broker can be reached now (for health checks):
   * resolves when it can, rejects with the reason when it cannot. Should answer within a few
   * seconds and give up when `signal` aborts.
   */
  ping?(signal: AbortSignal): Promise<void>;
}
