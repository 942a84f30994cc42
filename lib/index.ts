// Public API of nestjs-outbox: what an app writes against (the module, the service,
// @OutboxEvent, the handlers, the options, the message and record types, the headers, the
// publisher port, the errors, the workers and the admin door), and nothing a user cannot use:
// the store port, the module's injection tokens and the option resolver stay internal. The rest
// is in subpaths (entry-points.json): the tables in nestjs-outbox/schema, what OutboxAdmin and the
// workers answer in nestjs-outbox/admin, @nestjs-cls/transactional in nestjs-outbox/cls, each
// publisher and connection in its own, so the core loads none of their client libraries.
export { OutboxModule } from './outbox.module';
export { getOutboxToken, type OutboxProviderType } from './module/outbox.tokens';
export { InjectOutbox, InjectOutboxAdmin } from './module/inject-outbox.decorator';
export { OutboxService, type EnqueueReport, type OutboxInput } from './outbox.service';
export { OutboxAdmin } from './module/admin/outbox.admin';
export { REDRIVE_ID_HEADER, REDRIVE_OF_HEADER } from './module/admin/outbox-redrive';
export type {
  OutboxModuleOptions,
  OutboxModuleExtras,
  OutboxDispatcherOptions,
  OutboxRetryOptions,
  OutboxOrderingOptions,
  OutboxCleanerOptions,
  OutboxDelivery,
  OutboxUnlockerOptions,
  OutboxPartitioningOptions,
  OutboxEventClass,
  OutboxTenantsOptions,
  OutboxErasureOptions,
} from './options/outbox.options';
export type { OutboxPersonalData, OutboxEventPersonalData } from './message/erasure/personal-data';
export type { OutboxKeyWrapper } from './message/erasure/key-wrapper';
export type { OutboxEventPolicy, OutboxEventRetryPolicy } from './message/outbox-event-policy';
export {
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_SEQUENCE,
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_TENANT,
  OUTBOX_HEADER_REDRIVE_DELAY,
} from './outbox.constants';

export {
  OutboxEvent,
  getOutboxEventMetadata,
  type OutboxEventMetadata,
} from './message/outbox-event.decorator';

export type {
  OutboxMessage,
  OutboxEventOptions,
  OutboxHeaders,
  OutboxJson,
  OutboxSchedule,
  EnqueueOptions,
  OutboxBrokerAttributes,
} from './message/outbox-message.interface';
export type {
  OutboxRecord,
  JsonOutboxRecord,
  BinaryOutboxRecord,
} from './message/outbox-record.interface';
export type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from './publishers/outbox-publisher.interface';
export { pastPublishDeadline } from './publishers/publish-deadline';
export type {
  OutboxObserver,
  OutboxBatchReport,
  OutboxPublishedRecord,
} from './observers/outbox-observer.interface';
export { combineObservers } from './observers/combine-observers';

// In-process delivery: @OnOutboxMessage() handlers on the app's providers (no optional peer).
export {
  OnOutboxMessage,
  type OutboxHandlerMethod,
} from './publishers/local/on-outbox-message.decorator';
export type {
  OnOutboxMessageOptions,
  OutboxHandlerMessage,
} from './publishers/local/outbox-handler-message.interface';
export { OutboxHandlersModule } from './publishers/local/outbox-handlers.module';
export type { OutboxHandlersOptions } from './publishers/local/outbox-handlers.options';
export { LocalPublisher } from './publishers/local/local.publisher';
export {
  routePublishers,
  type PublisherRoute,
  type RoutePublishersOptions,
} from './publishers/routing/route-publishers';
export type { AmbientTransaction } from './options/ambient-transaction.interface';

export { OutboxError } from './errors/outbox.error';
export { OutboxOptionsError } from './errors/outbox-options.error';
export { OutboxExternalDeliveryError } from './errors/outbox-external-delivery.error';
export { OutboxTransactionRequiredError } from './errors/outbox-transaction-required.error';
export { OutboxTableMissingError } from './errors/outbox-table-missing.error';
export { OutboxAdminInputError } from './errors/outbox-admin-input.error';
export { OutboxRedriveRefusedError } from './errors/outbox-redrive-refused.error';
export {
  OutboxInvalidMessageError,
  type OutboxInvalidMessageReason,
} from './errors/outbox-invalid-message.error';
export { PermanentPublishError } from './errors/permanent-publish.error';
export { OutboxHandlerMissingError } from './errors/outbox-handler-missing.error';
export { OutboxHandlerBusyError } from './errors/outbox-handler-busy.error';
export { PublisherUnavailableError } from './errors/publisher-unavailable.error';
export { PublishTimeoutError } from './errors/publish-timeout.error';
export { OutboxMessageExpiredError } from './errors/outbox-message-expired.error';
export {
  OnOutboxDeadLetter,
  type OnOutboxDeadLetterOptions,
  type OutboxDeadLetterMethod,
  type OutboxFallbackResult,
} from './dispatch/fallback/on-outbox-dead-letter.decorator';
export { OutboxDatabaseTimeoutError } from './errors/outbox-database-timeout.error';
export { OutboxBridgeError, type OutboxBridgeErrorReason } from './errors/outbox-bridge.error';

export { OutboxDispatcher } from './dispatch/outbox.dispatcher';
export { OutboxUnlocker } from './workers/outbox.unlocker';
export { OutboxCleaner } from './workers/outbox.cleaner';
export { OutboxPartitionMaintainer } from './workers/outbox.partition-maintainer';
