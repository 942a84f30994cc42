/** Injection token of the resolved {@link ResolvedOutboxOptions}. */
export const OUTBOX_OPTIONS = Symbol('nestjs-outbox:options');
/** Injection token of the {@link OutboxStore} the module talks to. */
export const OUTBOX_STORE = Symbol('nestjs-outbox:store');
/** Injection token of the {@link OutboxPublisher} the dispatcher sends through. */
export const OUTBOX_PUBLISHER = Symbol('nestjs-outbox:publisher');
/** Injection token of the {@link OutboxObserver} that receives dispatch events. */
export const OUTBOX_OBSERVER = Symbol('nestjs-outbox:observer');

/** Metadata key written by `@OutboxEvent()` on event classes. */
export const OUTBOX_EVENT_METADATA = 'outbox:event';
/** Metadata key written by `@OnOutboxMessage()` on handler methods. */
export const OUTBOX_HANDLER_METADATA = 'outbox:handler';
/** Metadata key written by `@OnOutboxDeadLetter()` on fallback methods. */
export const OUTBOX_DEAD_LETTER_METADATA = 'outbox:dead-letter';
/** Injection token of the resolved options of `OutboxHandlersModule`. */
export const OUTBOX_HANDLERS_OPTIONS = Symbol('nestjs-outbox:handlers-options');

/** Header names the module writes itself; user headers may not use this prefix. */
export const OUTBOX_HEADER_PREFIX = 'x-outbox-';
export const OUTBOX_HEADER_MESSAGE_ID = 'x-outbox-message-id';
export const OUTBOX_HEADER_TYPE = 'x-outbox-type';
/** The message key, on transports without a key of their own (RabbitMQ). */
export const OUTBOX_HEADER_KEY = 'x-outbox-key';
/**
 * The message's number within its key (1, 2, 3… in commit order), with `ordering.sequence`: a
 * consumer that saw n of a key expects n + 1 next (`SequenceGuard`, the inbox's gap guard).
 */
export const OUTBOX_HEADER_SEQUENCE = 'x-outbox-sequence';
/** The content type of a binary message, on transports without a property of their own (Kafka, NATS). */
export const OUTBOX_HEADER_CONTENT_TYPE = 'x-outbox-content-type';
/**
 * The claim check (docs/claim-check.md): the id the payload of a message over its threshold is
 * kept under, written at enqueue (the message's own id) and carried by its re-drive copies, so
 * that every copy sends the one stored payload.
 */
export const OUTBOX_HEADER_CLAIM_CHECK_ID = 'x-outbox-claim-check-id';
/** Where a message sent by reference has its payload (`s3://bucket/key`, `outbox-table:<id>`). */
export const OUTBOX_HEADER_CLAIM_CHECK = 'x-outbox-claim-check';
/**
 * The erasure (docs/erasure.md): the id of the data key a message's personal data is sealed
 * under, on each sealed message and on the erasure notice of that key.
 */
export const OUTBOX_HEADER_SUBJECT_KEY = 'x-outbox-subject-key';
/** The event type of the erasure notice enqueued on each key that carried an erased subject. */
export const OUTBOX_ERASURE_NOTICE_TYPE = 'outbox.subject-erased';
/** The message's tenant, with the `tenants` option on (docs/tenants.md). */
export const OUTBOX_HEADER_TENANT = 'x-outbox-tenant';
/**
 * On a re-drive copy spread by a rate: how many milliseconds after the re-drive wrote it the copy
 * falls due. Its age (a type's `maxAgeMs`, `retry.maxAgeMs`) counts from then, not from the write.
 */
export const OUTBOX_HEADER_REDRIVE_DELAY = 'x-outbox-redrive-delay-ms';
/**
 * How a re-drive lane begins in `message_key` (store/rows/redrive-lane.ts); a key that begins so
 * is refused at enqueue. Internal: never exported.
 */
export const REDRIVE_LANE_PREFIX = '\u0001redrive-lane:';

/** The name of an `OutboxModule` registered without one. */
export const DEFAULT_OUTBOX_NAME = 'default';
/** Injection token of the module instance's name, one per `OutboxModule` in the app. */
export const OUTBOX_INSTANCE_NAME = Symbol('nestjs-outbox:instance-name');

/**
 * The name a worker's timer is listed under in the app's `SchedulerRegistry`:
 * `nestjs-outbox:dispatcher`, or `nestjs-outbox:audit:dispatcher` for the instance named audit.
 */
export function outboxTimerName(
  instance: string,
  worker: 'dispatcher' | 'unlocker' | 'cleaner' | 'partitions',
): string {
  return instance === DEFAULT_OUTBOX_NAME
    ? `nestjs-outbox:${worker}`
    : `nestjs-outbox:${instance}:${worker}`;
}
/**
 * The instance's `OutboxConnection` (`lib/store/outbox-connection.ts`): the `connection` option,
 * or `typeormConnection` over its `dataSource`.
 */
export const OUTBOX_CONNECTION = Symbol('nestjs-outbox:connection');
/** The SQL port (`lib/store/sql-port.ts`) of the instance's connection. */
export const OUTBOX_SQL = Symbol('nestjs-outbox:sql');
/**
 * The instance's commit channel (`CommitWatcher`, `lib/dispatch/poll/commit-watcher.ts`): the service
 * marks the transactions that enqueued, the dispatcher listens for their commits.
 */
export const OUTBOX_COMMITS = Symbol('nestjs-outbox:commits');

/**
 * The delivery mode's plan, made once from the resolved options (`planDelivery`): the
 * dispatcher's source of work, and what the workers and enqueue do (`DeliveryDuties`).
 */
export const OUTBOX_DELIVERY_PLAN = Symbol('nestjs-outbox:delivery-plan');

/** The `@OnOutboxDeadLetter()` methods the dispatcher calls before it dead-letters a message. */
export const OUTBOX_DEAD_LETTER_FALLBACKS = Symbol('nestjs-outbox:dead-letter-fallbacks');
