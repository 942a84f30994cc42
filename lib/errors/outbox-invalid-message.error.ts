import { OutboxError } from './outbox.error';

/** Why a message was rejected by `enqueue()`. */
export type OutboxInvalidMessageReason =
  | 'missing-metadata'
  | 'not-serialisable'
  | 'payload-too-large'
  | 'invalid-topic'
  | 'invalid-type'
  | 'invalid-key'
  | 'invalid-header'
  | 'reserved-header'
  | 'invalid-schedule'
  | 'invalid-message-id'
  | 'invalid-content-type'
  | 'invalid-attributes'
  | 'invalid-tenant'
  | 'invalid-personal';

/**
 * Thrown by `enqueue()` for a message that cannot be stored. Nothing of the call is written, and
 * the error propagates into the caller's transaction so the business write rolls back too.
 */
export class OutboxInvalidMessageError extends OutboxError {
  constructor(
    message: string,
    readonly reason: OutboxInvalidMessageReason,
    /** Position of the offending message in the enqueued batch. */
    readonly index: number,
    options?: { cause?: unknown },
  ) {
    super(index > 0 ? `${message} (message #${index} of the batch)` : message, options);
  }
}
