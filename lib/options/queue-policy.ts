import type { OutboxQueuePolicy } from '../store/ports/outbox-store.port';

/** `ordering.maxRun`'s default (outbox-defaults.ts states it for the docs). */
export const DEFAULT_MAX_RUN = 50;

/** `dispatcher.batchSize`'s default, for stores made without the options (tools, tests). */
const DEFAULT_BATCH_SIZE = 500;

/**
 * The one place the `ordering` options become the queue's rules, which the store's SQL, the
 * dispatcher's verdicts, enqueue's key locks and the admin's blocked-key listings all follow.
 * Omitted options mean the defaults: ordered, and a dead message blocks its key.
 */
export function queuePolicyOf(
  ordering?: {
    readonly enabled?: boolean;
    readonly onDeadLetter?: 'block' | 'skip';
    readonly maxRun?: number;
    readonly deadLetterExceptions?: readonly string[];
  },
  batchSize = DEFAULT_BATCH_SIZE,
): OutboxQueuePolicy {
  const exceptions = ordering?.deadLetterExceptions ?? [];
  return {
    ordered: ordering?.enabled ?? true,
    deadBlocksKey: (ordering?.onDeadLetter ?? 'block') === 'block',
    maxRun: ordering?.maxRun ?? DEFAULT_MAX_RUN,
    batchSize,
    ...(exceptions.length > 0 ? { deadLetterExceptions: exceptions } : {}),
  };
}

/**
 * Whether a dead message of `eventType` blocks the later messages of its key under `policy`:
 * the module's rule, unless the type's policy says otherwise.
 */
export function deadBlocksKeyOf(policy: OutboxQueuePolicy, eventType: string): boolean {
  const exception = policy.deadLetterExceptions?.includes(eventType) ?? false;
  return exception ? !policy.deadBlocksKey : policy.deadBlocksKey;
}

/**
 * How many waiting messages of each key a settle that advanced `keys` keys promotes: the keys'
 * share of one batch (the next claim takes about that many of each), at least one, at most
 * `maxRun`. Promoting more would only get the rest parked again by the next claim: with 100 hot
 * keys and runs of 50, each batch promoted 5 000 rows to take 200 and park 4 800 back (bench P16).
 */
export function promotionRun(policy: OutboxQueuePolicy, keys: number): number {
  return Math.max(1, Math.min(policy.maxRun, Math.ceil(policy.batchSize / Math.max(1, keys))));
}
