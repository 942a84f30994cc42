/** A message's place in its key's sequence (`x-outbox-key` and `x-outbox-sequence`). */
export interface SequencedMessage {
  readonly key: string;
  /** 1, 2, 3… per key, in the producer's commit order (`ordering.sequence`). */
  readonly sequence: number;
}

/**
 * How a message stands against the last one seen of its key: `next` (last + 1, or 1 for a key
 * never seen), `duplicate` (the last one again), `gap` (an earlier one not seen yet) or
 * `out-of-order` (older than the last one seen).
 */
export type SequenceStatus = 'next' | 'duplicate' | 'gap' | 'out-of-order';

/** What a check found, and which number of the key was expected. */
export interface SequenceCheck {
  readonly status: SequenceStatus;
  readonly expected: number;
}

/**
 * What a message with a gap before it does: `accept` it at once (reported as `gap`), `hold` it
 * up to `holdMs` for its predecessor and then accept it, or `reject` it with
 * `SequenceGapError` (so that the broker redelivers it later).
 */
export type SequenceGapPolicy = 'hold' | 'accept' | 'reject';

/** Options of the inbox's gap guard and of `SequenceGuard`. */
export interface SequenceOptions {
  /** What a message with a gap before it does. @default 'accept' */
  onGap?: SequenceGapPolicy;
  /** How long `hold` waits for the predecessor, in ms (1 to 600000). @default 5000 */
  holdMs?: number;
}

/** Where `SequenceGuard` keeps the last number seen of each key. */
export interface SequenceStore {
  /** The last number accepted for `key`, or undefined for a key never seen. */
  lastSeen(key: string): Promise<number | undefined> | number | undefined;
  /** Records `sequence` as the last accepted for `key` (never lowers it). */
  record(key: string, sequence: number): Promise<void> | void;
}
