import { OutboxError } from './outbox.error';

/**
 * A re-drive `OutboxAdmin.redrive()` refused before sending anything: the selection's count is
 * not the `expectedCount` the operator confirmed (`count-changed`), it is above `maxCount`
 * (`too-many`), it selects nothing (`empty`), or the audit table it must be recorded in cannot
 * be written (`no-audit-table`). Nothing was inserted.
 */
export class OutboxRedriveRefusedError extends OutboxError {
  /** Stable, for mapping without `instanceof` across package copies. */
  readonly code = 'OUTBOX_REDRIVE_REFUSED';

  constructor(
    message: string,
    readonly reason: 'count-changed' | 'too-many' | 'empty' | 'no-audit-table',
    /** The count the caller expected (or the limit), when there is one. */
    readonly expected: number | null,
    /** The count the selection has now. */
    readonly actual: number | null,
  ) {
    super(message);
  }
}
