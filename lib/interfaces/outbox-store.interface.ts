import type { EntityManager } from 'typeorm';
import type { OutboxRecord } from './outbox-record.interface';

/** A message ready to be written, already validated and serialised. */
export interface NewOutboxRow {
  readonly messageId: string;
  readonly topic: string;
  readonly key: string | null;
  readonly type: string;
  readonly payload: string;
  readonly headers: string;
  /** Absolute due time, if the caller gave one. */
  readonly availableAt: Date | null;
  /** Delay after the database's `now`, if the caller gave one. */
  readonly delayMs: number | null;
}

/** What a claim returns: the rows, the lease token that settles them, and their ages. */
export interface ClaimedBatch {
  readonly token: string;
  readonly records: readonly ClaimedRecord[];
}

export interface ClaimedRecord extends OutboxRecord {
  /** Milliseconds since enqueue, on the database clock. */
  readonly ageMs: number;
}

/** The outcome of a batch, grouped so that each group is one statement. */
export interface Settlement {
  readonly delivered: readonly string[];
  readonly retry: readonly { id: string; delayMs: number; error: string }[];
  readonly dead: readonly { id: string; error: string }[];
  /** Handed back untouched: no attempt counted (outage, shutdown). */
  readonly release: readonly string[];
}

export interface OutboxStats {
  readonly pending: number;
  readonly leased: number;
  readonly delivered: number;
  readonly dead: number;
  /** Age of the oldest pending message in milliseconds, or null when none is pending. */
  readonly oldestPendingAgeMs: number | null;
}

export interface ClaimOptions {
  readonly limit: number;
  readonly owner: string;
  readonly leaseMs: number;
  /** Only the head of each key is claimable. */
  readonly ordered: boolean;
  /** A dead message blocks the later messages of its key. */
  readonly deadBlocksKey: boolean;
}

/**
 * The database port. Implementations exist per dialect; every statement is parameterised and
 * uses the database clock for leases.
 */
export interface OutboxStore {
  /** Writes rows in the caller's transaction; with `lockKeys`, serialises writers per key first. */
  insert(manager: EntityManager, rows: readonly NewOutboxRow[], lockKeys: boolean): Promise<void>;
  claim(options: ClaimOptions): Promise<ClaimedBatch>;
  /** Applies a batch outcome; only rows still holding `token` change. Returns rows changed. */
  settle(token: string, settlement: Settlement, deleteDelivered: boolean): Promise<number>;
  /** Clears expired leases; returns how many. */
  releaseExpired(): Promise<number>;
  /** Deletes up to `limit` rows of `status` older than `olderThanMs`; returns how many. */
  purge(status: 'delivered' | 'dead', olderThanMs: number, limit: number): Promise<number>;
  /** Puts dead messages back to pending with attempts reset: those with these message ids, or all. */
  requeueDead(messageIds?: readonly string[]): Promise<number>;
  stats(): Promise<OutboxStats>;
  /** Wake-ups from other processes (PostgreSQL LISTEN). Resolves to an unsubscribe function. */
  listen?(onWake: () => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}
