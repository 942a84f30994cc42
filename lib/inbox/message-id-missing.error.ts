import { OutboxError } from '../errors/outbox.error';
import { InboxMessages } from './inbox.messages';

/** Where a message id was looked for. */
export type MessageIdSource =
  'amqp' | 'kafka' | 'jetstream' | 'redis-stream' | 'rpc-context' | 'sqs';

/**
 * Thrown by the message id extractors when a message has no usable id, so it cannot be
 * deduplicated. Decide explicitly what such a message means to your consumer (reject it,
 * dead-letter it, or handle it without the inbox): the inbox never guesses an id.
 */
export class MessageIdMissingError extends OutboxError {
  constructor(
    /** The kind of message that had no id. */
    readonly source: MessageIdSource,
    /** Where the id was looked for, e.g. `header x-outbox-message-id, property messageId`. */
    readonly lookedAt: string,
  ) {
    super(InboxMessages.messageIdMissing(source, lookedAt));
  }
}
