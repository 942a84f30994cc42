import { register, type Registry } from 'prom-client';
import { OptionChecks } from '../../options/option-checks';

/** Options of `OutboxMetrics` and `OutboxPrometheusModule.forRoot()`. */
export interface OutboxPrometheusOptions {
  /** Registry the metrics are registered in. @default prom-client's global `register` */
  registry?: Registry;
  /** Prepended to every metric name, e.g. `'orders_'` gives `orders_outbox_pending_messages`. @default '' */
  prefix?: string;
  /**
   * How often the gauges are read from `OutboxService.stats()`, which counts the table: never on
   * a scrape, so a large table is not counted once per scrape. 0 turns the gauges off (e.g. on
   * all instances but one, since every instance would report the same table). @default 15000
   */
  sampleIntervalMs?: number;
  /** Buckets of `outbox_batch_duration_seconds`. @default 5 ms to 10 s (prom-client's defaults) */
  batchDurationBuckets?: readonly number[];
  /** Buckets of `outbox_message_latency_seconds`. @default 5 ms to 5 min */
  latencyBuckets?: readonly number[];
  /** Buckets of `outbox_delivery_attempts`. @default [1, 2, 3, 5, 10, 20, 50, 100] */
  attemptsBuckets?: readonly number[];
  /**
   * Adds a `tenant` label (the message's `x-outbox-tenant`, '' without one) to the published,
   * retried and dead-lettered counters, for at most `maxTenants` distinct tenants: the others
   * are labelled `other` (docs/tenants.md). @default off (no tenant label)
   */
  tenantLabel?: { maxTenants: number };
}

/** {@link OutboxPrometheusOptions} with the defaults applied and every value checked. */
export interface ResolvedOutboxPrometheusOptions {
  readonly registry: Registry;
  readonly prefix: string;
  readonly sampleIntervalMs: number;
  readonly batchDurationBuckets: readonly number[];
  readonly latencyBuckets: readonly number[];
  readonly attemptsBuckets: readonly number[];
  /** null: no tenant label. */
  readonly tenantLabel: { readonly maxTenants: number } | null;
}

const checks = new OptionChecks('OutboxMetrics');
const OPTION_KEYS = {
  '': {
    registry: true,
    prefix: true,
    sampleIntervalMs: true,
    batchDurationBuckets: true,
    latencyBuckets: true,
    attemptsBuckets: true,
    tenantLabel: true,
  },
  tenantLabel: { maxTenants: true },
} as const satisfies {
  '': Record<keyof OutboxPrometheusOptions, true>;
  tenantLabel: Record<keyof NonNullable<OutboxPrometheusOptions['tenantLabel']>, true>;
};
// Prometheus' metric name grammar: the prefix must keep every name valid.
const METRIC_NAME_PREFIX = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
// Enqueue to acknowledgement spans a poll interval, retries and outages: up to minutes.
const DEFAULT_LATENCY_BUCKETS = [...DEFAULT_BUCKETS, 30, 60, 300];
const DEFAULT_ATTEMPTS_BUCKETS = [1, 2, 3, 5, 10, 20, 50, 100];

/** Applies the defaults and rejects bad values with an `OutboxOptionsError` that says how to fix them. */
export function resolveOutboxPrometheusOptions(
  options: OutboxPrometheusOptions = {},
): ResolvedOutboxPrometheusOptions {
  if (options === null || typeof options !== 'object') {
    checks.fail(
      'options',
      `${checks.show(options)} is not an object`,
      'Pass { registry, prefix }.',
    );
  }
  checks.knownKeys(options, OPTION_KEYS);
  const {
    registry = register,
    prefix = '',
    batchDurationBuckets = DEFAULT_BUCKETS,
    latencyBuckets = DEFAULT_LATENCY_BUCKETS,
    attemptsBuckets = DEFAULT_ATTEMPTS_BUCKETS,
  } = options;
  if (
    typeof registry !== 'object' ||
    registry === null ||
    typeof registry.registerMetric !== 'function'
  ) {
    checks.fail(
      'registry',
      'it is not a prom-client Registry',
      'Pass new Registry() from prom-client, or leave it out for the global register.',
    );
  }
  if (typeof prefix !== 'string' || (prefix !== '' && !METRIC_NAME_PREFIX.test(prefix))) {
    checks.fail(
      'prefix',
      `${checks.show(prefix)} would not make valid metric names`,
      'Use letters, digits, underscores and colons, not starting with a digit, e.g. "orders_".',
    );
  }
  checkBuckets('batchDurationBuckets', batchDurationBuckets, 'seconds', '[0.01, 0.05, 0.25, 1, 5]');
  checkBuckets('latencyBuckets', latencyBuckets, 'seconds', '[0.05, 0.25, 1, 5, 60]');
  checkBuckets('attemptsBuckets', attemptsBuckets, 'attempts', '[1, 2, 5, 10]');
  const sampleIntervalMs = checks.integer(
    options.sampleIntervalMs,
    15_000,
    'sampleIntervalMs',
    0,
    86_400_000,
    ' ms',
  );
  if (sampleIntervalMs > 0 && sampleIntervalMs < 100) {
    checks.fail(
      'sampleIntervalMs',
      `${sampleIntervalMs} ms would count the table continuously`,
      'Use 0 (no gauges) or at least 100 ms; the default is 15000.',
    );
  }
  return {
    registry,
    prefix,
    sampleIntervalMs,
    batchDurationBuckets,
    latencyBuckets,
    attemptsBuckets,
    tenantLabel: resolveTenantLabel(options.tenantLabel),
  };
}

function resolveTenantLabel(
  value: OutboxPrometheusOptions['tenantLabel'],
): ResolvedOutboxPrometheusOptions['tenantLabel'] {
  if (value === undefined) return null;
  if (value === null || typeof value !== 'object') {
    checks.fail(
      'tenantLabel',
      `${checks.show(value)} is not an object`,
      'Pass { maxTenants: 100 }, or leave it out for no tenant label.',
    );
  }
  return {
    maxTenants: checks.integer(value.maxTenants, 100, 'tenantLabel.maxTenants', 1, 10_000),
  };
}

function checkBuckets(option: string, buckets: unknown, unit: string, example: string): void {
  if (
    !Array.isArray(buckets) ||
    buckets.length === 0 ||
    buckets.some(
      (b: unknown, i) =>
        typeof b !== 'number' ||
        !Number.isFinite(b) ||
        b <= 0 ||
        (i > 0 && b <= (buckets[i - 1] as number)),
    )
  ) {
    checks.fail(
      option,
      `it is not a non-empty list of increasing positive numbers of ${unit}`,
      `Pass e.g. ${example}, or leave it out for the defaults.`,
    );
  }
}
