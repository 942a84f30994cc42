import { CloudEvent } from 'cloudevents';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import type {
  CloudEventsMode,
  EncodedCloudEvent,
  OutboxCloudEvents,
} from '../../publishers/cloud-events/outbox-cloud-events.port';
import { cloudEventSequence } from '../../publishers/cloud-events/received-cloud-event';
import {
  resolveCloudEventsOptions,
  type CloudEventsOptions,
  type ResolvedCloudEventsOptions,
} from './cloud-events.options';

const TRACE_CONTEXT = ['traceparent', 'tracestate'] as const;

/**
 * Makes outbox messages into CloudEvents 1.0 with the `cloudevents` SDK: the message id is `id`,
 * its type `type`, its enqueue time `time`, its key `subject` (by default) and the
 * `partitionkey` extension, its per-key number (`ordering.sequence`) the `sequence` extension
 * (16 digits, so that the text order the extension specifies is the number order), and its W3C
 * trace context headers the distributed-tracing extension (`traceparent`, `tracestate`).
 *
 * The payload stays exactly as it was enqueued: the body in binary mode; in structured mode the
 * JSON text as `data` (spliced in as it is, never parsed and written again, which could change
 * large numbers), or base64 `data_base64` for a binary payload.
 */
class CloudEventsEncoder implements OutboxCloudEvents {
  constructor(private readonly options: ResolvedCloudEventsOptions) {}

  encode(record: OutboxRecord): EncodedCloudEvent | undefined {
    const mode = this.modeOf(record.type);
    if (mode === false) return undefined;
    const contentType = record.encoding === 'binary' ? record.contentType : 'application/json';
    // Not validated per message (`strict` false): the SDK's schema check cost about 10 µs a
    // message (bench P24), and checks nothing the outbox has not: the source was checked at
    // bootstrap, the id is a UUID, the type a non-empty string (enqueue refuses others), the
    // time an ISO timestamp, the extension names fixed and every value a string.
    const event = new CloudEvent<never>(this.attributesOf(record, contentType), false);
    if (mode === 'binary') {
      const attributes: Record<string, string> = {};
      // Every attribute given is a string (and the SDK keeps them so); unset ones are undefined.
      for (const [name, value] of Object.entries(event)) {
        if (typeof value !== 'string' || name === 'datacontenttype') continue;
        attributes[name] = value;
      }
      return { mode, attributes, contentType };
    }
    const envelope = event.toJSON();
    if (record.encoding === 'binary') {
      envelope.data_base64 = record.payload.toString('base64');
      return { mode, body: JSON.stringify(envelope) };
    }
    // `data` last, spliced in as the enqueued JSON text.
    const head = JSON.stringify(envelope);
    return { mode, body: `${head.slice(0, -1)},"data":${record.payload}}` };
  }

  private modeOf(type: string): CloudEventsMode | false {
    const own = this.options.types.get(type);
    return own === undefined ? this.options.mode : own;
  }

  private attributesOf(record: OutboxRecord, contentType: string): Record<string, string> {
    const attributes: Record<string, string> = {
      specversion: '1.0',
      id: record.messageId,
      source: this.options.source,
      type: record.type,
      time: record.createdAt.toISOString(),
      datacontenttype: contentType,
    };
    const subject = this.options.subject(record);
    if (subject !== undefined) attributes.subject = subject;
    if (record.key !== null) attributes.partitionkey = record.key;
    const sequence = record.headers[OUTBOX_HEADER_SEQUENCE];
    if (sequence !== undefined) attributes.sequence = cloudEventSequence(sequence);
    for (const name of TRACE_CONTEXT) {
      const value = record.headers[name];
      if (value !== undefined && value !== '') attributes[name] = value;
    }
    return attributes;
  }
}

/**
 * CloudEvents for a publisher's `cloudEvents` option: each message goes out as a CloudEvent 1.0
 * in the content mode its type is given (`mode`, or `types` per event type), as the publisher's
 * broker binding says. Checks the options now: a bad one throws `OutboxOptionsError`.
 *
 * @example new KafkaPublisher({ brokers, cloudEvents: cloudEvents({ source: '/orders-service' }) })
 */
export function cloudEvents(options: CloudEventsOptions): OutboxCloudEvents {
  return new CloudEventsEncoder(resolveCloudEventsOptions(options));
}
