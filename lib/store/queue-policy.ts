import type { OutboxQueuePolicy } from './outbox-store.port';

/**
 * The one place the `ordering` options become the queue's rules, which the store's SQL, the
 * dispatcher's verdicts, enqueue's key locks and the admin's blocked-key listings all follow.
 * Omitted options mean the defaults: ordered, and a dead message blocks its key.
 */
export function queuePolicyOf(ordering?: {
  readonly enabled?: boolean;
  readonly onDeadLetter?: 'block' | 'skip';
}): OutboxQueuePolicy {
  return {
    ordered: ordering?.enabled ?? true,
    deadBlocksKey: (ordering?.onDeadLetter ?? 'block') === 'block',
  };
}
