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
const QUEUE = named('bench.p16', '.');

interface Variant {
  readonly name: string;
  readonly label: string;
  /** Keys the backlog cycles through; null: one per message. */
  readonly keys: number | null;
  readonly maxRun: number;
  /** Share of the backlog size. */
  readonly share: number;
}

const VARIANTS: readonly Variant[] = [
  { name: 'key_per_message', label: 'a key per message', keys: null, maxRun: 50, share: 1 },
  { name: 'keys_100', label: '100 keys', keys: 100, maxRun: 50, share: 1 },
  { name: 'keys_10', label: '10 keys', keys: 10, maxRun: 50, share: 1 },
  { name: 'keys_10_run_1', label: '10 keys, maxRun 1', keys: 10, maxRun: 1, share: 0.1 },
];

export async function p16(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p1Messages;
  const result = newResult(
    'P16',
    `Hot keys: drain ${n.toLocaleString('en-US')} msgs PostgreSQL → RabbitMQ over 10 and 100 keys vs a key per message (ordering on)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const apps = new Map<number, OutboxApp>();
  const rates: number[][] = VARIANTS.map(() => []);
  let problems = 0;
  try {
    for (const maxRun of new Set(VARIANTS.map((v) => v.maxRun))) {
      apps.set(
        maxRun,
        await startOutboxApp({
          dataSource: pg,
          tableName: TABLE,
          publisher: rabbitPublisher(QUEUE),
          autoStart: false,
          instanceId: `bench-p16-run-${maxRun}`,
          ordering: { enabled: true, maxRun },
        }),
      );
    }
    // Warm-up of each app (connections, plans); not measured.
    for (const app of apps.values()) {
      await truncateOutbox(pg, TABLE);
      await seedOutbox(pg, TABLE, 2_000, { keys: 10 });
      await drainAll(app, pg, TABLE);
    }
    for (let run = 1; run <= ctx.runs; run++) {
      for (const [i, variant] of VARIANTS.entries()) {
        const app = apps.get(variant.maxRun);
        if (app === undefined) continue;
        const size = Math.max(1_000, Math.round(n * variant.share));
        const drained = await checkedRabbitDrain({
          label: `P16 run ${run} ${variant.name}`,
          log: ctx.log,
          app,
          ds: pg,
          table: TABLE,
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
  const control = medians[0]?.median ?? Number.NaN;
  for (const [i, variant] of VARIANTS.entries()) {
    if (i === 0) continue;
    const value = round(ratio(medians[i]?.median ?? Number.NaN, control), 3);
    const key = `p16_${variant.name}_vs_key_per_message`;
    if (variant.maxRun === 1) result.values[key] = value;
    else addTarget(result, key, `${variant.label} ÷ a key per message`, value, '>=', 0.3);
  }
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

const KAFKA_VARIANTS = VARIANTS.filter((v) => v.maxRun !== 1);

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
