import { OutboxError } from '../errors/outbox.error';
import { InboxMessages } from './inbox.messages';

/**
 * A sequence number or key that cannot be one (not a positive integer, an empty key), or a
 * message that carries a number without its key.
 */
export class InvalidSequenceError extends OutboxError {
  constructor(
    readonly problem: string,
    fix?: string,
  ) {
    super(InboxMessages.invalidSequence(problem, fix));
  }
}
