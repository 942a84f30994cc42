import type { KnownOptionKeys } from '../internal/did-you-mean';
import { refuseUnknownCallOptions } from '../internal/known-keys';
import type { OutboxEventPersonalData } from './erasure/personal-data';
import type { OutboxEventPolicy, OutboxEventRetryPolicy } from './outbox-event-policy';
import type { OutboxEventOptions } from './outbox-message.interface';

// The keys of `@OutboxEvent()`'s options, declared with `satisfies` so that the build fails when
// an options interface gains a key these lists lack. `headers` and `attributes` are not listed
// as groups: the first holds the app's own header names, the second is checked at enqueue.

/** The keys of an event type's policy, on the class or in the module's `policies`. */
export const EVENT_POLICY_KEYS = {
  retry: true,
  onDeadLetter: true,
  deliveredRetentionMs: true,
  deadRetentionMs: true,
  maxAgeMs: true,
  claimCheckThresholdBytes: true,
} as const satisfies Record<keyof OutboxEventPolicy, true>;

/** The keys of a policy's `retry`. */
export const EVENT_POLICY_RETRY_KEYS = {
  maxAttempts: true,
  initialDelayMs: true,
  maxDelayMs: true,
  factor: true,
  jitter: true,
} as const satisfies Record<keyof OutboxEventRetryPolicy, true>;

/** The keys of personal data (`@OutboxEvent({ personal })`, a plain message's `personal`). */
export const PERSONAL_DATA_KEYS = {
  subject: true,
  fields: true,
} as const satisfies Record<keyof OutboxEventPersonalData, true>;

const OUTBOX_EVENT = {
  '': {
    topic: true,
    type: true,
    key: true,
    headers: true,
    dedupeKey: true,
    tenant: true,
    attributes: true,
    contentType: true,
    encode: true,
    validatePayload: true,
    policy: true,
    personal: true,
  } satisfies Record<keyof OutboxEventOptions, true>,
  policy: EVENT_POLICY_KEYS,
  'policy.retry': EVENT_POLICY_RETRY_KEYS,
  personal: PERSONAL_DATA_KEYS,
} as const satisfies KnownOptionKeys;

/**
 * Refuses, with `OutboxOptionsError` when the class is defined, a key `@OutboxEvent()` does not
 * read: `{ topic, dedupKey }` would enqueue every instance without the idempotency it asked
 * for, `{ personal: { subject, field } }` seal the whole payload, and a policy's misspelt key
 * waited for the bootstrap of an instance that lists the class in `events` (never, if none did).
 */
export function refuseUnknownOutboxEventOptions(options: unknown): void {
  refuseUnknownCallOptions('@OutboxEvent()', options, OUTBOX_EVENT);
}
