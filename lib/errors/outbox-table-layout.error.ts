import { OutboxError } from './outbox.error';

/**
 * The outbox table is laid out otherwise than the options ask: partitioned where a plain table
 * is expected (or the reverse, or by another interval), or a conversion that is not done
 * automatically. The message says which command or SQL fixes it.
 */
export class OutboxTableLayoutError extends OutboxError {
  constructor(
    message: string,
    /** The quoted, schema-qualified table. */
    readonly table: string,
    /** The layout the options ask for: `plain`, or the partition interval. */
    readonly expected: string,
    /** The layout found: `plain`, `missing`, the interval, or `unrecognised`. */
    readonly found: string,
  ) {
    super(message);
  }
}
