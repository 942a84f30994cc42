import { OutboxMessages } from '../outbox.messages';
import { OutboxError } from './outbox.error';

/** Thrown by `enqueue()` when no open transaction is available to write the message in. */
export class OutboxTransactionRequiredError extends OutboxError {
  /** @param message what to do instead, for the caller's library (TypeORM's by default) */
  constructor(message: string = OutboxMessages.transactionRequired()) {
    super(message);
  }
}
