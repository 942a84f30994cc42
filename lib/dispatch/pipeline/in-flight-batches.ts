import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';

/** `empty`: no batch in flight. `room`: some, and room for another. `full`: `limit` of them. */
export type InFlightState = 'empty' | 'room' | 'full';

/** A batch handed to `deliver`; `done` once its report is in. */
interface InFlightBatch {
  readonly report: Promise<OutboxBatchReport>;
  done: boolean;
}

/** Whether `batch` settles within `ms` (false at once without a batch). */
async function settledWithin(batch: Promise<unknown> | undefined, ms: number): Promise<boolean> {
  if (batch === undefined) return false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([batch.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The batches one drain has publishing at once (up to `batchesInFlight`), settled oldest first,
 * and how many messages they published.
 */
export class InFlightBatches {
  private readonly batches: InFlightBatch[] = [];
  private publishedCount = 0;

  constructor(private readonly limit: number) {}

  get state(): InFlightState {
    if (this.batches.length === 0) return 'empty';
    return this.batches.length >= this.limit ? 'full' : 'room';
  }

  get size(): number {
    return this.batches.length;
  }

  /** Messages published by the batches settled so far. */
  get published(): number {
    return this.publishedCount;
  }

  /** The oldest batch's report, or undefined when none is in flight. */
  get oldest(): Promise<OutboxBatchReport> | undefined {
    return this.batches[0]?.report;
  }

  /** Whether the oldest batch is still publishing (false when none is in flight). */
  get oldestPublishing(): boolean {
    return this.batches[0]?.done === false;
  }

  add(report: Promise<OutboxBatchReport>): void {
    const batch: InFlightBatch = {
      done: false,
      report: report.finally(() => {
        batch.done = true;
      }),
    };
    this.batches.push(batch);
  }

  /** Whether the oldest batch settles within `ms`. */
  oldestSettledWithin(ms: number): Promise<boolean> {
    return settledWithin(this.oldest, ms);
  }

  /** Waits for the oldest batch and takes it out; undefined when none was in flight. */
  async settleOldest(): Promise<OutboxBatchReport | undefined> {
    const report = await this.batches.shift()?.report;
    if (report !== undefined) this.publishedCount += report.published;
    return report;
  }

  async settleAll(): Promise<void> {
    while (this.batches.length > 0) await this.settleOldest();
  }
}
