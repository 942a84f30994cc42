import { describeError } from '../internal/describe-error';
import { OutboxMessages } from '../outbox.messages';
import { OutboxError } from './outbox.error';

/**
 * A message was not delivered within its type's `maxAgeMs` (its policy's message expiry): it is
 * dead-lettered, unpublished when it expired before its attempt, with this as its last error.
 */
export class OutboxMessageExpiredError extends OutboxError {
  /** Always `'expired'`: the reason the dead letter records. */
  readonly reason = 'expired';

  constructor(
    /** The policy's name: the event type it was given for. */
    readonly policy: string,
    readonly maxAgeMs: number,
    /** The message's age when it was judged (ms since enqueue). */
    readonly ageMs: number,
    /** What the last attempt failed with, when the expiry cut a retry short. */
    readonly lastFailure?: unknown,
  ) {
    super(
      OutboxMessages.messageExpired(
        policy,
        maxAgeMs,
        ageMs,
        lastFailure === undefined ? undefined : describeError(lastFailure),
      ),
    );
  }
}
