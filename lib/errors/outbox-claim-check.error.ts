import { OutboxError } from './outbox.error';

/**
 * The claim check could not write or read a payload sent by reference: its store refused or
 * did not answer, or the payload is gone (docs/claim-check.md). `location` is where it was to be.
 */
export class OutboxClaimCheckError extends OutboxError {
  constructor(
    message: string,
    readonly location: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
