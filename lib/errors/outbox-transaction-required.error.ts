import { OutboxMessages } from '../outbox.messages';
import { OutboxError } from './outbox.error';

/** Thrown by `enqueue()` when no open transaction is available to write the message in. */
export class OutboxTransactionRequiredError extends OutboxError {
  constructor() {
    super(OutboxMessages.transactionRequired());
  }
}
