import { OutboxError } from './outbox.error';

/**
 * The message ids of the outbox table cannot be used or converted as they are stored: a
 * `message_id` column that is neither CHAR(36) nor BINARY(16) on MySQL/MariaDB, tables left in
 * two layouts by an interrupted conversion, or rows whose id is not a UUID. The message says
 * what to do.
 */
export class OutboxMessageIdLayoutError extends OutboxError {
  constructor(
    message: string,
    /** The quoted, schema-qualified table. */
    readonly table: string,
    /** What its message_id column is: `varchar(64)`, `CHAR(36)`, `mixed`, `missing`. */
    readonly found: string,
  ) {
    super(message);
  }
}
