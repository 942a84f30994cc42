import { TenantLabels } from './tenant-labels';
import { Logger } from '@nestjs/common';
import { Counter, Gauge, Histogram, type Metric, type Registry } from 'prom-client';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type {
  OutboxBatchReport,
  OutboxObserver,
  OutboxPublishedRecord,
} from '../../observers/outbox-observer.interface';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxStats } from '../../store/ports/outbox-store.port';
import { describeError } from '../../internal/describe-error';
import {
  resolveOutboxPrometheusOptions,
  type OutboxPrometheusOptions,
  type ResolvedOutboxPrometheusOptions,
} from './outbox-prometheus.options';

/** Where the gauges are read from: `OutboxService`, or anything with its `stats()`. */
export interface OutboxStatsSource {
  stats(): Promise<OutboxStats>;
}

/** Where the log-tailing gauges are read from: the dispatcher (`logLagStatus()`). */
export interface OutboxLogLagSource {
  logLagStatus(): Promise<{
    readonly retainedBytes: number | null;
    readonly active: boolean;
    readonly positionLosses?: number;
    readonly problem?: string | null;
  } | null>;
}

/**
 * Prometheus metrics of an outbox. Pass it as the module's `observer` (alone, or with your own
 * through `combineObservers`) for the counters and the batch histogram; the gauges are refreshed
 * from `stats()` every `sampleIntervalMs` once sampling starts (`OutboxPrometheusModule` starts it
 * at bootstrap; without the module, call `startSampling(outboxService)`).
 *
 * | metric | type | |
 * |---|---|---|
 * | `outbox_messages_published_total{topic}` | counter | acknowledged by the broker (`tenant` too with `tenantLabel`) |
 * | `outbox_messages_retried_total{topic}` | counter | failed, rescheduled |
 * | `outbox_messages_dead_lettered_total{topic}` | counter | moved to `dead` |
 * | `outbox_outages_total` | counter | publisher or database unreachable: claims paused |
 * | `outbox_batch_duration_seconds` | histogram | claim to settle, per batch |
 * | `outbox_message_latency_seconds{topic}` | histogram | enqueue to broker acknowledgement, per message |
 * | `outbox_delivery_attempts{topic}` | histogram | attempts a delivered message took |
 * | `outbox_pending_messages` | gauge | waiting for delivery, in flight included |
 * | `outbox_oldest_pending_age_seconds` | gauge | age of the oldest of those; 0 when none |
 * | `outbox_dead_messages` | gauge | dead letters in the table |
 * | `outbox_log_retained_bytes` | gauge | log tailing: WAL the replication slot keeps (sampled) |
 * | `outbox_log_reader_active` | gauge | log tailing: 1 when this process reads the slot, 0 standing by |
 * | `outbox_log_position_losses_total` | counter | log tailing: the slot found dropped or invalidated, and made again |
 * | `outbox_log_unreadable` | gauge | log tailing: 1 while the slot is missing or invalidated and not made again |
 */
export class OutboxMetrics implements OutboxObserver {
  /** The registry the metrics live in: expose it with `await registry.metrics()`. */
  readonly registry: Registry;
  private readonly options: ResolvedOutboxPrometheusOptions;
  private readonly logger = new Logger(OutboxMetrics.name);
  private readonly published: Counter<'topic' | 'tenant'>;
  private readonly retried: Counter<'topic' | 'tenant'>;
  private readonly deadLettered: Counter<'topic' | 'tenant'>;
  /** The `tenant` label's values (`tenantLabel`); undefined without the label. */
  private readonly tenants: TenantLabels | undefined;
  private readonly outages: Counter;
  private readonly batchDuration: Histogram;
  private readonly latency: Histogram<'topic'>;
  private readonly deliveryAttempts: Histogram<'topic'>;
  private readonly pending: Gauge;
  private readonly oldestPendingAge: Gauge;
  private readonly dead: Gauge;
  private readonly logRetained: Gauge;
  private readonly logActive: Gauge;
  private readonly logLosses: Counter;
  private readonly logUnreadable: Gauge;
  /** The source's count of losses at the last sample (the counter adds what is new). */
  private logLossesSeen = 0;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> | undefined;

