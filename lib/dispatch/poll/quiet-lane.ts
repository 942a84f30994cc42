import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { OUTBOX_HEADER_TENANT } from '../../outbox.constants';
import type { Claimer } from './claimer';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { WakeUps } from '../wake-ups';

/** What the quiet lane drives. */
export interface QuietLaneParts {
  readonly claimer: Pick<Claimer, 'claim'>;
  readonly wakeUps: Pick<WakeUps, 'before'>;
  /** Publishes a claimed batch and settles the outcome; never throws. */
  readonly pipeline: Pick<DeliveryPipeline, 'deliver'>;
  /** A drain's poll tick: how long the lane waits without a wake-up before it claims. */
  readonly pollIntervalMs: number;
  readonly stopping: () => boolean;
  /** Whether a wake-up came during the loop's last claim (the runner's request). */
  readonly woken: () => boolean;
}

/** `free`: no batch of the lane in flight. `busy`: one is publishing. */
export type QuietLaneState = 'free' | 'busy';

/**
 * One batch in flight beside the claim loop's `batchesInFlight`, for the tenants that have no
 * message in any batch in flight (`tenants.fair`, docs/tenants.md). With the loop's slots full
 * of a busy tenant's backlog, a quiet tenant's message otherwise waits for a slot to free and
 * rides in a full batch (bench P22). Its claim is the tenant-fair claim narrowed to the quiet
 * tenants, under the same lease and fence; per-key order holds as in any claim, since a share's
 * claim finds the heads of its keys looking at every row of the key.
 */
export class QuietLane {
  /** How many records of each tenant (null: none) the batches in flight hold. */
  private readonly busy = new Map<string | null, number>();
  private batch: Promise<OutboxBatchReport> | undefined;
  private publishedCount = 0;

  constructor(private readonly parts: QuietLaneParts) {}

  get state(): QuietLaneState {
    return this.batch === undefined ? 'free' : 'busy';
  }

  /** Messages published by the lane's batches settled so far. */
  get published(): number {
    return this.publishedCount;
  }

  /** Counts the tenants of a batch in flight until its report is in. */
  track(
    records: readonly OutboxRecord[],
    report: Promise<OutboxBatchReport>,
  ): Promise<OutboxBatchReport> {
    const tenants = records.map(tenantOf);
    for (const tenant of tenants) this.busy.set(tenant, (this.busy.get(tenant) ?? 0) + 1);
    return report.finally(() => {
      for (const tenant of tenants) {
        const left = (this.busy.get(tenant) ?? 1) - 1;
        if (left > 0) this.busy.set(tenant, left);
        else this.busy.delete(tenant);
      }
    });
  }

  /**
   * While the loop's slots are full, until `oldest` settles: each wake-up (a commit, a notify,
   * the poll's tick) claims for the lane while it is free.
   */
  async whileFull(oldest: Promise<unknown> | undefined): Promise<void> {
    const { claimer, wakeUps, pipeline, pollIntervalMs, stopping } = this.parts;
    // A commit during the claim that filled the slots woke nothing that waits yet.
    let lookNow = this.parts.woken();
    while (this.batch === undefined && !stopping()) {
      if (!lookNow && !(await wakeUps.before(oldest, pollIntervalMs))) return;
      if (stopping()) return;
      const started = performance.now();
      const claimed = await claimer.claim(new Set(this.busy.keys()));
      // Only parked followers: their window is free now, so look again at once.
      lookNow = claimed === 'parked';
      if (claimed === 'idle' || claimed === 'in-flight') {
        // Nothing quiet was due: a busy tenant's stream of commits would otherwise have the
        // lane claim back to back. It rests as long as that claim took, at most half its time.
        await settledOrAfter(oldest, performance.now() - started);
        continue;
      }
      if (typeof claimed === 'string') continue;
      const batch = this.track(claimed.records, pipeline.deliver(claimed, 'claim loop', started));
      this.batch = batch.then((report) => {
        this.publishedCount += report.published;
        this.batch = undefined;
        return report;
      });
    }
  }

  /** Waits for the lane's batch, if one is in flight. */
  async settle(): Promise<void> {
    await this.batch;
  }
}

/** Waits until `batch` settles or `ms` have passed, whichever is first. */
async function settledOrAfter(batch: Promise<unknown> | undefined, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      batch?.catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function tenantOf(record: OutboxRecord): string | null {
  return record.headers[OUTBOX_HEADER_TENANT] ?? null;
}
