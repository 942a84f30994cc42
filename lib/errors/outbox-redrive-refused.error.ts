import { OutboxError } from './outbox.error';

/**
 * A re-drive `OutboxAdmin.redrive()` refused before sending anything: the filter no longer
 * selects the messages of the preview the operator confirmed (`selection-changed`: the counts
 * in `expected` and `actual` may be equal when one message took another's place), it is above `maxCount`
 * (`too-many`), it selects nothing (`empty`), or the audit table it must be recorded in cannot
 * be written (`no-audit-table`). Nothing was inserted.
 */
export class OutboxRedriveRefusedError extends OutboxError {
  /** Stable, for mapping without `instanceof` across package copies. */
  readonly code = 'OUTBOX_REDRIVE_REFUSED';

  constructor(
    message: string,
    readonly reason: 'selection-changed' | 'too-many' | 'empty' | 'no-audit-table',
    /** The count the caller expected (or the limit), when there is one. */
    readonly expected: number | null,
    /** The count the selection has now. */
    readonly actual: number | null,
  ) {
    super(message);
  }
}
