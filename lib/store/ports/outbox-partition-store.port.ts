import type { ClaimedRecord, Settlement } from './outbox-store.port';

/** A partition held by this instance, and the fencing generation it holds it at. */
export type PartitionFence = ReadonlyMap<number, string>;

/** One read of an owner's partitions: due rows in id order, nothing written. */
export interface OwnedRead {
  /** Due pending rows of the partitions read, in id order, at most the limit. */
  readonly records: readonly ClaimedRecord[];
  /** Each record's partition, by its id. */
  readonly partitions: ReadonlyMap<string, number>;
  /**
   * The ids of the records queued behind an earlier message of their key that is not pending
   * and due (backing off, waiting or dead under `'block'`): not to be published yet.
   */
  readonly held: ReadonlySet<string>;
}

/**
 * Partitioned delivery's use of the database (schema step 9): the dispatchers' heartbeats, the
 * partitions' owners with their fencing generations, the read that takes no lease and the
 * settle fenced by those generations.
 */
export interface OutboxPartitionStore {
  /**
   * Joins (or beats, when in already) on the database clock; answers the instances alive,
   * those that beat within `timeoutMs`, itself included, in a stable order.
   */
  beat(instance: string, timeoutMs: number): Promise<readonly string[]>;
  /**
   * Takes each of `partitions` that is free, its own, or owned by an instance silent for
   * `timeoutMs`, raising its generation; answers those taken with their new generations.
   */
  take(instance: string, partitions: readonly number[], timeoutMs: number): Promise<PartitionFence>;
  /** Gives partitions up (a handover); their generations stay. */
  release(instance: string, partitions: readonly number[]): Promise<void>;
  /** The partitions this instance owns now, with their generations. */
  owned(instance: string): Promise<PartitionFence>;
  /** Leaves: gives up every partition and removes the heartbeat. */
  leave(instance: string): Promise<void>;
  /**
   * Reads the due pending rows of `partitions`, in id order, at most `limit`, without the ids in
   * `skip.ids` (in flight) and the rows of the keys in `skip.keys` (in flight, or known to be
   * held back), so that a key's backlog does not fill the read: no lock, no write.
   */
  readOwned(
    partitions: readonly number[],
    limit: number,
    skip: { readonly ids: readonly string[]; readonly keys: readonly string[] },
  ): Promise<OwnedRead>;
  /**
   * Settles rows read by `readOwned` while this instance holds their partitions at the
   * generations of `fence`; a row whose partition moved on is left as it is. Answers how many
   * rows were settled.
   */
  settleOwned(
    instance: string,
    fence: PartitionFence,
    settlement: Settlement,
    deleteDelivered: boolean,
  ): Promise<number>;
}
