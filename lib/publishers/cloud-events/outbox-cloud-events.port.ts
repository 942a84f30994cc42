import type { OutboxRecord } from '../../message/outbox-record.interface';

/** How a message travels as a CloudEvent: its attributes as message metadata, or all in the body. */
export type CloudEventsMode = 'binary' | 'structured';

/** The media type of a CloudEvent in the JSON event format (structured mode). */
export const CLOUDEVENTS_JSON_CONTENT_TYPE = 'application/cloudevents+json';

/**
 * A message as a CloudEvent in binary mode: its context attributes become message metadata
 * under the broker binding's names, and the payload stays the message body as it is.
 */
export interface BinaryCloudEvent {
  readonly mode: 'binary';
  /**
   * Every context attribute but `datacontenttype`, by attribute name (`id`, `source`,
   * `specversion`, `type`, `time`, and the ones the message has: `subject`, `partitionkey`,
   * `sequence`, `traceparent`, `tracestate`), each in its canonical string form.
   */
  readonly attributes: Readonly<Record<string, string>>;
  /** `datacontenttype`: the broker's own content type of the body. */
  readonly contentType: string;
}

/** A message as a CloudEvent in structured mode: the whole event, payload included, is the body. */
export interface StructuredCloudEvent {
  readonly mode: 'structured';
  /** The event in the JSON event format, with `application/cloudevents+json` as its content type. */
  readonly body: string;
}

export type EncodedCloudEvent = BinaryCloudEvent | StructuredCloudEvent;

/**
 * Makes outbox messages into CloudEvents for a publisher's `cloudEvents` option. Build it with
 * `cloudEvents({ source })` from `nestjs-outbox/cloudevents`; each publisher then puts the
 * event on its broker as that broker's CloudEvents binding says.
 */
export interface OutboxCloudEvents {
  /** The message as a CloudEvent, or undefined when its type is sent as a plain outbox message. */
  encode(record: OutboxRecord): EncodedCloudEvent | undefined;
}
