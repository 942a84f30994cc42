// nestjs-outbox/sqs: a native Amazon SQS publisher on @aws-sdk/client-sqs (an optional peer
// dependency), and the reader of what it sends, for consumers.
export { SqsPublisher } from './sqs.publisher';
export {
  resolveSqsPublisherOptions,
  SQS_DEFAULT_MAX_MESSAGE_BYTES,
  SQS_MAX_MESSAGE_BYTES,
  type ResolvedSqsPublisherOptions,
  type SqsPublisherOptions,
} from './sqs-publisher.options';
export {
  readOutboxSqsMessage,
  type ReceivedOutboxMessage,
  type ReceivedSqsCloudEvent,
  type SqsMessageAttributeLike,
  type SqsMessageLike,
} from '../aws/aws-received-message';
/** The message's `attributes.sqs` (docs/broker-attributes.md). */
export type { OutboxSqsAttributes } from '../../message/outbox-message.interface';
