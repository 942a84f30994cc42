import type { OutboxHeaders } from './outbox-message.interface';

/** A claimed message as the dispatcher hands it to a publisher. */
export interface OutboxRecord {
  /** Row id: the claim order. */
  readonly id: string;
  /** Stable UUIDv7 of the message; consumers deduplicate on it. */
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  /** The payload exactly as serialised at enqueue time (JSON text). */
  readonly payload: string;
  readonly headers: OutboxHeaders;
  /**
   * Attempts started, this one included: counted when a dispatcher claims the message, so an
   * attempt cut short by a crash counts too; an outage or shutdown gives its attempt back.
   */
  readonly attempts: number;
  /** When the message was enqueued (database clock). */
  readonly createdAt: Date;
}
