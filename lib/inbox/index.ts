// nestjs-outbox/inbox: exactly-once handling on the consumer side, by recording each message id
// in the consumer's own transaction. Needs no broker client; InboxModule is optional.
export { Inbox } from './inbox';
export { InboxService } from './inbox.service';
export { InboxModule } from './inbox.module';
export { INBOX_MODULE_OPTIONS } from './inbox.module-definition';
export type { InboxModuleOptions, InboxModuleExtras } from './inbox.options';
export type {
  InboxEntry,
  InboxHandler,
  InboxGapRepairOptions,
  InboxHandlerContext,
  InboxOptions,
  InboxSequenceOptions,
  InboxOutcome,
  InboxPurgeOptions,
} from './inbox.interfaces';
export {
  INBOX_DEFAULT_TABLE,
  INBOX_MAX_CONSUMER_BYTES,
  INBOX_MAX_MESSAGE_ID_BYTES,
} from './inbox.constants';
export {
  createInboxTable,
  ensureInboxTable,
  inboxTableDdl,
  inboxTableDropDdl,
} from './inbox-table';
export { createInboxMigration } from './inbox-table.migration';
export {
  messageIdFromAmqp,
  messageIdFromKafka,
  messageIdFromRedisStream,
  messageIdFromRpcContext,
  messageIdFromJetStream,
  type AmqpMessageLike,
  type JetStreamMessageLike,
  type KafkaEachMessageLike,
  type KafkaHeaderValue,
  type KafkaMessageLike,
  type NatsHeadersLike,
  type RedisStreamEntryLike,
  type RedisStreamValue,
  type RpcContextLike,
} from './message-id.extractors';
export {
  messageIdFromSqs,
  type SqsMessageAttributeLike,
  type SqsMessageLike,
} from './sqs-message-id.extractor';
export { MessageIdMissingError, type MessageIdSource } from './message-id-missing.error';
export { InvalidInboxEntryError } from './invalid-inbox-entry.error';
export { isPermanentInboxError } from './permanent-inbox.error';
export { SequenceGuard } from './sequence-guard';
export {
  claimCheckPayload,
  type ClaimCheckPayloadOptions,
  type ReceivedPayload,
} from './claim-check-payload';
export { sequenceOf, type ReceivedMessageLike } from './sequence-of';
export { UnknownMessageShapeError } from './unknown-message-shape.error';
export { SequenceGapError } from './sequence-gap.error';
export { InvalidSequenceError } from './invalid-sequence.error';
export type {
  SequenceCheck,
  SequencedMessage,
  SequenceGapPolicy,
  SequenceOptions,
  SequenceStatus,
  SequenceStore,
} from './sequence.interfaces';
export { httpGapRepairClient, type HttpGapRepairClientOptions } from './http-gap-repair.client';
export { GapRepairRequestError } from './gap-repair-request.error';
export type {
  GapRepairAnswer,
  GapRepairClient,
  GapRepairRequest,
} from '../module/admin/gap-repair.interfaces';
