// nestjs-outbox/prometheus: Prometheus metrics of the outbox (prom-client, an optional peer
// dependency).
export { OutboxPrometheusModule } from './outbox-prometheus.module';
export { OutboxMetrics, type OutboxStatsSource } from './outbox.metrics';
export {
  resolveOutboxPrometheusOptions,
  type OutboxPrometheusOptions,
  type ResolvedOutboxPrometheusOptions,
} from './outbox-prometheus.options';
