import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';

/**
 * Which delivered messages a re-drive sends again. Every given field must match; at least one
 * must be given (a re-drive of every delivered message is never what a missing parameter
 * meant). Times are compared with the rows' times as the database stored them (UTC).
 */
export interface OutboxRedriveFilter {
  readonly topic?: string;
  /** The message key; `null` matches messages without a key. */
  readonly key?: string | null;
  /** The event type (`event_type`). */
  readonly type?: string;
  /** Enqueued at or after this instant. */
  readonly createdAfter?: Date;
  /** Enqueued strictly before this instant. */
  readonly createdBefore?: Date;
  /** Delivered at or after this instant. */
  readonly deliveredAfter?: Date;
  /** Delivered strictly before this instant. */
  readonly deliveredBefore?: Date;
}

/** One delivered message a re-drive would send again. */
export interface OutboxRedriveCandidate {
  /** `archive` for a row the cleaner moved to `<table>_archive`. */
  readonly source: 'outbox' | 'archive';
  /** Its row id in the outbox (the queue order re-drives keep). */
  readonly id: string;
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  readonly createdAt: Date;
  readonly deliveredAt: Date | null;
}

/** What `previewRedrive()` found: the exact count, and the first messages in queue order. */
export interface OutboxRedrivePreview {
  readonly count: number;
  readonly sample: readonly OutboxRedriveCandidate[];
  /** Whether `<table>_archive` was searched too (the admin's `cleaner.archive`). */
  readonly includesArchive: boolean;
  /**
   * The confirmation of exactly these messages (their count and a digest of their ids, such as
   * `'2-9f3c…'`): pass it as `redrive()`'s `expected`, which then sends these messages or
   * nothing. Null when none match, or more than `maxCount` (no re-drive could send them).
   */
  readonly confirmation: string | null;
  /** The most messages the re-drive may send, as given (see `OutboxRedriveOptions.maxCount`). */
  readonly maxCount: number;
}

export interface OutboxRedrivePreviewOptions {
  /** Messages in the sample, 1 to 100. @default 20 */
  readonly sampleSize?: number;
  /**
   * The `maxCount` the re-drive will be given: past it the preview counts, but gives no
   * confirmation. @default 10000
   */
  readonly maxCount?: number;
}

export interface OutboxRedriveOptions {
  /** Who re-drives, as the audit log names them (1 to 200 characters). */
  readonly actor: string;
  /** Why, for the audit log (1 to 500 characters). */
  readonly reason: string;
  /** Send the copies to this topic instead of each message's own. @default each message's topic */
  readonly destination?: string;
  /**
   * At most this many copies due per second: copy i is due i / rate seconds after it is
   * written (delayed delivery), so the dispatcher sends them at its normal pace and order.
   * @default all due at once
   */
  readonly ratePerSecond?: number;
  /**
   * The `confirmation` of the preview the operator confirmed: when the filter does not select
   * exactly those messages any more (one was cleaned, another delivered, even with the same
   * count), nothing is sent and `OutboxRedriveRefusedError` says so (`'selection-changed'`).
   * @default not checked: whatever the filter selects when the re-drive reads it
   */
  readonly expected?: string;
  /** The most messages one re-drive may send, 1 to 1 000 000. @default 10000 */
  readonly maxCount?: number;
  /**
   * The audit table the re-drive is recorded in, in the outbox's database; it must exist
   * (`ensureOutboxAuditTable`). @default the admin's `auditTable`, else `outbox_console_audit`
   */
  readonly auditTable?: OutboxAuditTableOptions;
}

/** What `redrive()` did. */
export interface OutboxRedriveReport {
  /** The re-drive's id: each copy carries it in `x-outbox-redrive-id`, the audit log too. */
  readonly redriveId: string;
  /** Copies written (new messages, new ids, each with `x-outbox-redrive-of`). */
  readonly count: number;
  /** The topic the copies go to; null when each goes to its message's own. */
  readonly destination: string | null;
  readonly ratePerSecond: number | null;
}

/** One re-drive as the audit log recorded it. */
export interface OutboxRedriveRecord {
  readonly redriveId: string;
  /** When it was recorded (database clock). */
  readonly at: Date;
  readonly actor: string;
  readonly reason: string;
  /** The filter as given, times as ISO text. */
  readonly filter: Readonly<Record<string, string | null>>;
  readonly destination: string | null;
  readonly ratePerSecond: number | null;
  readonly count: number;
}

/** One entry of the audit log (the console's actions and the re-drives). */
export interface OutboxAuditEntry {
  readonly at: Date;
  readonly actor: string;
  /** `retry`, `purge` (the console's) or `redrive`. */
  readonly action: string;
  /** `selection`, `filter`. */
  readonly scope: string;
  /** What the action named, as text (a re-drive's: JSON with its id, reason and filter). */
  readonly target: string;
  readonly confirmed: number;
  readonly affected: number;
}
