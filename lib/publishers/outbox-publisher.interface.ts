import type { OutboxInvalidMessageReason } from '../errors/outbox-invalid-message.error';
import type { OutboxBrokerAttributes, OutboxHeaders } from '../message/outbox-message.interface';
import type { OutboxRecord } from '../message/outbox-record.interface';

/**
 * A message as `enqueue()` is about to write it, for a publisher's `checkEnqueue`: what the
 * publisher will be handed later, less what only the table gives (row id, attempts, time).
 */
export interface OutboxMessageDraft {
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  /** The message's headers with the `headersProvider` ones. */
  readonly headers: OutboxHeaders;
  /** The JSON text of a JSON message, or the bytes of a binary one. */
  readonly payload: string | Buffer;
  /** The content type of a binary message; absent for JSON. */
  readonly contentType?: string;
  readonly attributes?: OutboxBrokerAttributes;
}

/** Why a publisher could never deliver a message, given at enqueue. */
export interface PublisherRefusal {
  /** The `OutboxInvalidMessageError.reason` the enqueue fails with. */
  readonly reason: OutboxInvalidMessageReason;
  /** What is wrong and how to fix it, as a sentence. */
  readonly problem: string;
}

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
  /**
   * Checks at enqueue, before anything is written, a message this publisher could never deliver
   * (over its broker's size limit, say): returns why, or undefined. `enqueue()` then fails with
   * `OutboxInvalidMessageError` and the business transaction rolls back, instead of the message
   * being dead-lettered later. Synchronous and cheap: it runs for every message enqueued.
   */
  checkEnqueue?(message: OutboxMessageDraft): PublisherRefusal | undefined;
}
