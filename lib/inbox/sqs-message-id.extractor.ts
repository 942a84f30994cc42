import { OUTBOX_HEADER_MESSAGE_ID } from '../outbox.constants';
import { outboxIdOfSqsMessage, type SqsMessageLike } from '../publishers/aws/aws-received-message';
import { canonicalMessageId } from './canonical-message-id';
import { MessageIdMissingError } from './message-id-missing.error';

export type {
  SqsMessageAttributeLike,
  SqsMessageLike,
} from '../publishers/aws/aws-received-message';

/**
 * The message id of an SQS message (from `ReceiveMessage`, or a record of an AWS Lambda SQS
 * event): its `x-outbox-message-id` message attribute, set by `SqsPublisher`, and by
 * `SnsPublisher` on a topic the queue subscribes to with raw message delivery; without raw
 * delivery, the same attribute inside the SNS notification that is the body. With the
 * publishers' `cloudEvents` option, the CloudEvent's `id` instead (a `ce-id` attribute in binary
 * mode, the body's `id` in structured mode; direct or in the notification). Never SQS's own
 * `MessageId`, which a message sent twice gets twice.
 *
 * @throws MessageIdMissingError when the message carries no outbox id.
 */
export function messageIdFromSqs(message: SqsMessageLike): string {
  const id = outboxIdOfSqsMessage(message);
  if (id === undefined) {
    throw new MessageIdMissingError(
      'sqs',
      `message attribute ${OUTBOX_HEADER_MESSAGE_ID}, then a CloudEvent's id (ce-id attribute or structured body), direct or in an SNS notification body`,
    );
  }
  return canonicalMessageId(id);
}
