import { OutboxError } from './outbox.error';

/**
 * A dispatcher database call (claim, park, settle) did not answer within `dbTimeoutMs`, or one
 * that did not is still outstanding. The dispatcher logs it, pauses and tries again later.
 */
export class OutboxDatabaseTimeoutError extends OutboxError {
  constructor(
    readonly operation: string,
    readonly timeoutMs: number,
    message = `The outbox ${operation} got no database answer within ${timeoutMs} ms`,
  ) {
    super(message);
  }
}
