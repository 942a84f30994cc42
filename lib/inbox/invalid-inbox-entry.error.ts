import { OutboxError } from '../errors/outbox.error';
import { InboxMessages } from './inbox.messages';

/** Thrown by `handleOnce()` for an unusable message id or consumer name; nothing is written. */
export class InvalidInboxEntryError extends OutboxError {
  constructor(
    /** The offending field of the entry. */
    readonly field: 'messageId' | 'consumer',
    /** What is wrong with it. */
    readonly problem: string,
  ) {
    super(InboxMessages.invalidEntry(field, problem));
  }
}
