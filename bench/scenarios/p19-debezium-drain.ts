/**
 * P19: delivery by Debezium against the module's own dispatcher, into the same Kafka broker, in the
 * same run, on PostgreSQL. (a) A drain: a backlog of `p2Messages` committed rows (1 000 keys, 1 KiB)
 * published to one topic, timed from the start of delivery to the last record in the topic: for
 * Debezium, the connector is paused while the backlog is written, then resumed (it reads the rows
 * from the replication slot); for the module, its dispatcher with `KafkaPublisher` drains the same
 * backlog from the table. (b) Commit → Kafka latency at 1 000 msgs/s: 10 messages enqueued per
 * transaction every 10 ms for 10 s, each timed from its commit to its arrival at a kafkajs
 * consumer. Needs a Kafka Connect worker with Debezium (npm run connect:start); skipped, saying
 * so, without one. A figure to publish, not a target to tune against.
 */
import type { DataSource } from 'typeorm';
import { debeziumConnectorConfig, type DebeziumConnectorDefinition } from '../../lib/debezium';
import {
  createConnector,
  deleteConnector,
  expectConnectRunning,
  setConnectorState,
} from '../../test/support/kafka-connect';
import { named, SERVICES } from '../support/config';
import {
  dropOutboxTable,
  PAD,
  keyOf,
  pgConfig,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { deleteTopic, kafkaClient, resetTopic, topicCount } from '../support/kafka';
import { drainAll, startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { percentile, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p19');
const KEYS = 1_000;
const RATE_TICK_MS = 10;
const PER_TICK = 10;
const LATENCY_SECONDS = 10;

const median = (xs: readonly number[]): number =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

// A name of its own per connector: Kafka Connect keeps a deleted connector's offsets under its
// name, and a new connector of the same name would resume from a log position its new slot lacks.
let connectors = 0;

function connector(): DebeziumConnectorDefinition {
  connectors += 1;
  const c = pgConfig();
  return debeziumConnectorConfig({
    connector: 'postgres',
    database: {
      hostname: c.host ?? '127.0.0.1',
      port: c.port ?? 5432,
      user: c.user ?? 'postgres',
      password: c.password ?? '',
      dbname: c.database ?? SERVICES.postgres.database,
    },
    tableName: TABLE,
    name: `bench-${TABLE}-${connectors}`,
    topicPrefix: `${TABLE}_${connectors}`,
    slotName: TABLE,
    publicationName: TABLE,
  });
}

async function withConnector<T>(db: DataSource, work: (name: string) => Promise<T>): Promise<T> {
  const definition = connector();
  try {
    await createConnector(definition);
    for (let i = 0; i < 300; i++) {
      const rows = await db.query<{ n: number }[]>(
        'SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name = $1 AND active',
        [TABLE],
      );
      if (rows[0]?.n === 1) break;
      await sleep(100);
    }
    return await work(definition.name);
  } finally {
    await deleteConnector(definition.name);
    for (let i = 0; i < 300; i++) {
      const rows = await db.query<{ n: number }[]>(
        'SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name = $1 AND active',
        [TABLE],
      );
      if (rows[0]?.n === 0) break;
      await sleep(100);
    }
    // A slot left behind would retain the server's WAL.
    await db.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
      [TABLE],
    );
    await db.query(`DROP PUBLICATION IF EXISTS "${TABLE}"`);
  }
}

async function untilTopicHolds(topic: string, count: number, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await topicCount(topic)) < count) {
    if (Date.now() > deadline) throw new Error(`P19: ${topic} never held ${count} records`);
    await sleep(20);
  }
}

/** Enqueues at 1 000 msgs/s for LATENCY_SECONDS; resolves to each message's commit → Kafka ms. */
async function latencyAtRate(app: OutboxApp, db: DataSource, topic: string): Promise<number[]> {
  const committedAt = new Map<number, number>();
  const latencies: number[] = [];
  const consumer = kafkaClient(`bench-p19-${topic}`).consumer({
    groupId: `bench-p19-${topic}`,
    maxWaitTimeInMs: 10,
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: ({ message }) => {
      const seq = (JSON.parse(message.value?.toString('utf8') ?? '{}') as { seq?: number }).seq;
      const at = seq === undefined ? undefined : committedAt.get(seq);
      if (at !== undefined) latencies.push(performance.now() - at);
      return Promise.resolve();
    },
  });
  await sleep(3_000);
  let seq = 0;
  const start = performance.now();
  const pending: Promise<void>[] = [];
  for (let tick = 0; tick < (LATENCY_SECONDS * 1000) / RATE_TICK_MS; tick++) {
    const due = start + tick * RATE_TICK_MS;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const batch = Array.from({ length: PER_TICK }, () => ++seq);
    pending.push(
      db
        .transaction((m) =>
          app.outbox.enqueue(
            batch.map((s) => ({
              topic,
              key: keyOf(s, KEYS),
              type: 'order.created',
              payload: { seq: s, pad: PAD },
            })),
            m,
          ),
        )
        .then(() => {
          const now = performance.now();
          for (const s of batch) committedAt.set(s, now);
        }),
    );
  }
  await Promise.all(pending);
  const deadline = Date.now() + 120_000;
  while (latencies.length < seq && Date.now() < deadline) await sleep(50);
  await consumer.disconnect();
  if (latencies.length < seq) throw new Error(`P19: ${latencies.length} of ${seq} arrived`);
  return latencies;
}