  constructor(options: OutboxPrometheusOptions = {}) {
    this.options = resolveOutboxPrometheusOptions(options);
    this.registry = this.options.registry;
    const { prefix, tenantLabel } = this.options;
    const registers = [this.registry];
    this.tenants = tenantLabel === null ? undefined : new TenantLabels(tenantLabel.maxTenants);
    const counted: ('topic' | 'tenant')[] = tenantLabel === null ? ['topic'] : ['topic', 'tenant'];
    const names: string[] = [];
    const named = <T extends Metric>(name: string, create: (full: string) => T): T => {
      const full = `${prefix}${name}`;
      if (this.registry.getSingleMetric(full) !== undefined) {
        // Undo this instance's own registrations, so that a corrected retry does not clash too.
        names.forEach((n) => this.registry.removeSingleMetric(n));
        throw new OutboxOptionsError(
          `Invalid OutboxMetrics option "registry": it already has a metric named ${full}. ` +
            'Give each outbox a registry of its own or a distinct prefix, or reuse one OutboxMetrics.',
          'registry',
        );
      }
      names.push(full);
      return create(full);
    };
    this.published = named(
      'outbox_messages_published_total',
      (name) =>
        new Counter({
          name,
          help: 'Outbox messages the broker acknowledged, by topic.',
          labelNames: counted,
          registers,
        }),
    );
    this.retried = named(
      'outbox_messages_retried_total',
      (name) =>
        new Counter({
          name,
          help: 'Outbox publishes that failed and were rescheduled, by topic.',
          labelNames: counted,
          registers,
        }),
    );
    this.deadLettered = named(
      'outbox_messages_dead_lettered_total',
      (name) =>
        new Counter({
          name,
          help: 'Outbox messages moved to the dead-letter state, by topic.',
          labelNames: counted,
          registers,
        }),
    );
    this.outages = named(
      'outbox_outages_total',
      (name) =>
        new Counter({
          name,
          help: 'Times the dispatcher paused claiming because the broker or the database could not be reached.',
          registers,
        }),
    );
    this.batchDuration = named(
      'outbox_batch_duration_seconds',
      (name) =>
        new Histogram({
          name,
          help: 'Duration of one dispatch batch, from claim to settle.',
          buckets: [...this.options.batchDurationBuckets],
          registers,
        }),
    );
    this.latency = named(
      'outbox_message_latency_seconds',
      (name) =>
        new Histogram({
          name,
          help: 'Time from enqueue to the broker acknowledging the message, by topic.',
          labelNames: ['topic'],
          buckets: [...this.options.latencyBuckets],
          registers,
        }),
    );
    this.deliveryAttempts = named(
      'outbox_delivery_attempts',
      (name) =>
        new Histogram({
          name,
          help: 'Attempts a delivered outbox message took (1: first try), by topic.',
          labelNames: ['topic'],
          buckets: [...this.options.attemptsBuckets],
          registers,
        }),
    );
    this.pending = named(
      'outbox_pending_messages',
      (name) =>
        new Gauge({
          name,
          help: 'Outbox messages waiting for delivery, in flight included (sampled).',
          registers,
        }),
    );
    this.oldestPendingAge = named(
      'outbox_oldest_pending_age_seconds',
      (name) =>
        new Gauge({
          name,
          help: 'Age of the oldest outbox message waiting for delivery; 0 when none (sampled).',
          registers,
        }),
    );
    this.dead = named(
      'outbox_dead_messages',
      (name) =>
        new Gauge({
          name,
          help: 'Dead-lettered outbox messages in the table (sampled).',
          registers,
        }),
    );
    this.logRetained = named(
      'outbox_log_retained_bytes',
      (name) =>
        new Gauge({
          name,
          help: "Log tailing: bytes of WAL the outbox's replication slot keeps, not yet acknowledged (sampled).",
          registers,
        }),
    );
    this.logActive = named(
      'outbox_log_reader_active',
      (name) =>
        new Gauge({
          name,
          help: "Log tailing: 1 when this process reads the outbox's replication slot, 0 when it stands by (sampled).",
          registers,
        }),
    );
    this.logLosses = named(
      'outbox_log_position_losses_total',
      (name) =>
        new Counter({
          name,
          help: "Log tailing: times the outbox's replication slot was found dropped or invalidated and made again (sampled); what committed meanwhile went through the sweep.",
          registers,
        }),
    );
    this.logUnreadable = named(
      'outbox_log_unreadable',
      (name) =>
        new Gauge({
          name,
          help: "Log tailing: 1 while the outbox's replication slot is missing or invalidated and not made again (sampled).",
          registers,
        }),
    );
  }

