import { refuseUnknownCallOptions } from '../internal/known-keys';
import { checkSequenced, compareSequence, resolveSequenceOptions } from './sequence-check';
import { SequenceGapError } from './sequence-gap.error';
import type {
  SequenceCheck,
  SequencedMessage,
  SequenceGapPolicy,
  SequenceOptions,
  SequenceStore,
} from './sequence.interfaces';

/** The guard's own store: the last number of each key, in this process's memory. */
class MemorySequenceStore implements SequenceStore {
  private readonly last = new Map<string, number>();

  lastSeen(key: string): number | undefined {
    return this.last.get(key);
  }

  record(key: string, sequence: number): void {
    this.last.set(key, Math.max(sequence, this.last.get(key) ?? 0));
  }
}

interface Waiter {
  readonly sequence: number;
  readonly wake: () => void;
}

/**
 * Gap detection for consumers without the inbox: remembers the last number seen of each key
 * (in memory, or in a `store` of yours) and says how each message stands against it. Checks
 * and records of one key must not run concurrently across processes sharing a store: give each
 * key one consumer at a time (a partition, a single-active consumer), as per-key order needs
 * anyway.
 */
export class SequenceGuard {
  private readonly store: SequenceStore;
  private readonly onGap: SequenceGapPolicy;
  private readonly holdMs: number;
  private readonly waiters = new Map<string, Waiter[]>();

  constructor(options: SequenceOptions & { store?: SequenceStore } = {}) {
    refuseUnknownCallOptions('new SequenceGuard()', options, {
      '': { onGap: true, holdMs: true, store: true } satisfies Record<keyof typeof options, true>,
    });
    const resolved = resolveSequenceOptions(options);
    this.onGap = resolved.onGap;
    this.holdMs = resolved.holdMs;
    this.store = options.store ?? new MemorySequenceStore();
  }

  /** How `message` stands against the last number seen of its key; records nothing. */
  async check(message: SequencedMessage): Promise<SequenceCheck> {
    const { key, sequence } = checkSequenced(message);
    return compareSequence(await this.store.lastSeen(key), sequence);
  }

  /**
   * Checks `message` and records it when it moves its key forward (`next`, or `gap` once
   * accepted). A gap follows `onGap`: `accept` at once, `hold` until the predecessor is
   * accepted through this guard or `holdMs` passes (then accepted), `reject` with
   * `SequenceGapError`; `accept(message, { holdMs })` alone holds. Resolves to the check (after the hold, when there was one); on
   * `duplicate` or `out-of-order` nothing is recorded: the caller decides whether to skip it.
   */
  async accept(message: SequencedMessage, options: SequenceOptions = {}): Promise<SequenceCheck> {
    // A hold time given to this call asks for a hold, whatever the guard's own policy.
    const { onGap, holdMs } = resolveSequenceOptions(
      {
        onGap: options.onGap ?? (options.holdMs === undefined ? this.onGap : 'hold'),
        holdMs: options.holdMs ?? this.holdMs,
      },
      'accept',
    );
    const { key, sequence } = checkSequenced(message);
    let found = compareSequence(await this.store.lastSeen(key), sequence);
    if (found.status === 'gap' && onGap === 'reject') {
      throw new SequenceGapError(key, found.expected, sequence);
    }
    if (found.status === 'gap' && onGap === 'hold') {
      await this.waitForPredecessor(key, sequence, holdMs);
      found = compareSequence(await this.store.lastSeen(key), sequence);
    }
    if (found.status === 'next' || found.status === 'gap') {
      await this.store.record(key, sequence);
      this.wake(key, sequence);
    }
    return found;
  }

  /** Resolves once `sequence - 1` of `key` is accepted here, or after `holdMs`. */
  private async waitForPredecessor(key: string, sequence: number, holdMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let waiter: Waiter | undefined;
    await new Promise<void>((resolve) => {
      waiter = { sequence, wake: resolve };
      this.waiters.set(key, [...(this.waiters.get(key) ?? []), waiter]);
      timer = setTimeout(resolve, holdMs);
    });
    clearTimeout(timer);
    const left = (this.waiters.get(key) ?? []).filter((w) => w !== waiter);
    if (left.length === 0) this.waiters.delete(key);
    else this.waiters.set(key, left);
  }

  private wake(key: string, accepted: number): void {
    for (const waiter of this.waiters.get(key) ?? []) {
      if (waiter.sequence <= accepted + 1) waiter.wake();
    }
  }
}
