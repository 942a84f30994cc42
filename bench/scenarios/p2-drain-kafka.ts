/**
 * P2: drain a backlog PostgreSQL → Kafka (kafkajs), module vs a bare `sendBatch` relay, and vs the
 * same relay on an idempotent producer like KafkaPublisher's (kafkajs sends one request at a time
 * per broker with idempotence), so that the bench tells what idempotence costs at the client from
 * what the relay itself spends.
 */
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { bareKafkaRelay } from '../baselines/bare-relay';
import { SERVICES, named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  pgPool,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { bareProducer, deleteTopic, ensureKafka, resetTopic, topicCount } from '../support/kafka';
import { drainAll, measured, startOutboxApp } from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { timedWithCpu } from '../support/node-cpu';
import { ratio } from '../support/stats';

const TABLE = named('bench_p2');

export async function p2(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.p2Messages;
  const result = newResult(
    'P2',
    `Drain PostgreSQL → Kafka (kafkajs, acks=-1, 3 partitions), ordering on, 1 000 keys (${n.toLocaleString('en-US')} msgs)`,
  );
  const stopKafka = await ensureKafka(ctx.log);
  if (stopKafka === undefined) {
    result.skipped.push(
      `Kafka is not reachable at ${SERVICES.kafka.brokers.join(',')} and could not be started: start it with \`npm run kafka:start\``,
    );
    return result;
  }
  try {
    return await measure(ctx, result);
  } finally {
    stopKafka();
  }
}

async function measure(ctx: BenchContext, result: ScenarioResult): Promise<ScenarioResult> {
  const { profile, pg } = ctx;
  const n = profile.p2Messages;
  await resetOutboxTable(pg, TABLE);
  const moduleTopic = named('bench-p2-module', '-');
  const bareTopic = named('bench-p2-bare', '-');
  const publisher = new KafkaPublisher({
    brokers: [...SERVICES.kafka.brokers],
    clientId: 'outbox-bench',
    topic: () => moduleTopic,
  });
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2',
    ordering: { enabled: true },
  });
  const producer = await bareProducer();
  const idempotentProducer = await bareProducer(true);
  const pool = pgPool(4);
  const moduleRates: number[] = [];
  const bareRates: number[] = [];
  const idempotentRates: number[] = [];
  // Node CPU per message of each drain, all run in this process.
  const moduleCpu: number[] = [];
  const bareCpu: number[] = [];
  const idempotentCpu: number[] = [];
  let extra = 0;
  let short = 0;
  const prepare = async (count: number): Promise<void> => {
    await truncateOutbox(pg, TABLE);
    await seedOutbox(pg, TABLE, count);
    await analyse(pg, TABLE);
  };
  try {
    await resetTopic(moduleTopic);
    await resetTopic(bareTopic);
    await prepare(2_000);
    await drainAll(app, pg, TABLE);
    await prepare(2_000);
    await bareKafkaRelay({ pool, table: TABLE, producer, topic: bareTopic });
    await prepare(2_000);
    await bareKafkaRelay({ pool, table: TABLE, producer: idempotentProducer, topic: bareTopic });

    for (let run = 1; run <= ctx.runs; run++) {
      const m = await measured(
        `P2 run ${run} module`,
        ctx.log,
        async () => {
          await resetTopic(moduleTopic);
          await prepare(n);
          const { seconds, cpuUs } = await timedWithCpu(() => drainAll(app, pg, TABLE));
          moduleCpu.push(cpuUs / n);
          return { s: seconds, count: await topicCount(moduleTopic) };
        },
        [app],
      );
      moduleRates.push(n / m.s);
      if (m.count > n) extra += m.count - n;
      if (m.count < n) short += n - m.count;
      ctx.log(`P2 run ${run}: module ${Math.round(n / m.s)} msgs/s (topic holds ${m.count})`);

      const b = await measured(`P2 run ${run} bare relay`, ctx.log, async () => {
        await resetTopic(bareTopic);
        await prepare(n);
        const { seconds, cpuUs } = await timedWithCpu(() =>
          bareKafkaRelay({ pool, table: TABLE, producer, topic: bareTopic }),
        );
        bareCpu.push(cpuUs / n);
        return seconds;
      });
      bareRates.push(n / b);
      ctx.log(
        `P2 run ${run}: bare sendBatch relay ${Math.round(n / b)} msgs/s (topic holds ${await topicCount(bareTopic)})`,
      );

      const i = await measured(`P2 run ${run} bare relay, idempotent`, ctx.log, async () => {
        await resetTopic(bareTopic);
        await prepare(n);
        const { seconds, cpuUs } = await timedWithCpu(() =>
          bareKafkaRelay({ pool, table: TABLE, producer: idempotentProducer, topic: bareTopic }),
        );
        idempotentCpu.push(cpuUs / n);
        return seconds;
      });
      idempotentRates.push(n / i);
      ctx.log(
        `P2 run ${run}: bare sendBatch relay, idempotent producer ${Math.round(n / i)} msgs/s`,
      );
    }
  } finally {
    await app.close();
    await producer.disconnect();
    await idempotentProducer.disconnect();
    await pool.end();
    await deleteTopic(moduleTopic);
    await deleteTopic(bareTopic);
    await dropOutboxTable(pg, TABLE);
  }
  const module = addMetric(
    result,
    'module_msgs_per_s',
    'nestjs-outbox (KafkaPublisher, idempotent)',
    'msgs/s',
    moduleRates,
    n,
  );
  const bare = addMetric(
    result,
    'bare_kafka_msgs_per_s',
    'bare relay (claim 500, sendBatch, 2 in flight)',
    'msgs/s',
    bareRates,
    n,
  );
  addTarget(
    result,
    'p2_vs_bare_kafka',
    'module ÷ bare kafkajs sendBatch relay',
    ratio(module.median, bare.median),
    '>=',
    0.9,
  );
  const idempotent = addMetric(
    result,
    'bare_idempotent_kafka_msgs_per_s',
    "bare relay on an idempotent producer (KafkaPublisher's producer settings)",
    'msgs/s',
    idempotentRates,
    n,
  );
  for (const [key, label, runs] of [
    ['module', 'nestjs-outbox', moduleCpu],
    ['bare', 'bare relay', bareCpu],
    ['bare_idempotent', 'bare relay, idempotent producer', idempotentCpu],
  ] as const) {
    addMetric(
      result,
      `${key}_node_cpu_us_per_msg`,
      `node CPU per message of the drain in the bench's process: ${label}`,
      'µs',
      runs,
      n,
    );
  }
  addTarget(
    result,
    'p2_vs_bare_idempotent',
    "module ÷ bare relay on an idempotent producer (the relay's own cost)",
    ratio(module.median, idempotent.median),
    '>=',
    0.95,
  );
  addTarget(result, 'p2_extra_records', 'records beyond the messages (duplicates)', extra, '==', 0);
  addTarget(result, 'p2_missing_records', 'messages missing from the topic', short, '==', 0);
  return result;
}
