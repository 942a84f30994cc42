import type { OutboxPartitionOwner } from '../../store/ports/outbox-store.port';
import { toDate } from '../../store/rows/outbox-row.mapper';
import type {
  OutboxDeliveryPartition,
  OutboxDeliveryPartitionDispatcher,
  OutboxDeliveryPartitionMove,
  OutboxDeliveryPartitionsInUse,
} from './outbox-admin.interfaces';

/** A row of `AdminDialect.deliveryPartitions.partitions`. */
export interface DeliveryPartitionRow {
  readonly partition: number | string;
  readonly owner: string | null;
  readonly generation: string | number;
  readonly since: Date | string;
}

/** A row of `AdminDialect.deliveryPartitions.dispatchers`. */
export interface DeliveryDispatcherRow {
  readonly instance: string;
  readonly label: string | null;
  readonly valid_ms: number | string | null;
  readonly working: boolean | null;
  readonly joined_at: Date | string | null;
  readonly heartbeat_age_ms: number | string | null;
}

/** `0-84, 170-255` for the sorted partition numbers given. */
export function partitionRanges(partitions: readonly number[]): string {
  const ranges: string[] = [];
  let start: number | undefined;
  let end = -2;
  for (const p of partitions) {
    if (start !== undefined && p === end + 1) {
      end = p;
      continue;
    }
    if (start !== undefined) ranges.push(start === end ? `${start}` : `${start}-${end}`);
    start = p;
    end = p;
  }
  if (start !== undefined) ranges.push(start === end ? `${start}` : `${start}-${end}`);
  return ranges.join(', ');
}

const numberOrNull = (v: number | string | null): number | null => (v === null ? null : Number(v));

/**
 * The operator's view of a table's delivery partitions from three reads: the store's owners
 * (who holds how many, and whether each heartbeat holds by its owner's own promise), each
 * partition's row (owner, generation, since) and each dispatcher process's row. Null when no
 * dispatcher delivers the table by partitions: no partition has an owner and no process's
 * heartbeat holds.
 */
export function summarizeDeliveryPartitions(
  owners: readonly OutboxPartitionOwner[],
  partitionRows: readonly DeliveryPartitionRow[],
  dispatcherRows: readonly DeliveryDispatcherRow[],
): OutboxDeliveryPartitionsInUse | null {
  const partitions: OutboxDeliveryPartition[] = partitionRows.map((r) => ({
    partition: Number(r.partition),
    owner: r.owner,
    generation: Number(r.generation),
    since: toDate(r.since),
  }));
  const total = partitions.length;
  const held = new Map<string, OutboxDeliveryPartition[]>();
  for (const p of partitions) {
    if (p.owner !== null) held.set(p.owner, [...(held.get(p.owner) ?? []), p]);
  }
  const ownerOf = new Map(owners.flatMap((o) => (o.owner === null ? [] : [[o.owner, o] as const])));
  const rowOf = new Map(dispatcherRows.map((r) => [r.instance, r]));
  const ids = [...new Set([...rowOf.keys(), ...ownerOf.keys(), ...held.keys()])].sort();
  const dispatchers = ids.map((id): OutboxDeliveryPartitionDispatcher => {
    const owner = ownerOf.get(id);
    const row = rowOf.get(id);
    const age =
      row === undefined ? (owner?.heartbeatAgeMs ?? null) : numberOrNull(row.heartbeat_age_ms);
    const validMs = row === undefined ? null : numberOrNull(row.valid_ms);
    // An owner's heartbeat is judged by the store's own read; a process holding nothing by the
    // same rule: its heartbeat holds for what it promised.
    const live =
      owner !== undefined ? owner.live : age !== null && validMs !== null && age < validMs;
    const mine = (held.get(id) ?? []).map((p) => p.partition);
    const since = (held.get(id) ?? []).map((p) => p.since.getTime());
    return {
      id,
      instanceId: row?.label ?? owner?.label ?? null,
      state: !live ? 'gone' : row?.working === false ? 'waiting' : 'delivering',
      heartbeatAgeMs: age === null ? null : Math.round(age),
      validMs,
      joinedAt: row?.joined_at === null || row === undefined ? null : toDate(row.joined_at),
      partitions: mine.length,
      share: total === 0 ? 0 : mine.length / total,
      ranges: partitionRanges(mine),
      lastTakenAt: since.length === 0 ? null : new Date(Math.max(...since)),
    };
  });
  if (held.size === 0 && !dispatchers.some((d) => d.state !== 'gone')) return null;
  const moved = partitions.filter((p) => p.generation > 0);
  const moves = new Map<string, { at: Date; owner: string | null; partitions: number[] }>();
  for (const p of moved) {
    const at = p.since.getTime();
    const key = `${at} ${p.owner ?? ''}`;
    const move = moves.get(key) ?? { at: p.since, owner: p.owner, partitions: [] };
    move.partitions.push(p.partition);
    moves.set(key, move);
  }
  const latest = [...moves.values()]
    .sort(
      (a, b) => b.at.getTime() - a.at.getTime() || (a.partitions[0] ?? 0) - (b.partitions[0] ?? 0),
    )
    .map((m): OutboxDeliveryPartitionMove => ({
      at: m.at,
      owner: m.owner,
      partitions: m.partitions.length,
      ranges: partitionRanges(m.partitions),
    }));
  return {
    inUse: true,
    total,
    dispatchers,
    unowned: partitions.filter((p) => p.owner === null).length,
    partitions,
    moves: {
      total: partitions.reduce((sum, p) => sum + p.generation, 0),
      lastAt: latest[0]?.at ?? null,
      latest,
    },
  };
}
