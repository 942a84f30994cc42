/**
 * P16: ordered throughput on hot keys. The P1 drain (PostgreSQL → RabbitMQ, ordering on) of a
 * backlog spread over 10 and over 100 keys, against the same backlog with a key per message,
 * interleaved run by run and checked at the consumer (order per key, duplicates, missing). A
 * claim takes runs of consecutive messages of a key (`ordering.maxRun`, default 50); for the
 * record, 10 keys with `maxRun: 1` (one message per key per batch, as before runs) on a tenth
 * of the backlog. Then the same three backlogs PostgreSQL → Kafka (`KafkaPublisher`, the P2
 * drain), counted in the topic (per-key order on Kafka is the ordering tests' to prove).
 */
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { SERVICES, named } from '../support/config';
import { checkedRabbitDrain } from '../support/checked-drain';
import {
  analyse,
  dropOutboxTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { deleteTopic, ensureKafka, resetTopic, topicCount } from '../support/kafka';
import {
  drainAll,
  measured,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from '../support/outbox-app';
import { resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { ratio, round } from '../support/stats';

const TABLE = named('bench_p16');
/**
 * The streaming variants' own table: two `'partitions'` dispatchers on one table divide its
 * partitions, and one drained by hand would drain only its share.
 */
const STREAM_TABLE = named('bench_p16_stream');
const tableOf = (v: { readonly window?: number }): string =>
  v.window === undefined ? TABLE : STREAM_TABLE;
const QUEUE = named('bench.p16', '.');

interface Variant {
  readonly name: string;
  readonly label: string;
  /** Keys the backlog cycles through; null: one per message. */
  readonly keys: number | null;
  readonly maxRun: number;
  /** Share of the backlog size. */
  readonly share: number;
  /** `dispatcher.claims`; the default ('leases') when absent. */
  readonly claims?: 'partitions';
  /** `dispatcher.publishWindow` (with 'partitions'): publishing as a stream. */
  readonly window?: number;
}

const VARIANTS: readonly Variant[] = [
  { name: 'key_per_message', label: 'a key per message', keys: null, maxRun: 50, share: 1 },
  { name: 'keys_100', label: '100 keys', keys: 100, maxRun: 50, share: 1 },
  { name: 'keys_10', label: '10 keys', keys: 10, maxRun: 50, share: 1 },
  { name: 'keys_10_run_1', label: '10 keys, maxRun 1', keys: 10, maxRun: 1, share: 0.1 },
  // The same two backlogs under delivery partitions (issue 76: 10 hot keys ≥ 0.5 × a key per
  // message, each against its own mode's key per message).
  {
    name: 'partitions_key_per_message',
    label: "dispatcher.claims 'partitions', a key per message",
    keys: null,
    maxRun: 50,
    share: 1,
    claims: 'partitions',
  },
  {
    name: 'partitions_keys_10',
    label: "dispatcher.claims 'partitions', 10 keys",
    keys: 10,
    maxRun: 50,
    share: 1,
    claims: 'partitions',
  },
  // Publishing as a stream (issue 76, step 2), against its own key per message.
  {
    name: 'stream_key_per_message',
    label: "'partitions', publishWindow 1 000, a key per message",
    keys: null,
    maxRun: 50,
    share: 1,
    claims: 'partitions',
    window: 1_000,
  },
  {
    name: 'stream_keys_10',
    label: "'partitions', publishWindow 1 000, 10 keys",
    keys: 10,
    maxRun: 50,
    share: 1,
    claims: 'partitions',
    window: 1_000,
  },
];

/** The app a variant drains with: one per (maxRun, claims). */
const appOf = (v: Variant): string => `${v.maxRun}:${v.claims ?? 'leases'}:${v.window ?? 0}`;

export async function p16(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p1Messages;
  const result = newResult(
    'P16',
    `Hot keys: drain ${n.toLocaleString('en-US')} msgs PostgreSQL → RabbitMQ over 10 and 100 keys vs a key per message (ordering on)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetOutboxTable(pg, STREAM_TABLE);
  await resetQueue(rabbit, QUEUE);
  const apps = new Map<string, OutboxApp>();
  const rates: number[][] = VARIANTS.map(() => []);
  let problems = 0;
  try {
    for (const variant of VARIANTS) {
      if (apps.has(appOf(variant))) continue;
      const { maxRun, claims, window } = variant;
      apps.set(
        appOf(variant),
        await startOutboxApp({
          dataSource: pg,
          tableName: tableOf(variant),
          publisher: rabbitPublisher(QUEUE),
          autoStart: false,
          instanceId: `bench-p16-run-${maxRun}${claims === undefined ? '' : `-${claims}`}${window === undefined ? '' : `-w${window}`}`,
          ordering: { enabled: true, maxRun },
          ...(claims === undefined
            ? {}
            : {
                dispatcher: { claims, ...(window === undefined ? {} : { publishWindow: window }) },
              }),
        }),
      );
    }
    // Warm-up of each app (connections, plans); not measured.
    const warmed = new Set<OutboxApp>();
    for (const variant of VARIANTS) {
      const app = apps.get(appOf(variant));
      if (app === undefined || warmed.has(app)) continue;
      warmed.add(app);
      const table = tableOf(variant);
      await truncateOutbox(pg, table);
      await seedOutbox(pg, table, 2_000, { keys: 10 });
      await drainAll(app, pg, table);
    }
    for (let run = 1; run <= ctx.runs; run++) {
      for (const [i, variant] of VARIANTS.entries()) {
        const app = apps.get(appOf(variant));
        if (app === undefined) continue;
        const size = Math.max(1_000, Math.round(n * variant.share));
        const drained = await checkedRabbitDrain({
          label: `P16 run ${run} ${variant.name}`,
          log: ctx.log,
          app,
          ds: pg,
          table: tableOf(variant),
          rabbit,
          queue: QUEUE,
          n: size,
          keys: variant.keys ?? size,
        });
        problems += drained.problems;
        rates[i]?.push(drained.msgsPerS);
        ctx.log(`P16 run ${run}: ${variant.label}: ${Math.round(drained.msgsPerS)} msgs/s`);
      }
    }
  } finally {
    for (const app of apps.values()) await app.close();
    await dropOutboxTable(pg, TABLE);
    await dropOutboxTable(pg, STREAM_TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const medians = VARIANTS.map((variant, i) =>
    addMetric(
      result,
      `${variant.name}_msgs_per_s`,
      variant.label,
      'msgs/s',
      rates[i] ?? [],
      Math.max(1_000, Math.round(n * variant.share)),
    ),
  );
  // Each mode against its own drain of a key per message.
  const controlOf = (v: Variant): number => {
    const i = VARIANTS.findIndex(
      (c) => c.keys === null && c.claims === v.claims && c.window === v.window,
    );
    return medians[i]?.median ?? Number.NaN;
  };
  for (const [i, variant] of VARIANTS.entries()) {
    if (variant.keys === null) continue;
    const value = round(ratio(medians[i]?.median ?? Number.NaN, controlOf(variant)), 3);
    const key = `p16_${variant.name}_vs_key_per_message`;
    if (variant.maxRun === 1) result.values[key] = value;
    else if (variant.claims === 'partitions') {
      addTarget(result, key, `${variant.label} ÷ a key per message (its mode)`, value, '>=', 0.5);
    } else addTarget(result, key, `${variant.label} ÷ a key per message`, value, '>=', 0.3);
  }
  const partitionsKeyed = VARIANTS.findIndex((v) => v.name === 'partitions_key_per_message');
  result.values.p16_partitions_vs_leases_key_per_message = round(
    ratio(medians[partitionsKeyed]?.median ?? Number.NaN, medians[0]?.median ?? Number.NaN),
    3,
  );
  addTarget(
    result,
    'p16_delivery_problems',
    'duplicates + order violations + missing messages at the consumer, every variant',
    problems,
    '<=',
    0,
  );
  const stopKafka = await ensureKafka(ctx.log);
  if (stopKafka === undefined) {
    result.skipped.push(
      `Kafka is not reachable at ${SERVICES.kafka.brokers.join(',')} and could not be started: the Kafka half was not measured`,
    );
    return result;
  }
  try {
    await measureKafka(ctx, result);
  } finally {
    stopKafka();
  }
  return result;
}

const KAFKA_VARIANTS = VARIANTS.filter((v) => v.maxRun !== 1 && v.claims === undefined);

/** The backlogs of KAFKA_VARIANTS drained into a Kafka topic, counted there. */
async function measureKafka(ctx: BenchContext, result: ScenarioResult): Promise<void> {
  const { profile, pg } = ctx;
  const n = profile.p2Messages;
  const topic = named('bench-p16', '-');
  await resetOutboxTable(pg, TABLE);
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher: new KafkaPublisher({
      brokers: [...SERVICES.kafka.brokers],
      clientId: 'outbox-bench-p16',
      topic: () => topic,
    }),
    autoStart: false,
    instanceId: 'bench-p16-kafka',
    ordering: { enabled: true },
  });
  const rates: number[][] = KAFKA_VARIANTS.map(() => []);
  let miscounted = 0;
  const drain = async (count: number, keys: number): Promise<number> => {
    await truncateOutbox(pg, TABLE);
    await seedOutbox(pg, TABLE, count, { keys });
    await analyse(pg, TABLE);
    const start = performance.now();
    await drainAll(app, pg, TABLE);
    return (performance.now() - start) / 1000;
  };
  try {
    await resetTopic(topic);
    await drain(2_000, 10);
    for (let run = 1; run <= ctx.runs; run++) {
      for (const [i, variant] of KAFKA_VARIANTS.entries()) {
        const seconds = await measured(
          `P16 Kafka run ${run} ${variant.name}`,
          ctx.log,
          async () => {
            await resetTopic(topic);
            return drain(n, variant.keys ?? n);
          },
          [app],
        );
        const count = await topicCount(topic);
        miscounted += Math.abs(count - n);
        rates[i]?.push(n / seconds);
        ctx.log(
          `P16 Kafka run ${run}: ${variant.label}: ${Math.round(n / seconds)} msgs/s (topic holds ${count})`,
        );
      }
    }
  } finally {
    await app.close();
    await deleteTopic(topic);
    await dropOutboxTable(pg, TABLE);
  }
  const medians = KAFKA_VARIANTS.map((variant, i) =>
    addMetric(
      result,
      `kafka_${variant.name}_msgs_per_s`,
      `Kafka: ${variant.label}`,
      'msgs/s',
      rates[i] ?? [],
      n,
    ),
  );
  const control = medians[0]?.median ?? Number.NaN;
  for (const [i, variant] of KAFKA_VARIANTS.entries()) {
    if (i === 0) continue;
    addTarget(
      result,
      `p16_kafka_${variant.name}_vs_key_per_message`,
      `Kafka: ${variant.label} ÷ a key per message`,
      round(ratio(medians[i]?.median ?? Number.NaN, control), 3),
      '>=',
      0.3,
    );
  }
  addTarget(
    result,
    'p16_kafka_miscounted',
    'Kafka: messages missing from or extra in the topic, every run',
    miscounted,
    '<=',
    0,
  );
}
