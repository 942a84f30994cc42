import { CLOUDEVENTS_JSON_CONTENT_TYPE } from './outbox-cloud-events.port';

/**
 * Reading a received message as a CloudEvent, for consumers, without the CloudEvents SDK: in
 * binary mode the attributes are message metadata under the binding's prefix (Kafka `ce_`,
 * AMQP `cloudEvents_` or `cloudEvents:`, NATS and HTTP-like bindings `ce-`); in structured mode
 * the body is the event in the JSON format.
 */

/** Each binding's prefix of attribute names in binary mode, the ones a reader tries. */
export const CLOUDEVENTS_ATTRIBUTE_PREFIXES = ['ce_', 'ce-', 'cloudEvents_', 'cloudEvents:'];

/** The attributes of a CloudEvent a message carries; undefined for one it does not. */
export type CloudEventAttributeReader = (attribute: string) => string | undefined;

/** What a reader needs of a received message: its metadata, content type and body. */
export interface ReceivedParts {
  /** One header (or application property) of the message, as text. */
  readonly header: (name: string) => string | undefined;
  /** The message's content type (a header or a property, as its broker carries it). */
  readonly contentType: string | undefined;
  /** The body, read only when the content type says it is a structured event. */
  readonly body: () => unknown;
}

/** Whether a content type is the JSON event format (parameters such as charset allowed). */
export function isStructuredCloudEvent(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const media = contentType.split(';', 1)[0]?.trim().toLowerCase();
  return media === CLOUDEVENTS_JSON_CONTENT_TYPE;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

/** The structured event in a body (bytes or text), or undefined when it is no JSON object. */
function parseEvent(body: unknown): Record<string, unknown> | undefined {
  let text: string | undefined;
  if (typeof body === 'string') text = body;
  else if (body instanceof Uint8Array) text = Buffer.from(body).toString('utf8');
  if (text === undefined) return isObject(body) && !ArrayBuffer.isView(body) ? body : undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    return isObject(parsed) && !Array.isArray(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

function attributeText(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  return undefined;
}

/**
 * The attribute reader of a received message: the body's attributes when it is a structured
 * event (parsed once, on the first read), else its binary-mode metadata under any binding's
 * prefix. A message that is no CloudEvent reads as undefined for every attribute.
 */
export function cloudEventAttributes(parts: ReceivedParts): CloudEventAttributeReader {
  if (isStructuredCloudEvent(parts.contentType)) {
    let event: Record<string, unknown> | undefined | null = null;
    return (attribute) => {
      if (event === null) event = parseEvent(parts.body());
      return event === undefined ? undefined : attributeText(event[attribute]);
    };
  }
  return (attribute) => {
    for (const prefix of CLOUDEVENTS_ATTRIBUTE_PREFIXES) {
      const value = parts.header(`${prefix}${attribute}`);
      if (value !== undefined) return prefix === 'ce-' ? percentDecoded(value) : value;
    }
    return undefined;
  };
}

/**
 * A `ce-` header value (NATS, HTTP-like bindings) decoded: a double-quoted value unquoted, then
 * one round of percent-decoding; undefined for bytes that are not UTF-8, which the bindings say
 * to reject.
 */
export function percentDecoded(value: string): string | undefined {
  let text = value;
  if (text.length >= 2 && text.startsWith('"') && text.endsWith('"'))
    text = text.slice(1, -1).replace(/\\(.)/g, '$1');
  if (!text.includes('%')) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/**
 * Digits the outbox pads a key's sequence number to in the `sequence` extension, which is
 * compared as a string: 16 holds every safe integer, so the text order is the number order.
 */
export const CLOUDEVENTS_SEQUENCE_DIGITS = 16;

/** The `sequence` extension of an outbox sequence number. */
export function cloudEventSequence(sequence: string): string {
  return sequence.padStart(CLOUDEVENTS_SEQUENCE_DIGITS, '0');
}

/**
 * The outbox sequence number in a `sequence` extension: its leading zeros dropped. Text that is
 * not digits is answered as it is, for the caller's own check to refuse.
 */
export function sequenceOfCloudEvent(value: string | undefined): string | undefined {
  if (value === undefined || !/^[0-9]+$/.test(value)) return value;
  const trimmed = value.replace(/^0+/, '');
  return trimmed === '' ? '0' : trimmed;
}
