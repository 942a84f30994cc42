import { OutboxError } from './outbox.error';

/**
 * Thrown when the dispatcher is asked to deliver (`runOnce()`, `drain()`) in an instance whose
 * `delivery` is `'external'`: an engine reading the database's log delivers its messages, and a
 * second delivery path would publish every message twice.
 */
export class OutboxExternalDeliveryError extends OutboxError {
  constructor(
    message: string,
    /** The instance's name. */
    readonly outbox: string,
  ) {
    super(message);
  }
}
