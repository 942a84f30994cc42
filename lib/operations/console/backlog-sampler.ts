import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { OutboxAdmin } from '../../module/admin/outbox.admin';
import type { OutboxTopicCounts } from '../../module/admin/outbox-admin.interfaces';

/** What one topic looked like at a sample. */
export interface BacklogTopic extends OutboxTopicCounts {
  /** Messages delivered in the minute before the sample: the delivery rate per minute. */
  readonly deliveredLastMinute: number;
  /** Messages dead-lettered in the minute before the sample. */
  readonly deadLastMinute: number;
  readonly oldestPendingAgeMs: number | null;
}

/** The undelivered backlog and the throughput at one instant, per topic and in total. */
export interface BacklogSample {
  readonly at: Date;
  readonly pending: number;
  readonly waiting: number;
  readonly leased: number;
  readonly dead: number;
  readonly oldestPendingAgeMs: number | null;
  readonly deliveredLastMinute: number;
  readonly deadLastMinute: number;
  readonly byTopic: readonly BacklogTopic[];
}

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
const ON_DEMAND_MAX_AGE_MS = 10_000;

/**
 * Samples the backlog every `intervalMs` and keeps the last hour in memory, so that a page
 * shows counts without counting the table per request, and the charts need no table of their
 * own. Each sample is one grouped count of the undelivered rows and `OutboxAdmin.activity` over
 * the last minute (rows delivered or dead-lettered in it, through the indexes on delivered_at
 * and dead_at, and the oldest pending one): never the delivered history. The history starts
 * when the app does and is this instance's own.
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
    const [counts, activity] = await Promise.all([
      this.admin.counts({ status: ['pending', 'waiting', 'dead'] }),
      this.admin.activity(MINUTE_MS),
    ]);
    const flows = new Map(activity.map((a) => [a.topic, a]));
    const topics = [...new Set([...counts.byTopic.map((t) => t.topic), ...flows.keys()])].sort();
    const byTopic = topics.map((topic): BacklogTopic => {
      const c = counts.byTopic.find((t) => t.topic === topic);
      const flow = flows.get(topic);
      return {
        topic,
        pending: c?.pending ?? 0,
        waiting: c?.waiting ?? 0,
        leased: c?.leased ?? 0,
        delivered: c?.delivered ?? 0,
        dead: c?.dead ?? 0,
        deliveredLastMinute: flow?.delivered ?? 0,
        deadLastMinute: flow?.dead ?? 0,
        oldestPendingAgeMs: flow?.oldestPendingAgeMs ?? null,
      };
    });
    const ages = byTopic.flatMap((t) =>
      t.oldestPendingAgeMs === null ? [] : [t.oldestPendingAgeMs],
    );
    const sample: BacklogSample = {
      at: new Date(),
      pending: counts.pending,
      waiting: counts.waiting,
      leased: counts.leased,
      dead: counts.dead,
      oldestPendingAgeMs: ages.length === 0 ? null : Math.max(...ages),
      deliveredLastMinute: byTopic.reduce((n, t) => n + t.deliveredLastMinute, 0),
      deadLastMinute: byTopic.reduce((n, t) => n + t.deadLastMinute, 0),
      byTopic,
    };
    this.samples.push(sample);
    const since = sample.at.getTime() - HOUR_MS;
    while ((this.samples[0]?.at.getTime() ?? Infinity) < since) this.samples.shift();
    return sample;
  }
}
