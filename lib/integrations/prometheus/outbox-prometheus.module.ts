import { Module, type DynamicModule } from '@nestjs/common';
import { OutboxMetricsSampler } from './outbox-metrics.sampler';
import type { OutboxPrometheusOptions } from './outbox-prometheus.options';
import { OutboxMetrics } from './outbox.metrics';

/**
 * Provides {@link OutboxMetrics} (globally, so `OutboxModule.forRootAsync` can inject it for its
 * `observer` option) and samples the gauges from `OutboxService.stats()` while the app runs.
 */
@Module({})
export class OutboxPrometheusModule {
  static forRoot(options: OutboxPrometheusOptions = {}): DynamicModule {
    return {
      module: OutboxPrometheusModule,
      global: true,
      providers: [
        { provide: OutboxMetrics, useFactory: () => new OutboxMetrics(options) },
        OutboxMetricsSampler,
      ],
      exports: [OutboxMetrics],
    };
  }
}
