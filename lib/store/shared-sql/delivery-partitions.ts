import type { OutboxPartitionOwner } from '../ports/outbox-store.port';

/**
 * How many partitions the key space is cut into (schema step 9). Fixed: a row's partition is
 * stored, and the owners table has one row per partition. 256 is many more than the dispatchers
 * of one table, so partitions spread evenly as instances come and go, and few enough that an
 * instance's set is one small array.
 */
export const DELIVERY_PARTITIONS = 256;

/** Every partition number, in order. */
export const ALL_PARTITIONS: readonly number[] = Array.from(
  { length: DELIVERY_PARTITIONS },
  (_, p) => p,
);

/** Whether `partitions` names every partition, each once (a read may then name none). */
export function namesEveryPartition(partitions: readonly number[]): boolean {
  if (partitions.length !== DELIVERY_PARTITIONS) return false;
  // Asked before every read: a flag per partition, not a Set built each time.
  const seen = new Uint8Array(DELIVERY_PARTITIONS);
  for (const p of partitions) {
    if (!Number.isInteger(p) || p < 0 || p >= DELIVERY_PARTITIONS || seen[p] === 1) return false;
    seen[p] = 1;
  }
  return true;
}

/**
 * The payload of the NOTIFY, on the table's wake-up channel, that says the partitions' shares
 * changed (a process joined, handed partitions over, or left): the listeners beat at once
 * rather than at their next beat. Writers' wake-ups carry none.
 */
export const MEMBERS_NOTICE = 'outbox:members';

/** A row of a database's owners read (`OutboxDeliveryPartitionsPort.owners`), as its driver answers. */
export interface PartitionOwnerRow {
  readonly owner: string | null;
  readonly label: string | null;
  readonly partitions: number | string;
  readonly heartbeat_age_ms: number | string | null;
  /** A boolean (PostgreSQL), or 1 and 0 (MySQL); null for the partitions no one holds. */
  readonly live: boolean | number | string | null;
}

/** One holder of partitions as the admin views show it. */
export function partitionOwnerOf(r: PartitionOwnerRow): OutboxPartitionOwner {
  return {
    owner: r.owner,
    label: r.label,
    partitions: Number(r.partitions),
    heartbeatAgeMs: r.heartbeat_age_ms === null ? null : Math.round(Number(r.heartbeat_age_ms)),
    live: r.live === true || Number(r.live) === 1,
  };
}
