import type { OutboxEventPolicy } from './outbox-event-policy';
import type { OutboxEventPersonalData, OutboxPersonalData } from './erasure/personal-data';
/** Header values are strings on every transport, so they are strings here too. */
export type OutboxHeaders = Readonly<Record<string, string>>;

/** JSON data a payload may hold. */
export type OutboxJson =
  string | number | boolean | null | readonly OutboxJson[] | { readonly [key: string]: OutboxJson };

/** When a message becomes due, if not at once. */
export interface OutboxSchedule {
  /** Publish no earlier than this instant. */
  availableAt?: Date;
  /** Publish no earlier than this many milliseconds after the enqueue (database clock). */
  delayMs?: number;
}

/** A message given to `OutboxService.enqueue()` as a plain object, without an event class. */
export interface OutboxMessage<TPayload = unknown> extends OutboxSchedule {
  /** Destination: a Kafka topic, a RabbitMQ exchange/routing key, a Nest event pattern. */
  topic: string;
  /** Event type name, sent as a header (default: `topic`). */
  type?: string;
  /** Ordering and partitioning key; messages of one key are published in commit order. */
  key?: string | number | null;
  /**
   * The body: JSON-serialisable data, or bytes (`Buffer` / `Uint8Array`) when `contentType` is
   * given, stored and published as they are (docs/binary-payloads.md).
   */
  payload: TPayload;
  /**
   * Makes the message binary: `payload` must then be a `Buffer` or `Uint8Array`, stored as bytes
   * and published with this content type (e.g. `application/avro`, `application/x-protobuf`).
   * Without it the payload is JSON. @default undefined (a JSON payload)
   */
  contentType?: string;
  /**
   * Publisher-specific attributes of this message (RabbitMQ priority, expiration, exchange and
   * routing key; Kafka partition; MQTT qos and retain; SQS delay and message group; SNS message
   * group and subject), checked at enqueue and applied by the
   * matching publisher; the others ignore them (docs/broker-attributes.md). @default undefined
   */
  attributes?: OutboxBrokerAttributes;
  /**
   * `false` skips the walk that rejects values JSON would drop or alter (undefined, NaN, Map,
   * BigInt, NUL…): for payloads your app has already validated. @default true
   */
  validatePayload?: boolean;
  /** Extra string headers. */
  headers?: Record<string, string>;
  /**
   * Your own message id (a UUID): enqueueing a message whose id is already in the table is
   * skipped, so a retried business transaction does not enqueue twice. Exclusive with `dedupeKey`.
   */
  messageId?: string;
  /**
   * A business identity of the message (e.g. `order-42:created`), turned into a stable message
   * id: the same dedupe key is enqueued once for as long as its row is kept.
   */
  dedupeKey?: string;
  /**
   * The tenant the message belongs to (at most 128 characters), with the module's `tenants`
   * option on: stored in `tenant_id` and sent as the `x-outbox-tenant` header. Left out, the
   * `tenants.resolve` function's answer. @default undefined
   */
  tenant?: string;
  /**
   * Personal data of one subject in this message, sealed at enqueue under the subject's data key
   * with the module's `erasure` option (docs/erasure.md): the payload's `fields`, or all of it.
   * @default undefined (nothing sealed)
   */
  personal?: OutboxPersonalData;
}

/**
 * RabbitMQ attributes of one message, applied by `RabbitMqPublisher` and by `ClientProxyPublisher`
 * over the RMQ transport (which can apply `priority` and `expiration` only).
 */
export interface OutboxRabbitMqAttributes {
  /** Message priority, 0 to 255 (a queue honours it only with `x-max-priority`). */
  readonly priority?: number;
  /** Per-message TTL in milliseconds (a whole number from 0): expired messages are dropped or dead-lettered by the broker. */
  readonly expiration?: number;
  /** Exchange to publish to instead of the publisher's route for the topic (`''` is the default exchange). */
  readonly exchange?: string;
  /** Routing key instead of the publisher's route for the topic. */
  readonly routingKey?: string;
}

/** Kafka attributes of one message, applied by `KafkaPublisher` and by `ClientProxyPublisher` over Kafka. */
export interface OutboxKafkaAttributes {
  /**
   * The partition to write to, instead of the partitioner's choice from the key. Per-key order
   * still holds on the outbox side (one in flight per key); on the Kafka side a key then stays
   * in order only if all its messages name the same partition (docs/broker-attributes.md).
   */
  readonly partition?: number;
}

/** MQTT attributes of one message, applied by `ClientProxyPublisher` over the MQTT transport. */
export interface OutboxMqttAttributes {
  /** Quality of service, 0, 1 or 2 (the client's default otherwise). */
  readonly qos?: 0 | 1 | 2;
  /** Whether the broker keeps the message as the topic's retained message. */
  readonly retain?: boolean;
}

