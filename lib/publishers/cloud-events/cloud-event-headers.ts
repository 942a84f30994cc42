import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import { CLOUDEVENTS_JSON_CONTENT_TYPE } from './outbox-cloud-events.port';

/** The content type of a structured event, as the bindings write it. */
export const STRUCTURED_CONTENT_TYPE = `${CLOUDEVENTS_JSON_CONTENT_TYPE}; charset=UTF-8`;

/**
 * A message's own headers that travel beside its CloudEvent: all of them but the per-key number,
 * which the event carries as its `sequence` extension (its trace context headers stay too, for
 * the broker's tracing instrumentations, beside the `traceparent` and `tracestate` attributes).
 * A copy the publisher may add to.
 */
export function headersBesideCloudEvent(headers: OutboxHeaders): Record<string, string> {
  // A spread, not Object.assign: a "__proto__" header (older rows) must be copied, not set.
  const copy: Record<string, string> = { ...headers };
  delete copy[OUTBOX_HEADER_SEQUENCE];
  return copy;
}

/** The header prefix of the NATS binding and the HTTP-like ones, whose values are percent-encoded. */
export const CE_DASH_PREFIX = 'ce-';

// Printable US-ASCII but space, '"' and '%': what a `ce-` header value keeps as it is.
const KEPT = /^[\x21\x23\x24\x26-\x7e]*$/;
const KEPT_CHAR = /^[\x21\x23\x24\x26-\x7e]$/;

/**
 * A `ce-` header value as the NATS and HTTP bindings write it: space, double quote, percent and
 * every character outside printable US-ASCII percent-encoded as its UTF-8 bytes.
 */
export function percentEncoded(value: string): string {
  if (KEPT.test(value)) return value;
  let out = '';
  for (const char of value) {
    if (KEPT_CHAR.test(char)) out += char;
    else
      for (const byte of Buffer.from(char, 'utf8'))
        out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
