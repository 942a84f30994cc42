import type { OutboxBrokerAttributes, OutboxHeaders } from './outbox-message.interface';

/** What every claimed message has, whatever its payload. */
interface OutboxRecordBase {
  /** Row id: the claim order. */
  readonly id: string;
  /** Stable UUIDv7 of the message; consumers deduplicate on it. */
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  readonly headers: OutboxHeaders;
  /**
   * Attempts started, this one included: counted when a dispatcher claims the message, so an
   * attempt cut short by a crash counts too; an outage or shutdown gives its attempt back.
   */
  readonly attempts: number;
  /** When the message was enqueued (database clock). */
  readonly createdAt: Date;
  /** The broker attributes given at enqueue, if any: each publisher applies its own part. */
  readonly attributes?: OutboxBrokerAttributes;
}

/** A message with a JSON payload (the default). */
export interface JsonOutboxRecord extends OutboxRecordBase {
  /** Absent or `'json'` on a JSON message. */
  readonly encoding?: 'json';
  /** The payload exactly as serialised at enqueue time (JSON text). */
  readonly payload: string;
  readonly contentType?: undefined;
}

/** A message enqueued with bytes and a content type. */
export interface BinaryOutboxRecord extends OutboxRecordBase {
  readonly encoding: 'binary';
  /** The bytes exactly as enqueued. */
  readonly payload: Buffer;
  /** The content type given at enqueue (e.g. `application/avro`). */
  readonly contentType: string;
}

/**
 * A claimed message as the dispatcher hands it to a publisher: JSON text in `payload`, or, when
 * `encoding` is `'binary'`, bytes with their `contentType`.
 */
export type OutboxRecord = JsonOutboxRecord | BinaryOutboxRecord;
