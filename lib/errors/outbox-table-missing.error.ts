import { inspect } from 'node:util';
import { OutboxError } from './outbox.error';

/**
 * Thrown at bootstrap when the outbox table cannot be read: it does not exist, or it lacks
 * columns this version uses. The message carries the database's answer and the fix; `cause`
 * keeps the driver's error whole.
 */
export class OutboxTableMissingError extends OutboxError {
  constructor(
    message: string,
    /** The quoted, schema-qualified table that was probed. */
    readonly table: string,
    options: { cause: unknown },
    /**
     * The schema step (`outboxMigrations()`, `outbox schema status`) whose part is missing, when
     * the table is there but behind: 4 for the binary-payload columns. @default undefined
     */
    readonly missingStep?: number,
  ) {
    super(message, options);
  }

  /**
   * One line when printed. Nest logs a bootstrap error with `util.inspect`, which would follow
   * the message with the driver's error from `cause`: its stack, then the same stack again in
   * its `driverError`, and every field of both, some 40 lines that add nothing to the message.
   */
  [inspect.custom](): string {
    return `${this.name}: ${this.message}`;
  }
}
