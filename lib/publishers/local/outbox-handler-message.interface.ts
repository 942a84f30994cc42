import type { OutboxHeaders } from '../../message/outbox-message.interface';

/**
 * What an `@OnOutboxMessage()` handler receives: one committed outbox message, its payload
 * parsed from the stored JSON. `TPayload` is the shape you expect, not a checked type: the
 * payload is a plain object as `JSON.parse` returns it (no class instance, dates as strings);
 * validate it where a wrong shape must be refused.
 */
export interface OutboxHandlerMessage<TPayload = unknown> {
  /** Stable id (UUIDv7) of the message, the same on every redelivery: the inbox key. */
  readonly messageId: string;
  readonly topic: string;
  /** The ordering key, or null. */
  readonly key: string | null;
  /** The event type (`@OutboxEvent`'s `type`, or the class name). */
  readonly type: string;
  /**
   * The payload, parsed from JSON; for a binary message (`contentType` set) its bytes as a
   * `Buffer`. A fresh copy for each handler.
   */
  readonly payload: TPayload;
  /**
   * The payload exactly as stored, e.g. to verify a signature: JSON text, or the bytes of a
   * binary message.
   */
  readonly rawPayload: string | Buffer;
  /** The content type of a binary message; absent for JSON. */
  readonly contentType?: string;
  /** The message's tenant (its `x-outbox-tenant` header, docs/tenants.md); absent without one. */
  readonly tenant?: string;
  /** The message's headers (its own and the `headersProvider`'s). */
  readonly headers: OutboxHeaders;
  /** Deliveries started, this one included (1 on the first). */
  readonly attempts: number;
  /** When the message was enqueued (database clock). */
  readonly createdAt: Date;
  /**
   * Aborted when the dispatcher stops waiting for this delivery: its publish timeout or lease
   * deadline passed, or the app is shutting down past `shutdownTimeoutMs`. The delivery then
   * counts as failed or released, so the message comes again: stop work and roll back.
   */
  readonly signal: AbortSignal;
}

/** Which messages an `@OnOutboxMessage()` handler receives. */
export interface OnOutboxMessageOptions {
  /** The topic, as the message was enqueued to it. */
  readonly topic: string;
  /** Only messages of this event type; without it, every message of the topic. */
  readonly type?: string;
}
