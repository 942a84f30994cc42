import type { OutboxRecord } from '../message/outbox-record.interface';

/**
 * The broker's answer for one message. A failure with `sent: false` says the message was never
 * handed to the broker (the publish stopped before writing it, e.g. on the publisher's own
 * timeout while earlier messages waited for their confirms): the dispatcher hands it back
 * without counting an attempt. Without it, a failure counts an attempt, since the broker may
 * have the message.
 */
export type PublishOutcome =
  { readonly ok: true } | { readonly ok: false; readonly error: unknown; readonly sent?: false };

/**
 * Sends claimed messages to a broker. `publish` resolves to one outcome per message, in input
 * order, and counts a message as published only once the broker acknowledged it.
 *
 * Return `{ ok: false, error: new PermanentPublishError(...) }` for a message that can never be
 * delivered; throw `PublisherUnavailableError` (or any error) when the broker cannot be reached
 * at all: the batch is then released without burning attempts. Return `{ ok: false, error,
 * sent: false }` for a message the publish did not get to write.
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
