import { OutboxError } from '../errors/outbox.error';
import { InboxMessages } from './inbox.messages';

/**
 * A message arrived with an earlier one of its key not seen yet, and the gap policy refused it
 * (`onGap: 'reject'`): nothing was recorded; let the broker redeliver it.
 */
export class SequenceGapError extends OutboxError {
  constructor(
    readonly key: string,
    /** The number the key expected next. */
    readonly expected: number,
    /** The number the message carries. */
    readonly received: number,
  ) {
    super(InboxMessages.sequenceGap(key, expected, received));
  }
}
