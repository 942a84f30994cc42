/**
 * Baseline (d): the module's own store in a bare relay's loop. Two lanes, as in the bare relay,
 * each claiming through `OutboxStore.claim` (the module's claim: window, key probes, runs,
 * leases, its transaction and SQL port), parking what the claim reports blocked, publishing the
 * records with one `sendBatch` as the bare relay does, and settling them through
 * `OutboxStore.settle` (fenced, with the promotion). What it leaves out is the dispatcher and
 * the publisher: no deadline, no outcome per message, no retries, no observer. Set beside the
 * lease relay and the module, it tells the store's share of the module's cost from theirs (P2).
 */
import type { Producer } from 'kafkajs';
import type {
  ClaimedRecord,
  OutboxStore,
  Settlement,
} from '../../lib/store/ports/outbox-store.port';
import { claimWindowAfter } from '../../lib/store/shared-sql/claim-window';
import { sleep } from '../../test/support/wait-for';

export interface StoreRelayOptions {
  readonly store: OutboxStore;
  readonly producer: Producer;
  readonly topic: string;
  /** Rows per claim. @default 500 */
  readonly batchSize?: number;
  /** Lanes, each claiming, publishing and settling in turn. @default 2 */
  readonly depth?: number;
  /** Deletes delivered rows at settle instead of marking them. @default false */
  readonly deleteDelivered?: boolean;
}

/** Drains the store's table into `topic`; resolves to the number published. */
export async function storeKafkaRelay(options: StoreRelayOptions): Promise<number> {
  const { store, producer, topic } = options;
  const batchSize = options.batchSize ?? 500;
  let published = 0;
  const lane = async (): Promise<void> => {
    // As the dispatcher does: the wider window after a claim that held rows back.
    let heldBack = true;
    for (;;) {
      const batch = await store.claim({
        limit: batchSize,
        owner: 'store-relay',
        leaseMs: 30_000,
        window: claimWindowAfter(batchSize, heldBack),
      });
      heldBack =
        batch.blockedKeys.length > 0 || batch.inFlightKeys > 0 || (batch.contended ?? 0) > 0;
      if (batch.blockedKeys.length > 0) await store.park(batch.blockedKeys);
      if (batch.records.length === 0) {
        // Held back by the other lane's batch: look again once it has likely settled.
        if (!heldBack) return;
        await sleep(1);
        continue;
      }
      await producer.sendBatch({
        acks: -1,
        topicMessages: [
          {
            topic,
            messages: batch.records.map((r) => ({
              key: r.key,
              value: r.payload,
              headers: { 'x-outbox-message-id': r.messageId },
            })),
          },
        ],
      });
      await store.settle(batch.token, delivered(batch.records), options.deleteDelivered ?? false);
      published += batch.records.length;
    }
  };
  await Promise.all(Array.from({ length: options.depth ?? 2 }, lane));
  return published;
}

/** Every record delivered: its key advanced (the next message of the key may be promoted). */
function delivered(records: readonly ClaimedRecord[]): Settlement {
  const keys = new Set<string>();
  for (const r of records) if (r.key !== null) keys.add(r.key);
  return {
    delivered: records.map((r) => r.id),
    retry: [],
    dead: [],
    release: [],
    advancedKeys: [...keys],
  };
}
