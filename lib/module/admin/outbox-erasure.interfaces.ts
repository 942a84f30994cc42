import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';

/** Who erases and why, for the audit log (`OutboxAdmin.erase`). */
export interface OutboxEraseOptions {
  /** Who asked (an operator, a ticket's requester): 1 to 200 characters. */
  readonly actor: string;
  /** Why (the request's reference): 1 to 500 characters. */
  readonly reason: string;
  /** The audit table to record the erasure in. @default the admin's `auditTable` */
  readonly auditTable?: OutboxAuditTableOptions;
}

/** What `OutboxAdmin.erase` did. */
export interface OutboxErasureReport {
  /** False when the subject had no live data key (never sealed for, or erased already). */
  readonly erased: boolean;
  /** The destroyed data key's id (`x-outbox-subject-key` of its messages); null when none. */
  readonly keyId: string | null;
  /** The erasure notices enqueued: one per (topic, key) its messages were written for. */
  readonly notices: number;
}
