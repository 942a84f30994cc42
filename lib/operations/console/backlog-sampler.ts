import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { OutboxAdmin } from '../admin/outbox.admin';
import type { OutboxTopicCounts } from '../admin/outbox-admin.interfaces';

/** The undelivered backlog at one instant, per topic and in total. */
export interface BacklogSample {
  readonly at: Date;
  readonly pending: number;
  readonly waiting: number;
  readonly leased: number;
  readonly dead: number;
  readonly oldestPendingAgeMs: number | null;
  readonly byTopic: readonly OutboxTopicCounts[];
}

const HOUR_MS = 3_600_000;
const ON_DEMAND_MAX_AGE_MS = 10_000;

/**
 * Samples the backlog every `intervalMs` and keeps the last hour in memory, so that a page
 * shows counts without counting the table per request, and the chart needs no table of its
 * own. Each sample is one grouped count of the undelivered rows plus `stats()`. The history
 * starts when the app does and is this instance's own.
 */
export class BacklogSampler {
  private readonly samples: BacklogSample[] = [];
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<BacklogSample> | null = null;
  private readonly logger = new Logger('OutboxConsole');

  constructor(
    private readonly admin: OutboxAdmin,
    private readonly intervalMs: number,
  ) {}

  start(): void {
    if (this.intervalMs === 0 || this.timer !== null) return;
    const tick = (): void => {
      this.sample().catch((error: unknown) =>
        this.logger.warn(`Backlog sample failed: ${describeError(error)}`),
      );
    };
    tick();
    this.timer = setInterval(tick, this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }

  /** The newest sample, taken now when there is none recent enough. */
  async latest(): Promise<BacklogSample> {
    const last = this.samples[this.samples.length - 1];
    const maxAge = this.intervalMs === 0 ? ON_DEMAND_MAX_AGE_MS : this.intervalMs * 2;
    if (last !== undefined && Date.now() - last.at.getTime() <= maxAge) return last;
    return this.sample();
  }

  /** The samples of the last hour, oldest first. */
  history(): readonly BacklogSample[] {
    return this.samples;
  }

  /** One sample at a time: a slow count is not stacked up by the timer and the pages. */
  private sample(): Promise<BacklogSample> {
    this.running ??= this.take().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async take(): Promise<BacklogSample> {
    const [counts, stats] = await Promise.all([
      this.admin.counts({ status: ['pending', 'waiting', 'dead'] }),
      this.admin.stats(),
    ]);
    const sample: BacklogSample = {
      at: new Date(),
      pending: counts.pending,
      waiting: counts.waiting,
      leased: counts.leased,
      dead: counts.dead,
      oldestPendingAgeMs: stats.oldestPendingAgeMs,
      byTopic: counts.byTopic,
    };
    this.samples.push(sample);
    const since = sample.at.getTime() - HOUR_MS;
    while ((this.samples[0]?.at.getTime() ?? Infinity) < since) this.samples.shift();
    return sample;
  }
}
