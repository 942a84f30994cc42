import { OutboxError } from './outbox.error';

/** Why an event-bus bridge refused an event or failed a transaction. */
export type OutboxBridgeErrorReason =
  /** The transaction's callback ended while a bridge write was still running (not awaited). */
  | 'unsettled-write'
  /** A bridge write failed in the transaction, so it may not commit without its message. */
  | 'failed-write'
  /** The transaction's adapter is not wrapped with `guardOutboxWrites()`. */
  | 'unguarded-transaction'
  /** `EventEmitter2.emit()` (synchronous) carried an outbox event inside a transaction. */
  | 'synchronous-emit';

/**
 * Thrown by the `@nestjs/cqrs` and `@nestjs/event-emitter` bridges, and by a transaction under
 * `guardOutboxWrites()` that would otherwise commit without a message it published.
 */
export class OutboxBridgeError extends OutboxError {
  constructor(
    message: string,
    readonly reason: OutboxBridgeErrorReason,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
