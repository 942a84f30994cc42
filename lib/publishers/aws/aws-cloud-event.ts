import type { OutboxHeaders } from '../../message/outbox-message.interface';
import {
  CE_DASH_PREFIX,
  headersBesideCloudEvent,
  percentEncoded,
  STRUCTURED_CONTENT_TYPE,
} from '../cloud-events/cloud-event-headers';
import type { EncodedCloudEvent } from '../cloud-events/outbox-cloud-events.port';
import { awsAttributesFitted, awsBody, type AwsMessageParts } from './aws-message-attributes';

/**
 * CloudEvents on SQS and SNS. CloudEvents defines no binding for them; the outbox writes message
 * attributes as the HTTP binding writes headers, which is what AWS's own message attributes are
 * closest to: in binary mode each attribute a `ce-<name>` attribute, its value percent-encoded,
 * `datacontenttype` the `content-type` attribute and the payload the body; in structured mode
 * the event as the body with `content-type: application/cloudevents+json; charset=UTF-8`.
 */

/** The attribute holding `datacontenttype` in binary mode, and the event format in structured. */
export const AWS_CONTENT_TYPE_ATTRIBUTE = 'content-type';

/**
 * Set to `base64` in binary mode when the payload is bytes (the body is base64 then): the content
 * type alone cannot say it, a binary payload may have any, `application/json` included.
 */
export const AWS_TRANSFER_ENCODING_ATTRIBUTE = 'content-transfer-encoding';

/** The attributes every event carries alone in binary mode: the spec's required ones. */
const REQUIRED = ['specversion', 'id', 'source', 'type'] as const;

/** What a message sent as a CloudEvent needs: its payload and its own headers. */
export interface AwsCloudEventMessage {
  readonly headers: OutboxHeaders;
  readonly payload: string | Buffer;
}

const isKept = (name: string): boolean =>
  name.startsWith(CE_DASH_PREFIX) || TRACE_CONTEXT.includes(name);

/** W3C trace context headers, which AWS tracing instrumentations read from attributes of their own. */
const TRACE_CONTEXT = ['traceparent', 'tracestate', 'baggage'];

/**
 * The body and attributes of a message sent as a CloudEvent on SQS or SNS. Binary mode: the
 * required attributes (`ce-specversion`, `ce-id`, `ce-source`, `ce-type`), `content-type` and,
 * for bytes, `content-transfer-encoding: base64` always travel alone; the optional attributes
 * (`ce-time`, `ce-subject`, `ce-partitionkey`, `ce-sequence`, `ce-traceparent`,
 * `ce-tracestate`) and the message's own headers travel alone too while all of them fit SQS's
 * ten, and otherwise the optional attributes and the trace context headers keep attributes of
 * their own, in that order, as room allows, and the rest travel as one JSON object in
 * `x-outbox-headers` (names and values as they would have been as attributes). Structured mode:
 * the event as the body, `content-type`, and the headers as for a plain message.
 */
export function awsCloudEventParts(
  message: AwsCloudEventMessage,
  event: EncodedCloudEvent,
): AwsMessageParts {
  // A header of the name the binding's content type travels under is left out, as on Kafka.
  const headers = Object.entries(headersBesideCloudEvent(message.headers)).filter(
    ([name]) => name !== AWS_CONTENT_TYPE_ATTRIBUTE && name !== AWS_TRANSFER_ENCODING_ATTRIBUTE,
  );
  if (event.mode === 'structured') {
    return awsAttributesFitted(
      event.body,
      [[AWS_CONTENT_TYPE_ATTRIBUTE, STRUCTURED_CONTENT_TYPE]],
      headers,
      (name) => TRACE_CONTEXT.includes(name),
    );
  }
  const own: [string, string][] = [];
  const optional: [string, string][] = [];
  for (const name of REQUIRED) {
    own.push([`${CE_DASH_PREFIX}${name}`, percentEncoded(event.attributes[name] ?? '')]);
  }
  for (const name in event.attributes) {
    if ((REQUIRED as readonly string[]).includes(name)) continue;
    optional.push([`${CE_DASH_PREFIX}${name}`, percentEncoded(event.attributes[name] ?? '')]);
  }
  // A MIME type, as HTTP's Content-Type: not percent-encoded.
  own.push([AWS_CONTENT_TYPE_ATTRIBUTE, event.contentType]);
  if (typeof message.payload !== 'string') own.push([AWS_TRANSFER_ENCODING_ATTRIBUTE, 'base64']);
  return awsAttributesFitted(awsBody(message.payload), own, [...optional, ...headers], isKept);
}
