/**
 * The retry settings one event type may override; each has the meaning of the module option of
 * the same name under `retry`.
 */
export interface OutboxEventRetryPolicy {
  /** Failed attempts after which a message of this type is dead-lettered (or `Infinity`). @default retry.maxAttempts */
  maxAttempts?: number;
  /** Delay before the first retry. @default retry.initialDelayMs */
  initialDelayMs?: number;
  /** Upper bound of one retry delay; at least `initialDelayMs`. @default max(retry.maxDelayMs, initialDelayMs) */
  maxDelayMs?: number;
  /** Growth of the delay per attempt. @default retry.factor */
  factor?: number;
  /** Fraction of each delay that is randomised. @default retry.jitter */
  jitter?: number;
}

/**
 * How the dispatcher treats the messages of one event type, over the module's defaults: their
 * retries, what their dead letter does to their key, how long their rows are kept, and how long
 * they may wait before delivery (docs/ordering-and-dead-letters.md, "Per-event policies").
 * Declared on the class (`@OutboxEvent({ policy })`, applied by the instances that list the class
 * in `events`) or by type name in the module's `policies`.
 */
export interface OutboxEventPolicy {
  /** Retry settings of this type; those left out are the module's `retry` options. @default the module's */
  retry?: OutboxEventRetryPolicy;
  /** What a dead message of this type does to the later messages of its key. @default ordering.onDeadLetter */
  onDeadLetter?: 'block' | 'skip';
  /** Keep delivered rows of this type this long (ms). @default cleaner.deliveredRetentionMs */
  deliveredRetentionMs?: number;
  /** Delete dead rows of this type after this long (ms); null keeps them. @default cleaner.deadRetentionMs */
  deadRetentionMs?: number | null;
  /**
   * Message expiry: a message of this type not delivered within this long of its enqueue (ms) is
   * dead-lettered unpublished, reason `expired`, whether it is claimed for its first attempt or
   * a retry; a retry that would fall past it is dead-lettered at once. 0: no expiry. @default 0
   */
  maxAgeMs?: number;
  /**
   * The claim check of this type: payloads larger than this many bytes are sent by reference
   * (docs/claim-check.md); null sends every payload of the type in its message. Needs the
   * module's `claimCheck` option. @default claimCheck.thresholdBytes
   */
  claimCheckThresholdBytes?: number | null;
}
