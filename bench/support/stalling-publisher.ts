/**
 * A publisher that, once asked (`stall()`), hangs in its next publish: it publishes the first half
 * of that batch for real, reports what the batch held, and never answers (T1 then SIGKILLs the
 * process mid-batch, as a crash would leave it). Until then it is the wrapped publisher.
 */
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';

/** What the hung batch held when it stopped answering. */
export interface StalledBatch {
  /** Every message id of the batch (leased by this process). */
  readonly claimed: string[];
  /** Those the broker confirmed before the hang (the first half). */
  readonly published: string[];
}

export class StallingPublisher implements OutboxPublisher {
  private armed = false;
  private hung = false;

  constructor(
    private readonly inner: OutboxPublisher,
    private readonly onStall: (batch: StalledBatch) => void,
  ) {}

  /** The next publish call hangs. */
  stall(): void {
    this.armed = true;
  }

  async publish(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    if (!this.armed || this.hung || records.length < 2) return this.inner.publish(records, signal);
    this.hung = true;
    const half = records.slice(0, Math.ceil(records.length / 2));
    const outcomes = await this.inner.publish(half, signal);
    this.onStall({
      claimed: records.map((r) => r.messageId),
      published: half.filter((_, i) => outcomes[i]?.ok === true).map((r) => r.messageId),
    });
    return new Promise<never>(() => undefined);
  }

  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }

  ping(signal: AbortSignal): Promise<void> {
    return this.inner.ping?.(signal) ?? Promise.resolve();
  }
}
