import { createHash } from 'node:crypto';
import { ALL_PARTITIONS } from '../../store/shared-sql/delivery-partitions';

/**
 * Which partitions `instance` should own among the `live` instances: each partition goes to the
 * instance with the highest score for it (rendezvous hashing). Every instance computes the same
 * answer from the same list, with no coordination, and an instance joining or leaving moves only
 * the partitions it gains or loses (about 1/n of them), not a reshuffle of all.
 */
export function partitionsFor(instance: string, live: readonly string[]): number[] {
  const others = live.filter((i) => i !== instance);
  if (others.length === 0) return [...ALL_PARTITIONS];
  const mine: number[] = [];
  for (const partition of ALL_PARTITIONS) {
    const own = score(instance, partition);
    if (others.every((other) => compare(own, score(other, partition), instance, other) > 0)) {
      mine.push(partition);
    }
  }
  return mine;
}

// Cached: the same few instances are scored for every partition on every heartbeat.
const scores = new Map<string, Buffer>();

function score(instance: string, partition: number): Buffer {
  const at = `${partition}\u0000${instance}`;
  let value = scores.get(at);
  if (value === undefined) {
    value = createHash('sha256').update(at).digest().subarray(0, 8);
    if (scores.size > 100_000) scores.clear();
    scores.set(at, value);
  }
  return value;
}

/** Higher score wins; a tie (never in practice) goes to the larger name. */
function compare(a: Buffer, b: Buffer, ai: string, bi: string): number {
  return Buffer.compare(a, b) || (ai < bi ? -1 : ai > bi ? 1 : 0);
}