/** NATS JetStream attributes of one message, applied by `JetStreamPublisher`. */
export interface OutboxJetStreamAttributes {
  /**
   * The subject to publish to instead of the publisher's route for the topic: a NATS subject
   * without wildcards, which a stream must capture (checked at enqueue: tokens, no `*` or `>`).
   */
  readonly subject?: string;
}

/** Redis Streams attributes of one message, applied by `RedisStreamsPublisher`. */
export interface OutboxRedisAttributes {
  /**
   * The stream key to add the entry to, instead of the publisher's stream for the topic (used
   * as it is: the publisher's `streamPrefix` is not put before it).
   */
  readonly stream?: string;
  /**
   * Trims the entry's stream to about this many entries as it is added (`MAXLEN ~`, or `=` when
   * the publisher trims exactly), instead of the publisher's `trim`.
   */
  readonly maxLen?: number;
}

/** Amazon SQS attributes of one message, applied by `SqsPublisher` (`nestjs-outbox/sqs`). */
export interface OutboxSqsAttributes {
  /**
   * Seconds SQS keeps the message invisible after taking it, 0 to 900 (`DelaySeconds`). Standard
   * queues only: a FIFO queue has a delay per queue, and refuses the message (checked at enqueue).
   */
  readonly delaySeconds?: number;
  /**
   * The `MessageGroupId` instead of the one from the key: on a FIFO queue, the group the message
   * is ordered in; on a standard queue, the fair-queue tenant. 1 to 128 printable ASCII characters.
   */
  readonly messageGroupId?: string;
}

/** Amazon SNS attributes of one message, applied by `SnsPublisher` (`nestjs-outbox/sns`). */
export interface OutboxSnsAttributes {
  /** The `MessageGroupId` instead of the one from the key (FIFO topics order within it). */
  readonly messageGroupId?: string;
  /** The `Subject`: the e-mail subject, and `Subject` in the JSON an SQS subscriber gets. */
  readonly subject?: string;
}

/**
 * Broker attributes of one message, by broker. Each publisher reads its own part and ignores the
 * others, so one message may carry attributes for a RabbitMQ and a Kafka route.
 */
export interface OutboxBrokerAttributes {
  readonly rabbitmq?: OutboxRabbitMqAttributes;
  readonly kafka?: OutboxKafkaAttributes;
  readonly mqtt?: OutboxMqttAttributes;
  readonly jetstream?: OutboxJetStreamAttributes;
  readonly redis?: OutboxRedisAttributes;
  readonly sqs?: OutboxSqsAttributes;
  readonly sns?: OutboxSnsAttributes;
}

/** Options of `@OutboxEvent()`. */
export interface OutboxEventOptions<TEvent = object> {
  /** Destination topic of every instance of the class. */
  topic: string;
  /** Event type name (default: the class name). */
  type?: string;
  /** Ordering key: a property name of the event, or a function of the event. */
  key?: (keyof TEvent & string) | ((event: TEvent) => string | number | null | undefined);
  /** Headers added to every instance: fixed, or computed from the event. */
  headers?: Record<string, string> | ((event: TEvent) => Record<string, string>);
  /**
   * Makes enqueueing idempotent: a property name of the event, or a function of it, giving a
   * business identity (see `OutboxMessage.dedupeKey`).
   */
  dedupeKey?: (keyof TEvent & string) | ((event: TEvent) => string | undefined);
  /**
   * The tenant of every instance: a property name of the event, or a function of it (see
   * `OutboxMessage.tenant`). @default undefined (the `tenants.resolve` function's answer)
   */
  tenant?: (keyof TEvent & string) | ((event: TEvent) => string | undefined);
  /**
   * Broker attributes of every instance: fixed, or computed from the event (see
   * `OutboxMessage.attributes`). @default undefined
   */
  attributes?: OutboxBrokerAttributes | ((event: TEvent) => OutboxBrokerAttributes | undefined);
  /**
   * Makes the event binary: `encode` turns an instance into the bytes stored and published with
   * this content type (e.g. an Avro or Protobuf encoder). Both or neither. @default undefined
   */
  contentType?: string;
  /** Encodes an instance as bytes; required with `contentType`. @default undefined */
  encode?: (event: TEvent) => Uint8Array;
  /**
   * `false` stores instances with plain `JSON.stringify`, skipping the walk that rejects values
   * JSON would drop or alter: for event classes your app already validates (e.g. with
   * class-validator). @default true
   */
  validatePayload?: boolean;
  /**
   * How the dispatcher treats messages of this type (retries, dead letters, retention, expiry).
   * Metadata only: an instance applies it once the class is listed in its `events` option.
   * @default undefined (the module's defaults)
   */
  policy?: OutboxEventPolicy;
  /**
   * Personal data in every instance: its subject (a property name or a function of the event)
   * and the fields that hold it, sealed at enqueue with the module's `erasure` option
   * (docs/erasure.md). @default undefined (nothing sealed)
   */
  personal?: OutboxEventPersonalData<TEvent>;
}

/** Per-call options of `OutboxService.enqueue()`. */
export type EnqueueOptions = OutboxSchedule;
