import { randomUUID } from 'node:crypto';
import type { OwnedSettle, PartitionFence, Settlement } from '../../store/ports/outbox-store.port';

/** One fenced settle statement: the owner's id is bound by the caller. */
export type OwnedSettleCall = (
  fence: PartitionFence,
  settlement: Settlement,
  token: string,
) => Promise<OwnedSettle>;

interface Waiting {
  readonly fence: PartitionFence;
  readonly settlement: Settlement;
  readonly resolve: (settle: OwnedSettle) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Writes the settles of a partition owner's batches together (`dispatcher.publishWindow`): while
 * one statement runs, the settles that arrive wait, and the next statement carries all of them,
 * fenced by every partition they touch. A batch learns its own rows' count only when the whole
 * statement changed what it asked for; a statement refused in part (a partition moved on) tells
 * each of its batches that it changed nothing known, so that none takes its rows for settled and
 * the table decides (the next owner reads what was not).
 *
 * A batch trying again after a statement that failed goes alone, with that statement's token:
 * its retries and releases are then written once even if the failed try committed after all.
 */
export class SettleCoalescer {
  private waiting: Waiting[] = [];
  private running = false;
  /** The token a settlement was first tried under, for its tries after a failure. */
  private readonly tried = new WeakMap<Settlement, string>();

  constructor(private readonly call: OwnedSettleCall) {}

  settle(fence: PartitionFence, settlement: Settlement): Promise<OwnedSettle> {
    const token = this.tried.get(settlement);
    if (token !== undefined) return this.call(fence, settlement, token);
    return new Promise<OwnedSettle>((resolve, reject) => {
      this.waiting.push({ fence, settlement, resolve, reject });
      this.next();
    });
  }

  private next(): void {
    if (this.running || this.waiting.length === 0) return;
    this.running = true;
    const { taken, left } = compatible(this.waiting);
    this.waiting = left;
    void this.write(taken).finally(() => {
      this.running = false;
      this.next();
    });
  }

  /** One statement for `taken`; never rejects (each batch hears of a failure itself). */
  private async write(taken: readonly Waiting[]): Promise<void> {
    const token = randomUUID();
    for (const w of taken) this.tried.set(w.settlement, token);
    const fence = new Map<number, string>();
    for (const w of taken) for (const [p, g] of w.fence) fence.set(p, g);
    const merged = taken.length === 1 ? taken[0]?.settlement : mergeSettlements(taken);
    if (merged === undefined) return;
    try {
      const { changed, promoted } = await this.call(fence, merged, token);
      const whole = changed === rowsOf(merged);
      taken.forEach((w, i) => {
        this.tried.delete(w.settlement);
        w.resolve({
          changed: whole ? rowsOf(w.settlement) : 0,
          // Counted once, by the first: the caller only asks whether any were.
          promoted: i === 0 ? promoted : 0,
        });
      });
    } catch (error) {
      for (const w of taken) w.reject(error);
    }
  }
}

/** The rows a settlement names, as the store counts what it changed. */
export function rowsOf(s: Settlement): number {
  return s.delivered.length + s.retry.length + s.dead.length + s.release.length;
}

/**
 * The waiting settles that can share one statement: those whose fences agree on every partition
 * they share (a partition lost and taken again has a new generation: its older batches go in a
 * statement of their own).
 */
function compatible(waiting: readonly Waiting[]): { taken: Waiting[]; left: Waiting[] } {
  const fence = new Map<number, string>();
  const taken: Waiting[] = [];
  const left: Waiting[] = [];
  for (const w of waiting) {
    let fits = true;
    for (const [p, g] of w.fence) {
      const seen = fence.get(p);
      if (seen !== undefined && seen !== g) fits = false;
    }
    if (!fits) {
      left.push(w);
      continue;
    }
    for (const [p, g] of w.fence) fence.set(p, g);
    taken.push(w);
  }
  return { taken, left };
}

function mergeSettlements(taken: readonly Waiting[]): Settlement {
  const all = taken.map((w) => w.settlement);
  const keys = new Set<string>();
  for (const s of all) for (const k of s.advancedKeys) keys.add(k);
  const fallback = all.flatMap((s) => s.fallback ?? []);
  const created = all.flatMap((s) => (s.createdRange === undefined ? [] : [s.createdRange]));
  return {
    delivered: all.flatMap((s) => s.delivered),
    retry: all.flatMap((s) => s.retry),
    dead: all.flatMap((s) => s.dead),
    release: all.flatMap((s) => s.release),
    advancedKeys: [...keys],
    ...(fallback.length === 0 ? {} : { fallback }),
    ...(created.length === 0
      ? {}
      : {
          createdRange: {
            from: new Date(Math.min(...created.map((c) => c.from.getTime()))),
            to: new Date(Math.max(...created.map((c) => c.to.getTime()))),
          },
        }),
  };
}
