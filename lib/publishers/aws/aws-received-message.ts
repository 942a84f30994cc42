import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OUTBOX_HEADER_PREFIX,
} from '../../outbox.constants';
import type { CloudEventsMode } from '../cloud-events/outbox-cloud-events.port';
import { isStructuredCloudEvent, percentDecoded } from '../cloud-events/received-cloud-event';
import { CE_DASH_PREFIX } from '../cloud-events/cloud-event-headers';
import { AWS_CONTENT_TYPE_ATTRIBUTE, AWS_TRANSFER_ENCODING_ATTRIBUTE } from './aws-cloud-event';
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

/** A CloudEvent as a consumer received it from SQS: its content mode and its context attributes. */
export interface ReceivedSqsCloudEvent {
  readonly mode: CloudEventsMode;
  /**
   * Every context attribute by name, extensions included (`id`, `source`, `specversion`,
   * `type`, `time`, `datacontenttype`, `subject`, `partitionkey`, `sequence`, `traceparent`,
   * …), as text: percent-decoded in binary mode, whether they travelled as attributes of their
   * own or in `x-outbox-headers`.
   */
  readonly attributes: Readonly<Record<string, string>>;
}

/**
 * An outbox message as a consumer received it from SQS: sent by `SqsPublisher`, or by
 * `SnsPublisher` to a topic the queue subscribes to (with raw message delivery or without),
 * as a plain outbox message or, with their `cloudEvents` option, as a CloudEvent.
 */
export interface ReceivedOutboxMessage {
  /** The outbox's message id (`x-outbox-message-id`, or a CloudEvent's `id`): deduplicate on it. */
  readonly messageId: string | undefined;
  /** The event type (`x-outbox-type`, or a CloudEvent's `type`). */
  readonly type: string | undefined;
  /** The message key (`x-outbox-key`, or a CloudEvent's `partitionkey`). */
  readonly key: string | null;
  /** The message's own headers, whether they came one attribute each or in `x-outbox-headers`. */
  readonly headers: Record<string, string>;
  /** Set on a binary message, whose payload is then its bytes. */
  readonly contentType: string | undefined;
  /**
   * The JSON text of a JSON message, or the bytes of a binary one; of a CloudEvent, its data (in
   * structured mode the JSON text the producer wrote, or the bytes of `data_base64`).
   */
  readonly payload: string | Buffer;
  /** Whether it came inside an SNS notification (an SNS subscription without raw delivery). */
  readonly viaSnsNotification: boolean;
  /** The CloudEvent the message is, when it is one (a publisher with `cloudEvents`). */
  readonly cloudEvent: ReceivedSqsCloudEvent | undefined;
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
  const value = readOutboxSqsMessage(message).messageId;
  return value === '' ? undefined : value;
}

