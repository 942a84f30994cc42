import { OutboxError } from './outbox.error';

/** Thrown at bootstrap when an `OutboxModule` option is invalid. */
export class OutboxOptionsError extends OutboxError {
  constructor(
    message: string,
    /** Dotted path of the offending option, e.g. `dispatcher.batchSize`. */
    readonly option: string,
  ) {
    super(message);
  }
}