export async function p19(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.p2Messages;
  const result = newResult(
    'P19',
    `Debezium (Kafka Connect, PostgreSQL connector) vs the module's dispatcher into the same Kafka: drain of ${n.toLocaleString('en-US')} msgs (1 000 keys), commit → Kafka latency at 1 000 msgs/s`,
  );
  try {
    await expectConnectRunning();
  } catch (error) {
    ctx.log(`P19 skipped: ${String(error)}`);
    result.values.p19_skipped = 1;
    return result;
  }
  const db = ctx.pg;
  const drains = { debezium: [] as number[], dispatcher: [] as number[] };
  const latency = { debezium: [] as number[], dispatcher: [] as number[] };
  await resetOutboxTable(db, TABLE);
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      // (a) Debezium: the backlog is written while the connector is paused, then it resumes.
      const dbzTopic = named(`bench-p19-dbz-${run}`, '-');
      await resetTopic(dbzTopic);
      await truncateOutbox(db, TABLE);
      const dbzMs = await withConnector(db, async (name) => {
        await setConnectorState(name, 'pause');
        await seedOutbox(db, TABLE, n, { topic: dbzTopic, keys: KEYS });
        const t0 = performance.now();
        await setConnectorState(name, 'resume');
        await untilTopicHolds(dbzTopic, n);
        return performance.now() - t0;
      });
      await deleteTopic(dbzTopic);
      drains.debezium.push((n / dbzMs) * 1000);

      // The module's dispatcher on the same backlog, into the same broker.
      const modTopic = named(`bench-p19-mod-${run}`, '-');
      await resetTopic(modTopic);
      await truncateOutbox(db, TABLE);
      await seedOutbox(db, TABLE, n, { topic: modTopic, keys: KEYS });
      const publisher = new KafkaPublisher({
        brokers: [...SERVICES.kafka.brokers],
        clientId: 'outbox-bench-p19',
      });
      const app = await startOutboxApp({ dataSource: db, tableName: TABLE, publisher });
      let modMs: number;
      try {
        const t0 = performance.now();
        await drainAll(app, db, TABLE);
        await untilTopicHolds(modTopic, n);
        modMs = performance.now() - t0;
      } finally {
        await app.close();
        await publisher.close();
      }
      await deleteTopic(modTopic);
      drains.dispatcher.push((n / modMs) * 1000);
      ctx.log(
        `P19 run ${run}: drain of ${n}: Debezium ${Math.round(drains.debezium.at(-1) ?? 0)} msgs/s, dispatcher ${Math.round(drains.dispatcher.at(-1) ?? 0)} msgs/s`,
      );
    }

    // (b) Latency at 1 000 msgs/s, once each (10 000 messages).
    await truncateOutbox(db, TABLE);
    const dbzTopic = named('bench-p19-dbz-latency', '-');
    await resetTopic(dbzTopic);
    await withConnector(db, async () => {
      const app = await startOutboxApp({
        dataSource: db,
        tableName: TABLE,
        workers: false,
        delivery: 'external',
      });
      try {
        latency.debezium = await latencyAtRate(app, db, dbzTopic);
      } finally {
        await app.close();
      }
    });
    await deleteTopic(dbzTopic);
    await truncateOutbox(db, TABLE);
    const modTopic = named('bench-p19-mod-latency', '-');
    await resetTopic(modTopic);
    const publisher = new KafkaPublisher({
      brokers: [...SERVICES.kafka.brokers],
      clientId: 'outbox-bench-p19',
    });
    const app = await startOutboxApp({
      dataSource: db,
      tableName: TABLE,
      publisher,
      autoStart: true,
    });
    try {
      latency.dispatcher = await latencyAtRate(app, db, modTopic);
    } finally {
      await app.close();
      await publisher.close();
    }
    await deleteTopic(modTopic);
  } finally {
    await dropOutboxTable(db, TABLE);
  }
  addMetric(result, 'debezium_drain', 'Debezium drain (msgs/s)', 'msgs/s', drains.debezium, n);
  addMetric(
    result,
    'dispatcher_drain',
    "the module's dispatcher drain (msgs/s)",
    'msgs/s',
    drains.dispatcher,
    n,
  );
  result.values.p19_debezium_vs_dispatcher = round(
    median(drains.debezium) / median(drains.dispatcher),
    3,
  );
  for (const [who, xs] of Object.entries(latency)) {
    const sorted = [...xs].sort((a, b) => a - b);
    result.values[`p19_${who}_latency_p50_ms`] = round(percentile(sorted, 50), 1);
    result.values[`p19_${who}_latency_p99_ms`] = round(percentile(sorted, 99), 1);
  }
  ctx.log(
    `P19 latency at 1 000 msgs/s: Debezium p50 ${result.values.p19_debezium_latency_p50_ms} ms, p99 ${result.values.p19_debezium_latency_p99_ms} ms; dispatcher p50 ${result.values.p19_dispatcher_latency_p50_ms} ms, p99 ${result.values.p19_dispatcher_latency_p99_ms} ms`,
  );
  return result;
}
