// nestjs-outbox/sns: a native Amazon SNS publisher on @aws-sdk/client-sns (an optional peer
// dependency).
export { SnsPublisher } from './sns.publisher';
export {
  resolveSnsPublisherOptions,
  SNS_DEFAULT_MAX_MESSAGE_BYTES,
  SNS_MAX_MESSAGE_BYTES,
  type ResolvedSnsPublisherOptions,
  type SnsPublisherOptions,
} from './sns-publisher.options';
/** The message's `attributes.sns` (docs/broker-attributes.md). */
export type { OutboxSnsAttributes } from '../../message/outbox-message.interface';
