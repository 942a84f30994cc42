import type { OutboxRecord } from '../message/outbox-record.interface';

/** Summary of one dispatch batch. */
export interface OutboxBatchReport {
  readonly claimed: number;
  readonly published: number;
  readonly retried: number;
  readonly deadLettered: number;
  /** Handed back without an attempt (outage or shutdown). */
  readonly released: number;
  /** Rows whose lease had been taken over before settling (fenced off). */
  readonly fenced: number;
  readonly durationMs: number;
}

/** A message the broker acknowledged, as `onPublished` sees it. */
export type OutboxPublishedRecord = OutboxRecord & {
  /**
   * Milliseconds from enqueue to the broker's acknowledgement: the message's age at its claim
   * on the database clock, plus the claim and publish on this process's clock.
   */
  readonly latencyMs: number;
};

/**
 * Hooks for metrics and tracing. Every member is optional; a hook must not throw (errors are
 * logged and ignored so that observability never stops delivery).
 */
export interface OutboxObserver {
  onBatch?(report: OutboxBatchReport): void;
  onPublished?(records: readonly OutboxPublishedRecord[]): void;
  onRetry?(record: OutboxRecord, error: unknown, delayMs: number): void;
  onDeadLetter?(record: OutboxRecord, error: unknown): void;
  onOutage?(error: unknown, pauseMs: number): void;
  onLeasesReleased?(count: number): void;
  /**
   * A batch still publishing lost its lease (lease renewal: a renewal found its rows taken over,
   * or none landed before the lease's end): its `count` messages stop publishing.
   */
  onLeaseLost?(count: number, reason: string): void;
  onPurged?(status: 'delivered' | 'dead', count: number): void;
}
