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
  /** JSON-serialisable body. */
  payload: TPayload;
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
   * `false` stores instances with plain `JSON.stringify`, skipping the walk that rejects values
   * JSON would drop or alter: for event classes your app already validates (e.g. with
   * class-validator). @default true
   */
  validatePayload?: boolean;
}

/** Per-call options of `OutboxService.enqueue()`. */
export type EnqueueOptions = OutboxSchedule;
