import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OUTBOX_HEADER_PREFIX,
} from '../../outbox.constants';
import { AWS_HEADERS_ATTRIBUTE } from './aws-message-attributes';

// Structural types, so that reading a message needs no AWS package: an SQS `Message` from
// `ReceiveMessage` (@aws-sdk/client-sqs, sqs-consumer, @ssut/nestjs-sqs) and a record of an AWS
// Lambda SQS event (camelCase) both fit.

/** A message attribute as `ReceiveMessage` (`StringValue`) or a Lambda event (`stringValue`) has it. */
export interface SqsMessageAttributeLike {
  readonly StringValue?: string;
  readonly stringValue?: string;
}

/** The part of a received SQS message the outbox reads. */
export interface SqsMessageLike {
  readonly Body?: string;
  readonly body?: string;
  readonly MessageAttributes?: Readonly<Record<string, SqsMessageAttributeLike>>;
  readonly messageAttributes?: Readonly<Record<string, SqsMessageAttributeLike>>;
}

/**
 * An outbox message as a consumer received it from SQS: sent by `SqsPublisher`, or by
 * `SnsPublisher` to a topic the queue subscribes to (with raw message delivery or without).
 */
export interface ReceivedOutboxMessage {
  /** The outbox's message id (`x-outbox-message-id`): deduplicate on it. */
  readonly messageId: string | undefined;
  readonly type: string | undefined;
  readonly key: string | null;
  /** The message's own headers, whether they came one attribute each or in `x-outbox-headers`. */
  readonly headers: Record<string, string>;
  /** Set on a binary message, whose payload is then its bytes. */
  readonly contentType: string | undefined;
  /** The JSON text of a JSON message, or the bytes of a binary one. */
  readonly payload: string | Buffer;
  /** Whether it came inside an SNS notification (an SNS subscription without raw delivery). */
  readonly viaSnsNotification: boolean;
}

interface SnsNotification {
  readonly Type: 'Notification';
  readonly Message: string;
  readonly MessageAttributes?: Record<string, { Type?: unknown; Value?: unknown }>;
}

/** The SNS notification a body is, when SNS delivered it without raw message delivery. */
function snsNotification(body: string | undefined): SnsNotification | undefined {
  // Cheap test first: most bodies are a payload, not an envelope.
  if (body === undefined || !body.includes('"Notification"') || !body.includes('"TopicArn"'))
    return undefined;
  try {
    const parsed = JSON.parse(body) as Partial<SnsNotification> & { TopicArn?: unknown };
    if (
      parsed !== null &&
      typeof parsed === 'object' &&
      parsed.Type === 'Notification' &&
      typeof parsed.TopicArn === 'string' &&
      typeof parsed.Message === 'string'
    ) {
      return parsed as SnsNotification;
    }
  } catch {
    // not JSON: a payload
  }
  return undefined;
}

/** The message's attributes as plain strings, wherever they travelled. */
function attributesOf(
  message: SqsMessageLike,
  notification: SnsNotification | undefined,
): Map<string, string> {
  const out = new Map<string, string>();
  if (notification !== undefined) {
    for (const [name, value] of Object.entries(notification.MessageAttributes ?? {})) {
      if (typeof value?.Value === 'string') out.set(name, value.Value);
    }
    return out;
  }
  const given = message.MessageAttributes ?? message.messageAttributes ?? {};
  for (const [name, value] of Object.entries(given)) {
    const text = value?.StringValue ?? value?.stringValue;
    if (typeof text === 'string') out.set(name, text);
  }
  return out;
}

/** The outbox message id of a received message, or undefined when it carries none. */
export function outboxIdOfSqsMessage(message: SqsMessageLike): string | undefined {
  const direct = message.MessageAttributes ?? message.messageAttributes;
  const own = direct?.[OUTBOX_HEADER_MESSAGE_ID];
  const id = own?.StringValue ?? own?.stringValue;
  if (typeof id === 'string' && id !== '') return id;
  const value = attributesOf(message, snsNotification(message.Body ?? message.body)).get(
    OUTBOX_HEADER_MESSAGE_ID,
  );
  return value === '' ? undefined : value;
}

/**
 * Reads an outbox message received from SQS (see {@link ReceivedOutboxMessage}): its id, type,
 * key and headers from the message attributes (or from the SNS notification's), its payload from
 * the body (or the notification's `Message`), base64-decoded when it is binary.
 */
export function readOutboxSqsMessage(message: SqsMessageLike): ReceivedOutboxMessage {
  const body = message.Body ?? message.body ?? '';
  const notification = snsNotification(body);
  const attributes = attributesOf(message, notification);
  const text = notification?.Message ?? body;
  const contentType = attributes.get(OUTBOX_HEADER_CONTENT_TYPE);
  const headers: Record<string, string> = {};
  const folded = attributes.get(AWS_HEADERS_ATTRIBUTE);
  if (folded !== undefined) {
    try {
      Object.assign(headers, JSON.parse(folded) as Record<string, string>);
    } catch {
      // not the outbox's: left out
    }
  }
  for (const [name, value] of attributes) {
    if (!name.toLowerCase().startsWith(OUTBOX_HEADER_PREFIX)) headers[name] = value;
  }
  return {
    messageId: attributes.get(OUTBOX_HEADER_MESSAGE_ID),
    type: attributes.get(OUTBOX_HEADER_TYPE),
    key: attributes.get(OUTBOX_HEADER_KEY) ?? null,
    headers,
    contentType,
    payload: contentType === undefined ? text : Buffer.from(text, 'base64'),
    viaSnsNotification: notification !== undefined,
  };
}
