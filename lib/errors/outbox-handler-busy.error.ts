import { OutboxError } from './outbox.error';

/**
 * A message was not handed to its in-process handlers because a handler call of its key (or of
 * the message itself) is still running past its publish: it goes back unsent, with no attempt
 * counted, until that call returns.
 */
export class OutboxHandlerBusyError extends OutboxError {
  constructor(
    message: string,
    readonly runningMessageId: string,
  ) {
    super(message);
  }
}
