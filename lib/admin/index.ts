/**
 * `nestjs-outbox/admin`: what `OutboxAdmin` (exported from the root, the admin door) takes and
 * answers: the filters, pages and views of messages, dead letters, blocked keys, stuck leases
 * and delivery partitions, the re-drive's preview, options and report, and the audit table's
 * store; and what the workers answer an operator (`OutboxDispatcher.status()`,
 * `OutboxCleaner.runOnce()`). No optional peer. See docs/operations.md.
 */
export { OUTBOX_ADMIN_MAX_LIMIT, type OutboxAdminOptions } from '../module/admin/outbox.admin';
export type {
  OutboxMessageStatus,
  OutboxBlockedKey,
  OutboxCounts,
  OutboxDeadLetterFilter,
  OutboxDeadLetterSelection,
  OutboxRetryReport,
  OutboxWhy,
  OutboxWhyHead,
  OutboxMessageDetail,
  OutboxAttempt,
  OutboxAttemptOutcome,
  OutboxMessageFilter,
  OutboxMessageSummary,
  OutboxPage,
  OutboxPageRequest,
  OutboxStatusCounts,
  OutboxStuckLease,
  OutboxStuckLeaseQuery,
  OutboxTopicActivity,
  OutboxTopicCounts,
  OutboxPolicyView,
  OutboxDeliveryPartitions,
  OutboxDeliveryPartitionsInUse,
  OutboxDeliveryPartitionsNotInUse,
  OutboxDeliveryPartitionDispatcher,
  OutboxDeliveryPartition,
  OutboxDeliveryPartitionMove,
} from '../module/admin/outbox-admin.interfaces';
export type {
  OutboxAuditEntry,
  OutboxRedriveCandidate,
  OutboxRedriveFilter,
  OutboxRedriveOptions,
  OutboxRedrivePreview,
  OutboxRedrivePreviewOptions,
  OutboxRedriveRecord,
  OutboxRedriveReport,
} from '../module/admin/outbox-redrive.interfaces';
export type {
  OutboxEraseOptions,
  OutboxErasureReport,
} from '../module/admin/outbox-erasure.interfaces';
export { OutboxAuditStore } from '../module/admin/outbox-audit.store';
export {
  OutboxGapRepairer,
  GAP_REPAIR_FOR_HEADER,
  GAP_REPAIR_SCOPE,
} from '../module/admin/outbox-gap-repair';
export type {
  GapRepairAnswer,
  GapRepairClient,
  GapRepairRequest,
  OutboxGapRepairOptions,
} from '../module/admin/gap-repair.interfaces';
export type { OutboxStats, RequeueReport } from '../store/ports/outbox-store.port';
export type { OutboxPartitionOwner } from '../store/ports/outbox-store.port';
export type { OutboxDispatcherStatus } from '../dispatch/outbox.dispatcher';
export type { OutboxCleanReport } from '../workers/outbox.cleaner';
