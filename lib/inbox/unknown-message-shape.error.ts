import { OutboxError } from '../errors/outbox.error';
import { InboxMessages } from './inbox.messages';

/**
 * `sequenceOf()` was given something that is no message of a client library it knows (a body,
 * a string, an object of another library), so it cannot tell whether the message has a number:
 * the gap guard would be off without a word. Pass the message as the client hands it over.
 */
export class UnknownMessageShapeError extends OutboxError {
  constructor(
    /** What was given, e.g. `a Buffer` or `an instance of Foo`. */
    readonly received: string,
    /** The shapes it reads. */
    readonly reads: readonly string[],
  ) {
    super(InboxMessages.unknownMessageShape('sequenceOf()', received, reads));
  }
}