  onPublished(records: readonly OutboxPublishedRecord[]): void {
    // One increment per topic, not per message: a batch is often a few topics.
    const byTopic = new Map<string, number>();
    for (const record of records) {
      byTopic.set(record.topic, (byTopic.get(record.topic) ?? 0) + 1);
      const labels = { topic: record.topic };
      this.latency.observe(labels, Math.max(0, record.latencyMs) / 1_000);
      this.deliveryAttempts.observe(labels, record.attempts);
    }
    if (this.tenants === undefined) {
      byTopic.forEach((count, topic) => this.published.inc({ topic }, count));
      return;
    }
    const byLabels = new Map<string, { topic: string; tenant: string; n: number }>();
    for (const record of records) {
      const tenant = this.tenants.of(record);
      const id = JSON.stringify([record.topic, tenant]);
      const entry = byLabels.get(id);
      if (entry === undefined) byLabels.set(id, { topic: record.topic, tenant, n: 1 });
      else entry.n += 1;
    }
    byLabels.forEach(({ topic, tenant, n }) => this.published.inc({ topic, tenant }, n));
  }

  onRetry(record: OutboxRecord): void {
    this.retried.inc(this.labelsOf(record));
  }

  onDeadLetter(record: OutboxRecord): void {
    this.deadLettered.inc(this.labelsOf(record));
  }

  /** A counter's labels: the topic, and the tenant with `tenantLabel`. */
  private labelsOf(record: OutboxRecord): { topic: string; tenant?: string } {
    return this.tenants === undefined
      ? { topic: record.topic }
      : { topic: record.topic, tenant: this.tenants.of(record) };
  }

  onOutage(): void {
    this.outages.inc();
  }

  onBatch(report: OutboxBatchReport): void {
    this.batchDuration.observe(report.durationMs / 1_000);
  }

  /** Sets the gauges from one `stats()` reading. */
  record(stats: OutboxStats): void {
    this.pending.set(stats.pending + stats.leased);
    this.oldestPendingAge.set((stats.oldestPendingAgeMs ?? 0) / 1_000);
    this.dead.set(stats.dead);
  }

  /**
   * Reads `source.stats()` now and then every `sampleIntervalMs` (nothing when it is 0), never
   * two readings at once. A failed reading is logged and the gauges keep their last values.
   */
  startSampling(source: OutboxStatsSource, log?: OutboxLogLagSource): void {
    if (this.timer !== undefined || this.options.sampleIntervalMs === 0) return;
    const tick = (): void => {
      if (this.sampling !== undefined) return;
      this.sampling = Promise.all([this.sample(source), this.sampleLog(log)])
        .then(() => undefined)
        .finally(() => (this.sampling = undefined));
    };
    this.timer = setInterval(tick, this.options.sampleIntervalMs);
    // Sampling alone must not keep a process alive.
    this.timer.unref();
    tick();
  }

  /** Stops sampling; resolves once a reading in progress has finished. */
  async stopSampling(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.sampling;
  }

  /** Sets the log-tailing gauges; nothing when the dispatcher polls. */
  private async sampleLog(log: OutboxLogLagSource | undefined): Promise<void> {
    try {
      const lag = await log?.logLagStatus();
      if (lag === undefined || lag === null) return;
      if (lag.retainedBytes !== null) this.logRetained.set(lag.retainedBytes);
      this.logActive.set(lag.active ? 1 : 0);
      this.logUnreadable.set(lag.problem == null ? 0 : 1);
      const losses = lag.positionLosses ?? 0;
      if (losses > this.logLossesSeen) this.logLosses.inc(losses - this.logLossesSeen);
      this.logLossesSeen = losses;
    } catch (error) {
      this.logger.warn(`Reading the replication slot's lag failed: ${describeError(error)}`);
    }
  }

  private async sample(source: OutboxStatsSource): Promise<void> {
    try {
      this.record(await source.stats());
    } catch (error) {
      this.logger.warn(
        `Reading outbox stats for the gauges failed; they keep their last values: ${describeError(error)}`,
      );
    }
  }
}
