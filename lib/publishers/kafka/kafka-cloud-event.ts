import type { IHeaders, Message } from 'kafkajs';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import {
  headersBesideCloudEvent,
  STRUCTURED_CONTENT_TYPE,
} from '../cloud-events/cloud-event-headers';
import type { EncodedCloudEvent } from '../cloud-events/outbox-cloud-events.port';

/** The Kafka binding's prefix of attribute headers in binary mode. */
export const KAFKA_CLOUDEVENTS_PREFIX = 'ce_';

/**
 * A message as a CloudEvent on Kafka (the CloudEvents Kafka protocol binding): in binary mode
 * each attribute a `ce_` header, `datacontenttype` the `content-type` header and the payload the
 * value as it is; in structured mode the event as the JSON value with `content-type:
 * application/cloudevents+json`. The key is the message key (the `partitionkey` extension) in
 * both, so a key's events share a partition as plain messages do.
 */
export function kafkaCloudEvent(record: OutboxRecord, event: EncodedCloudEvent): Message {
  const headers: IHeaders = headersBesideCloudEvent(record.headers);
  let value: string | Buffer;
  if (event.mode === 'binary') {
    for (const name in event.attributes)
      headers[`${KAFKA_CLOUDEVENTS_PREFIX}${name}`] = event.attributes[name];
    headers['content-type'] = event.contentType;
    value = record.payload;
  } else {
    headers['content-type'] = STRUCTURED_CONTENT_TYPE;
    value = event.body;
  }
  const message: Message = { key: record.key, value, headers };
  const partition = record.attributes?.kafka?.partition;
  if (partition !== undefined) message.partition = partition;
  return message;
}
