import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import type { OutboxHeaders } from '../../message/outbox-message.interface';

/**
 * How outbox messages travel on SQS and SNS, which carry text bodies and at most ten message
 * attributes per message. Shared by the SQS and SNS publishers and by the consumer-side reader.
 */

/** Most message attributes SQS takes on one message (SNS to SQS raw delivery: the same). */
export const AWS_MAX_MESSAGE_ATTRIBUTES = 10;

/** The headers of a message whose headers do not fit one attribute each, as one JSON object. */
export const AWS_HEADERS_ATTRIBUTE = 'x-outbox-headers';

/**
 * W3C trace context headers, which AWS tracing instrumentations read from attributes of their
 * own: kept out of the JSON attribute whenever there is room.
 */
const TRACE_HEADERS = ['traceparent', 'tracestate', 'baggage'];

/** A `String` message attribute, in the shape both SDKs take. */
export interface AwsStringAttribute {
  readonly DataType: 'String';
  readonly StringValue: string;
}

export type AwsMessageAttributes = Record<string, AwsStringAttribute>;

/** What an outbox message needs to become an SQS or SNS message. */
export interface AwsOutgoingMessage {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly headers: OutboxHeaders;
  readonly payload: string | Buffer;
  readonly contentType?: string;
}

/** The body and attributes of one message, and its size as SQS and SNS count it. */
export interface AwsMessageParts {
  /** The JSON payload as it is, or a binary payload in base64. */
  readonly body: string;
  readonly attributes: AwsMessageAttributes;
  /** Body bytes plus, per attribute, its name, data type and value bytes (UTF-8). */
  readonly bytes: number;
}

// SQS and SNS attribute names: letters, digits, '_', '-' and '.', at most 256, no '..', not
// starting or ending with '.', and not starting with 'AWS.' or 'Amazon.' (any case).
const ATTRIBUTE_NAME = /^(?!\.)(?!.*\.\.)(?!.*\.$)[A-Za-z0-9_.-]{1,256}$/;
const RESERVED_PREFIX = /^(aws|amazon)\./i;
// The characters SQS takes in a body and in attribute values (the XML 1.0 character set).
const NOT_XML_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;

export function isAwsAttributeName(name: string): boolean {
  return ATTRIBUTE_NAME.test(name) && !RESERVED_PREFIX.test(name);
}

/** Whether SQS takes `text` as a body or an attribute value as it is (SNS takes more). */
export function isAwsText(text: string): boolean {
  return !NOT_XML_CHAR.test(text);
}

const utf8 = (text: string): number => Buffer.byteLength(text, 'utf8');

/** `String` plus the name and value, in bytes: what one attribute adds to a message's size. */
export function attributeBytes(name: string, value: string): number {
  return utf8(name) + 6 + utf8(value);
}

/** Whether `value` can travel as an attribute of its own (SQS refuses empty values). */
const fitsAlone = (name: string, value: string): boolean =>
  isAwsAttributeName(name) && value !== '' && isAwsText(value);

/**
 * The body and attributes of `message`: `x-outbox-message-id`, `x-outbox-type`, `x-outbox-key`
 * (when it has a key), `x-outbox-content-type` (when binary), then its headers, one attribute
 * each when all of them fit the ten and each is a valid attribute; otherwise the trace context
 * headers keep attributes of their own (as room allows) and the rest travel as one JSON object
 * in `x-outbox-headers`. A binary payload is base64 in the body.
 */
export function awsMessageParts(message: AwsOutgoingMessage): AwsMessageParts {
  const own: [string, string][] = [
    [OUTBOX_HEADER_MESSAGE_ID, message.messageId],
    [OUTBOX_HEADER_TYPE, message.type],
  ];
  // A key SQS could not carry as text (a control character) is left out: the group id is the
  // key's hash then, and consumers that need the key read it from the payload.
  if (message.key !== null && isAwsText(message.key)) own.push([OUTBOX_HEADER_KEY, message.key]);
  if (typeof message.payload !== 'string')
    own.push([OUTBOX_HEADER_CONTENT_TYPE, message.contentType ?? 'application/octet-stream']);
  return awsAttributesFitted(
    awsBody(message.payload),
    own,
    Object.entries(message.headers),
    (name) => TRACE_HEADERS.includes(name),
  );
}

/** A payload as an SQS or SNS body: JSON text as it is, bytes in base64. */
export function awsBody(payload: string | Buffer): string {
  return typeof payload === 'string' ? payload : payload.toString('base64');
}

/**
 * A message of `body` whose `own` attributes always travel alone (the caller makes sure they are
 * fewer than ten and valid), and the `rest` one attribute each when all of them fit the ten and
 * each is a valid attribute; otherwise the ones `kept` says (in their order, as room allows)
 * still travel alone and the others as one JSON object in `x-outbox-headers`.
 */
export function awsAttributesFitted(
  body: string,
  own: readonly (readonly [string, string])[],
  rest: readonly (readonly [string, string])[],
  kept: (name: string) => boolean,
): AwsMessageParts {
  const attributes: AwsMessageAttributes = {};
  let bytes = utf8(body);
  const put = (name: string, value: string): void => {
    attributes[name] = { DataType: 'String', StringValue: value };
    bytes += attributeBytes(name, value);
  };
  for (const [name, value] of own) put(name, value);
  if (rest.length === 0) return { body, attributes, bytes };
  const room = AWS_MAX_MESSAGE_ATTRIBUTES - own.length;
  if (rest.length <= room && rest.every(([name, value]) => fitsAlone(name, value))) {
    for (const [name, value] of rest) put(name, value);
    return { body, attributes, bytes };
  }
  // One slot goes to the JSON attribute; the kept ones take what is left before it.
  let left = room - 1;
  // No prototype: a "__proto__" header is kept as a name like any other.
  const folded = Object.create(null) as Record<string, string>;
  let any = false;
  for (const [name, value] of rest) {
    if (left > 0 && kept(name) && fitsAlone(name, value)) {
      put(name, value);
      left -= 1;
    } else {
      folded[name] = value;
      any = true;
    }
  }
  if (any) put(AWS_HEADERS_ATTRIBUTE, JSON.stringify(folded));
  return { body, attributes, bytes };
}

/**
 * The most bytes `awsMessageParts` can make of a message, without building it: enough to pass
 * nearly every message at enqueue without counting (headers JSON text at 3 bytes a character
 * bounds their names and values; each attribute's data type and the outbox's own names add a
 * fixed amount).
 */
export function awsMessageBytesBound(
  payloadBytes: number,
  binary: boolean,
  headersJsonLength: number,
): number {
  const body = binary ? Math.ceil(payloadBytes / 3) * 4 : payloadBytes;
  // id (36), type and key (255 characters each, 3 bytes a character), content type (255), and
  // the names and data types of those four and of the headers' JSON attribute.
  const own = 36 + 3 * 255 * 3 + 5 * (32 + 6);
  return body + own + headersJsonLength * 3;
}

/** Why a message is too large for SQS or SNS, and what to do instead. */
export function awsTooLargeProblem(service: string, parts: AwsMessageParts, max: number): string {
  const body = utf8(parts.body);
  return `the message would be ${parts.bytes} bytes on ${service} (body ${body}, attributes ${parts.bytes - body}), over the limit of ${max} bytes (maxMessageBytes of the publisher). Send it by reference: the module's claimCheck option writes payloads over its threshold to S3 (or the outbox's own database) and sends a reference (docs/claim-check.md).`;
}