/** Sets a header as an own property, a "__proto__" one too (an assignment would set the prototype). */
function setHeader(headers: Record<string, string>, name: string, value: string): void {
  Object.defineProperty(headers, name, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/** The object of `x-outbox-headers`: the attributes that did not fit SQS's ten. */
function unfolded(attributes: ReadonlyMap<string, string>): Record<string, string> {
  const folded = attributes.get(AWS_HEADERS_ATTRIBUTE);
  if (folded === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(folded);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return {};
    const out: Record<string, string> = {};
    for (const [name, value] of Object.entries(parsed))
      if (typeof value === 'string') setHeader(out, name, value);
    return out;
  } catch {
    // not the outbox's: left out
    return {};
  }
}

/**
 * Reads an outbox message received from SQS (see {@link ReceivedOutboxMessage}): its id, type,
 * key and headers from the message attributes (or from the SNS notification's), its payload from
 * the body (or the notification's `Message`), base64-decoded when it is binary. A CloudEvent
 * (binary mode: a `ce-specversion` attribute; structured mode: `content-type:
 * application/cloudevents+json`) is read as one: `cloudEvent` holds its attributes, and the id,
 * type, key and payload are its `id`, `type`, `partitionkey` and data.
 */
export function readOutboxSqsMessage(message: SqsMessageLike): ReceivedOutboxMessage {
  const body = message.Body ?? message.body ?? '';
  const notification = snsNotification(body);
  const attributes = attributesOf(message, notification);
  const text = notification?.Message ?? body;
  const viaSnsNotification = notification !== undefined;
  const headers = unfolded(attributes);
  for (const [name, value] of attributes) {
    if (!name.toLowerCase().startsWith(OUTBOX_HEADER_PREFIX)) setHeader(headers, name, value);
  }
  const contentType = attributes.get(AWS_CONTENT_TYPE_ATTRIBUTE);
  if (isStructuredCloudEvent(contentType)) {
    delete headers[AWS_CONTENT_TYPE_ATTRIBUTE];
    return structuredEvent(text, headers, viaSnsNotification);
  }
  if (headers[`${CE_DASH_PREFIX}specversion`] !== undefined) {
    return binaryEvent(text, headers, viaSnsNotification);
  }
  const binaryType = attributes.get(OUTBOX_HEADER_CONTENT_TYPE);
  return {
    messageId: attributes.get(OUTBOX_HEADER_MESSAGE_ID),
    type: attributes.get(OUTBOX_HEADER_TYPE),
    key: attributes.get(OUTBOX_HEADER_KEY) ?? null,
    headers,
    contentType: binaryType,
    payload: binaryType === undefined ? text : Buffer.from(text, 'base64'),
    viaSnsNotification,
    cloudEvent: undefined,
  };
}

/** A CloudEvent in binary mode: its `ce-` attributes (decoded) out of the headers, the body its data. */
function binaryEvent(
  text: string,
  headers: Record<string, string>,
  viaSnsNotification: boolean,
): ReceivedOutboxMessage {
  const attributes: Record<string, string> = {};
  for (const name of Object.keys(headers)) {
    if (!name.startsWith(CE_DASH_PREFIX)) continue;
    const value = percentDecoded(headers[name] ?? '');
    if (value !== undefined) attributes[name.slice(CE_DASH_PREFIX.length)] = value;
    delete headers[name];
  }
  const contentType = headers[AWS_CONTENT_TYPE_ATTRIBUTE];
  const base64 = headers[AWS_TRANSFER_ENCODING_ATTRIBUTE] === 'base64';
  delete headers[AWS_CONTENT_TYPE_ATTRIBUTE];
  delete headers[AWS_TRANSFER_ENCODING_ATTRIBUTE];
  if (contentType !== undefined) attributes.datacontenttype = contentType;
  return {
    messageId: attributes.id,
    type: attributes.type,
    key: attributes.partitionkey ?? null,
    headers,
    contentType: base64 ? contentType : undefined,
    payload: base64 ? Buffer.from(text, 'base64') : text,
    viaSnsNotification,
    cloudEvent: { mode: 'binary', attributes },
  };
}

/**
 * A CloudEvent in structured mode: the body's attributes, and its data: `data_base64` as bytes,
 * `data` as the JSON text the outbox wrote (the last member, spliced in as enqueued: cut out of
 * the body as it is, so large numbers keep their digits), or written again from the parsed
 * value for an event another producer wrote otherwise.
 */
function structuredEvent(
  text: string,
  headers: Record<string, string>,
  viaSnsNotification: boolean,
): ReceivedOutboxMessage {
  let event: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      event = parsed as Record<string, unknown>;
  } catch {
    // not an event: no attributes, the body as its data
  }
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(event)) {
    if (name === 'data' || name === 'data_base64') continue;
    if (typeof value === 'string') attributes[name] = value;
    else if (typeof value === 'number' || typeof value === 'boolean')
      attributes[name] = String(value);
  }
  // Text that is no event is answered as its own data; an event without data has none.
  let payload: string | Buffer = Object.keys(event).length === 0 ? text : '';
  let contentType: string | undefined;
  if (typeof event.data_base64 === 'string') {
    payload = Buffer.from(event.data_base64, 'base64');
    contentType = attributes.datacontenttype ?? 'application/octet-stream';
  } else if ('data' in event) {
    const { data, ...head } = event;
    const prefix = `${JSON.stringify(head).slice(0, -1)},"data":`;
    payload =
      text.startsWith(prefix) && text.endsWith('}')
        ? text.slice(prefix.length, -1)
        : (JSON.stringify(data) ?? 'null');
  }
  return {
    messageId: attributes.id,
    type: attributes.type,
    key: attributes.partitionkey ?? null,
    headers,
    contentType,
    payload,
    viaSnsNotification,
    cloudEvent: { mode: 'structured', attributes },
  };
}
