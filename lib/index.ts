// Public API of nestjs-outbox. Native Kafka and RabbitMQ publishers and the Nest microservices
// publisher live in subpath exports so the core loads none of their client libraries.
export { OutboxModule } from './outbox.module';
export { getOutboxToken, type OutboxProviderType } from './outbox.tokens';
export { InjectOutbox, InjectOutboxAdmin } from './decorators/inject-outbox.decorator';
export { OutboxService, type EnqueueReport, type OutboxInput } from './outbox.service';
export { OutboxAdmin, OUTBOX_ADMIN_MAX_LIMIT, type OutboxAdminOptions } from './admin/outbox.admin';
export type {
  OutboxBlockedKey,
  OutboxCounts,
  OutboxDeadLetterFilter,
  OutboxDeadLetterSelection,
  OutboxWhy,
  OutboxWhyHead,
  OutboxMessageDetail,
  OutboxMessageFilter,
  OutboxMessageStatus,
  OutboxMessageSummary,
  OutboxPage,
  OutboxPageRequest,
  OutboxStatusCounts,
  OutboxStuckLease,
  OutboxStuckLeaseQuery,
  OutboxTopicCounts,
} from './admin/outbox-admin.interfaces';
export type {
  OutboxModuleOptions,
  OutboxModuleExtras,
  OutboxDispatcherOptions,
  OutboxRetryOptions,
  OutboxOrderingOptions,
  OutboxCleanerOptions,
  OutboxUnlockerOptions,
} from './outbox.options';
export { resolveOutboxOptions, type ResolvedOutboxOptions } from './resolve-outbox-options';
export {
  OUTBOX_OPTIONS,
  OUTBOX_STORE,
  OUTBOX_DATA_SOURCE,
  OUTBOX_EVENT_METADATA,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OUTBOX_HEADER_KEY,
} from './outbox.constants';
export { OUTBOX_MODULE_OPTIONS } from './outbox.module-definition';

export {
  OutboxEvent,
  getOutboxEventMetadata,
  type OutboxEventMetadata,
} from './decorators/outbox-event.decorator';

export type {
  OutboxMessage,
  OutboxEventOptions,
  OutboxHeaders,
  OutboxJson,
  OutboxSchedule,
  EnqueueOptions,
} from './interfaces/outbox-message.interface';
export type { OutboxRecord } from './interfaces/outbox-record.interface';
export type { OutboxPublisher, PublishOutcome } from './interfaces/outbox-publisher.interface';
export type {
  OutboxStore,
  OutboxStats,
  NewOutboxRow,
  ClaimOptions,
  ClaimedBatch,
  ClaimedRecord,
  Settlement,
  OutboxQueuePolicy,
  RequeueReport,
} from './interfaces/outbox-store.interface';
export type { OutboxObserver, OutboxBatchReport } from './interfaces/outbox-observer.interface';
export { combineObservers } from './observers/combine-observers';
export type { AmbientTransaction } from './interfaces/ambient-transaction.interface';

export { OutboxError } from './errors/outbox.error';
export { OutboxOptionsError } from './errors/outbox-options.error';
export { OutboxTransactionRequiredError } from './errors/outbox-transaction-required.error';
export { OutboxTableMissingError } from './errors/outbox-table-missing.error';
export { OutboxAdminInputError } from './errors/outbox-admin-input.error';
export {
  OutboxInvalidMessageError,
  type OutboxInvalidMessageReason,
} from './errors/outbox-invalid-message.error';
export { PermanentPublishError } from './errors/permanent-publish.error';
export { PublisherUnavailableError } from './errors/publisher-unavailable.error';
export { PublishTimeoutError } from './errors/publish-timeout.error';
export { OutboxDatabaseTimeoutError } from './errors/outbox-database-timeout.error';

export { createOutboxMigration } from './store/outbox-table.migration';
export {
  ensureOutboxTable,
  outboxTableDdl,
  outboxDialectOf,
  type OutboxDialect,
  type OutboxTableOptions,
} from './store/outbox-dialect';

export { OutboxDispatcher, type OutboxDispatcherStatus } from './workers/outbox.dispatcher';
export { OutboxUnlocker } from './workers/outbox.unlocker';
export { OutboxCleaner, type OutboxCleanReport } from './workers/outbox.cleaner';
export { retryDelay, type BackoffPolicy } from './workers/retry-backoff';

export {
  fromClsTransactionHost,
  type ClsTransactionHostLike,
} from './transactions/cls-transaction.adapter';
