import { readOutboxSqsMessage, type SqsMessageLike } from '../publishers/aws/aws-received-message';
import type { CloudEventAttributeReader } from '../publishers/cloud-events/received-cloud-event';

/**
 * One outbox attribute of a received SQS message, wherever it travelled: an attribute of its own
 * (`ReceiveMessage`'s `StringValue`, a Lambda record's `stringValue`), one of the headers folded
 * into `x-outbox-headers` when they did not fit SQS's ten attributes, or an attribute of the SNS
 * notification that is the body (an SNS subscription without raw delivery).
 */
export function sqsAttribute(message: SqsMessageLike, name: string): string | undefined {
  const direct = message.MessageAttributes ?? message.messageAttributes;
  const own = direct?.[name];
  const value = own?.StringValue ?? own?.stringValue;
  if (typeof value === 'string' && value !== '') return value;
  // The SQS reader unfolds x-outbox-headers and finds the notification; it keeps the outbox's own
  // attributes out of the headers it answers, so a notification's is read from its JSON here.
  const received = readOutboxSqsMessage(message);
  const folded = received.headers[name];
  if (folded !== undefined && folded !== '') return folded;
  if (!received.viaSnsNotification) return undefined;
  const notification = JSON.parse(message.Body ?? message.body ?? '{}') as {
    MessageAttributes?: Record<string, { Value?: unknown } | undefined>;
  };
  const inNotification = notification.MessageAttributes?.[name]?.Value;
  return typeof inNotification === 'string' && inNotification !== '' ? inNotification : undefined;
}

/**
 * The CloudEvent attributes of a received SQS message (binary mode's `ce-` attributes, or a
 * structured body, direct or in an SNS notification); read once, on the first attribute asked.
 */
export function sqsCloudEvent(message: SqsMessageLike): CloudEventAttributeReader {
  let attributes: Readonly<Record<string, string>> | undefined | null = null;
  return (attribute) => {
    if (attributes === null) attributes = readOutboxSqsMessage(message).cloudEvent?.attributes;
    const value = attributes?.[attribute];
    return value === '' ? undefined : value;
  };
}
