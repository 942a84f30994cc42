import { OutboxError } from './outbox.error';

/**
 * Input that `OutboxAdmin` refuses: a filter field that is unknown, present but `undefined`, or
 * of the wrong type, a bulk retry or purge that names no field (say `{ all: true }` to mean
 * every dead letter), an id that is not a UUID, a bad cursor or page size. Nothing was changed.
 * A controller maps it to HTTP 400 (see the README's admin controller).
 */
export class OutboxAdminInputError extends OutboxError {
  /** Stable, for mapping without `instanceof` across package copies. */
  readonly code = 'OUTBOX_ADMIN_INVALID_INPUT';

  constructor(
    message: string,
    /** The field or argument at fault, e.g. `filter.topic`. */
    readonly field: string,
  ) {
    super(message);
  }
}
