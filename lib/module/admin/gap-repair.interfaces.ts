import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';

/**
 * Gap repair (docs/gap-repair.md): a consumer whose gap guard saw a key jump (41, then 43) asks
 * the producer's outbox for the missing numbers, and the producer sends exactly those messages
 * again. These are the request and the answer, whatever carries them (the HTTP route of
 * `nestjs-outbox/gap-repair` today; a topic would carry the same two objects).
 */
export interface GapRepairRequest {
  /** The topic the consumer reads: the producer numbers per topic and key. */
  readonly topic: string;
  /** The message key whose numbers are missing. */
  readonly key: string;
  /** The missing numbers (`x-outbox-sequence`), each a positive integer, no repeats. */
  readonly sequences: readonly number[];
  /** Who asks (the inbox's consumer name), for the audit log: 1 to 128 characters. */
  readonly consumer: string;
}

/**
 * What the producer did with a request. `answered`: each number asked is in exactly one list.
 * `rate-limited`: nothing was read or sent; ask again after `retryAfterMs`.
 */
export interface GapRepairAnswer {
  readonly status: 'answered' | 'rate-limited';
  /** Sent again now: a copy of each is queued, with the original's number and key. */
  readonly resent: readonly number[];
  /**
   * Not delivered yet at the producer (queued, retrying, or a copy sent for an earlier request
   * not delivered, or delivered less than `resendAfterMs` ago): it should come without another
   * copy.
   */
  readonly pending: readonly number[];
  /** Dead-lettered at the producer: it will not come unless an operator retries it. */
  readonly dead: readonly number[];
  /**
   * No row holds it any more: the cleaner deleted it without an archive (or its archive row is
   * gone), or the key never had that number. It will never come: stop waiting for it.
   */
  readonly gone: readonly number[];
  /** The audit entry of the copies (`x-outbox-redrive-id` on each); null when none was sent. */
  readonly repairId: string | null;
  /** With `rate-limited`: when to ask again, in ms. Null otherwise. */
  readonly retryAfterMs: number | null;
}

/**
 * The port a consumer asks through: one request, one answer. `httpGapRepairClient()`
 * (`nestjs-outbox/inbox`) is the HTTP one; another transport is another object with this method.
 * It rejects when the request could not be made or answered (the inbox then keeps holding and
 * asks again later).
 */
export interface GapRepairClient {
  request(request: GapRepairRequest): Promise<GapRepairAnswer>;
}

/** How the producer answers (`OutboxAdmin.gapRepairer()`, `OutboxGapRepairModule`). */
export interface OutboxGapRepairOptions {
  /**
   * Requests answered per second on this instance, on average (a token bucket); one past it is
   * answered `rate-limited` without a read. @default 5
   */
  readonly ratePerSecond?: number;
  /** Requests answered at once before the rate applies. @default 20 */
  readonly burst?: number;
  /**
   * A number whose repair copy was delivered less than this long ago (database clock) is
   * answered `pending`, not sent again: the copy is probably still on its way (a broker queue
   * behind messages the consumer holds unacknowledged). Past it, a request sends it again (the
   * copy was lost too). @default 5000
   */
  readonly resendAfterMs?: number;
  /** The most numbers one request may ask for, 1 to 10000. @default 100 */
  readonly maxSequences?: number;
  /**
   * The audit table the copies are recorded in (as re-drives, scope `gap-repair`); it must exist
   * (`outbox schema migrate --audit`, `new OutboxAuditStore(sqlPort).ensure()`). @default the admin's `auditTable`, else `outbox_console_audit`
   */
  readonly auditTable?: OutboxAuditTableOptions;
}
