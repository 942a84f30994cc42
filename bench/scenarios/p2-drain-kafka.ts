/**
 * P2: drain a backlog PostgreSQL → Kafka (kafkajs), module vs a bare `sendBatch` relay, and vs the
 * same relay on an idempotent producer like KafkaPublisher's (kafkajs sends one request at a time
 * per broker with idempotence), so that the bench tells what idempotence costs at the client from
 * what the relay itself spends. Between that relay and the module, two steps on the same producer:
 * the lease relay (the bare relay keeping the module's leases: what those promises cost in SQL)
 * and the store relay (the module's own store, ordered claim and settle, in the bare relay's
 * loop: the store's share), so that the module's gap splits into leases, store (ordering, its
 * transactions and SQL port) and the dispatcher with the publisher. Beside them, the module with
 * ordering off (the bare relays keep no order), and the module's claim, publish and settle times
 * per batch: where its drain waits.
 * The other settle mode too: the module deleting delivered rows (`deliveredRetentionMs: 0`)
 * against the idempotent bare relay deleting its rows.
 */
import type { DataSource } from 'typeorm';
import { bareKafkaRelay } from '../baselines/bare-relay';
import { storeKafkaRelay } from '../baselines/store-relay';
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
import {
  drainAll,
  instrument,
  kafkaPublisher,
  measured,
  startOutboxApp,
} from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { timedWithCpu } from '../support/node-cpu';
import { percentile, ratio, round } from '../support/stats';

const median = (xs: readonly number[]): number =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

const TABLE = named('bench_p2');
// The module with ordering off drains a table of its own: its store has no per-key queue.
const UNORDERED_TABLE = named('bench_p2_unordered');
/**
 * The streaming variant's own table: two `'partitions'` dispatchers on one table would divide its
 * partitions between them (as in P1).
 */
const STREAM_TABLE = named('bench_p2_stream');
/** The streaming variant's window: the unconfirmed publishes P1's bare relay keeps. */
const STREAM_WINDOW = 1_000;

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
  await resetOutboxTable(pg, UNORDERED_TABLE);
  await resetOutboxTable(pg, STREAM_TABLE);
  const moduleTopic = named('bench-p2-module', '-');
  const bareTopic = named('bench-p2-bare', '-');
  const publisher = kafkaPublisher(moduleTopic);
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2',
    ordering: { enabled: true },
  });
  const unordered = await startOutboxApp({
    dataSource: pg,
    tableName: UNORDERED_TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2-unordered',
    ordering: { enabled: false },
  });
  // The other settle mode, on the ordered table: delivered rows deleted at settle.
  const deleting = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2-delete',
    ordering: { enabled: true },
    cleaner: { deliveredRetentionMs: 0 },
  });
  // Partitioned delivery (dispatcher.claims 'partitions', issue 76) on the ordered table, and the
  // same publishing as a stream (publishWindow) on a table of its own.
  const partitionsApp = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2-partitions',
    ordering: { enabled: true },
    dispatcher: { claims: 'partitions' },
  });
  const streamApp = await startOutboxApp({
    dataSource: pg,
    tableName: STREAM_TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p2-stream',
    ordering: { enabled: true },
    dispatcher: { claims: 'partitions', publishWindow: STREAM_WINDOW },
  });
  const phases = instrument(app.store, publisher);
  const producer = await bareProducer();
  const idempotentProducer = await bareProducer(true);
  const pool = pgPool(4);
  const moduleRates: number[] = [];
  const partitionsRates: number[] = [];
  const streamRates: number[] = [];
  const unorderedRates: number[] = [];
  const deleteRates: number[] = [];
  const bareDeleteRates: number[] = [];
  // Per run, the median wall time of one batch's claim, publish and settle (ordered module).
  const claimMs: number[] = [];
  const publishMs: number[] = [];
  const settleMs: number[] = [];
  // With pg_stat_statements preloaded: PostgreSQL's own execution time of one claim statement.
  const claimExecMs: number[] = [];
  const settleExecMs: number[] = [];
  const statements = ctx.pgSettings.statStatements;
  if (statements) await pg.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  const bareRates: number[] = [];
  const idempotentRates: number[] = [];
  const leaseRates: number[] = [];
  const storeRates: number[] = [];
  // Node CPU per message of each drain, all run in this process.
  const moduleCpu: number[] = [];
  const partitionsCpu: number[] = [];
  const streamCpu: number[] = [];
  const bareCpu: number[] = [];
  const idempotentCpu: number[] = [];
  const leaseCpu: number[] = [];
  const storeCpu: number[] = [];
  let extra = 0;
  let short = 0;
  const prepare = async (count: number, table = TABLE): Promise<void> => {
    await truncateOutbox(pg, table);
    await seedOutbox(pg, table, count);
    await analyse(pg, table);
  };
  try {
    await resetTopic(moduleTopic);
    await resetTopic(bareTopic);
    await prepare(2_000);
    await drainAll(app, pg, TABLE);
    await prepare(2_000, UNORDERED_TABLE);
    await drainAll(unordered, pg, UNORDERED_TABLE);
    await prepare(2_000);
    await drainAll(partitionsApp, pg, TABLE);
    await prepare(2_000, STREAM_TABLE);
    await drainAll(streamApp, pg, STREAM_TABLE);
    await prepare(2_000);
    await bareKafkaRelay({ pool, table: TABLE, producer, topic: bareTopic });
    await prepare(2_000);
    await drainAll(deleting, pg, TABLE);
    await prepare(2_000);
    await bareKafkaRelay({ pool, table: TABLE, producer: idempotentProducer, topic: bareTopic });
    await prepare(2_000);
    await bareKafkaRelay({
      pool,
      table: TABLE,
      producer: idempotentProducer,
      topic: bareTopic,
      settle: 'delete',
    });

    for (let run = 1; run <= ctx.runs; run++) {
      const m = await measured(
        `P2 run ${run} module`,
        ctx.log,
        async () => {
          await resetTopic(moduleTopic);
          await prepare(n);
          for (const times of Object.values(phases)) times.length = 0;
          if (statements) await pg.query('SELECT pg_stat_statements_reset()');
          const { seconds, cpuUs } = await timedWithCpu(() => drainAll(app, pg, TABLE));
          moduleCpu.push(cpuUs / n);
          if (statements) {
            claimExecMs.push(await meanExecMs(pg, CLAIM_TEXT));
            settleExecMs.push(await meanExecMs(pg, SETTLE_TEXT));
          }
          return { s: seconds, count: await topicCount(moduleTopic) };
        },
        [app],
      );
      claimMs.push(median(phases.claimMs));
      publishMs.push(median(phases.publishMs));
      settleMs.push(median(phases.settleMs));
      moduleRates.push(n / m.s);
      if (m.count > n) extra += m.count - n;
      if (m.count < n) short += n - m.count;
      ctx.log(`P2 run ${run}: module ${Math.round(n / m.s)} msgs/s (topic holds ${m.count})`);

      for (const [label, owned, table, rates, cpu] of [
        ["dispatcher.claims 'partitions'", partitionsApp, TABLE, partitionsRates, partitionsCpu],
        [
          `'partitions', publishWindow ${STREAM_WINDOW}`,
          streamApp,
          STREAM_TABLE,
          streamRates,
          streamCpu,
        ],
      ] as const) {
        const o = await measured(
          `P2 run ${run} module, ${label}`,
          ctx.log,
          async () => {
            await resetTopic(moduleTopic);
            await prepare(n, table);
            const { seconds, cpuUs } = await timedWithCpu(() => drainAll(owned, pg, table));
            cpu.push(cpuUs / n);
            return { s: seconds, count: await topicCount(moduleTopic) };
          },
          [owned],
        );
        rates.push(n / o.s);
        if (o.count > n) extra += o.count - n;
        if (o.count < n) short += n - o.count;
        ctx.log(
          `P2 run ${run}: module with ${label} ${Math.round(n / o.s)} msgs/s (topic holds ${o.count})`,
        );
      }

      const u = await measured(
        `P2 run ${run} module, ordering off`,
        ctx.log,
        async () => {
          await resetTopic(moduleTopic);
          await prepare(n, UNORDERED_TABLE);
          const { seconds } = await timedWithCpu(() => drainAll(unordered, pg, UNORDERED_TABLE));
          return { s: seconds, count: await topicCount(moduleTopic) };
        },
        [unordered],
      );
      unorderedRates.push(n / u.s);
      if (u.count > n) extra += u.count - n;
      if (u.count < n) short += n - u.count;
      ctx.log(
        `P2 run ${run}: module with ordering off ${Math.round(n / u.s)} msgs/s (topic holds ${u.count})`,
      );

      const d = await measured(
        `P2 run ${run} module, deleting`,
        ctx.log,
        async () => {
          await resetTopic(moduleTopic);
          await prepare(n);
          const { seconds } = await timedWithCpu(() => drainAll(deleting, pg, TABLE));
          return { s: seconds, count: await topicCount(moduleTopic) };
        },
        [deleting],
      );
      deleteRates.push(n / d.s);
      if (d.count > n) extra += d.count - n;
      if (d.count < n) short += n - d.count;
      ctx.log(
        `P2 run ${run}: module deleting delivered rows ${Math.round(n / d.s)} msgs/s (topic holds ${d.count})`,
      );

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

      const l = await measured(`P2 run ${run} lease relay`, ctx.log, async () => {
        await resetTopic(bareTopic);
        await prepare(n);
        const { seconds, cpuUs } = await timedWithCpu(() =>
          bareKafkaRelay({
            pool,
            table: TABLE,
            producer: idempotentProducer,
            topic: bareTopic,
            leases: true,
          }),
        );
        leaseCpu.push(cpuUs / n);
        return seconds;
      });
      leaseRates.push(n / l);
      ctx.log(
        `P2 run ${run}: lease relay ${Math.round(n / l)} msgs/s (topic holds ${await topicCount(bareTopic)})`,
      );

      const st = await measured(`P2 run ${run} store relay`, ctx.log, async () => {
        await resetTopic(bareTopic);
        await prepare(n);
        const { seconds, cpuUs } = await timedWithCpu(() =>
          storeKafkaRelay({ store: app.store, producer: idempotentProducer, topic: bareTopic }),
        );
        storeCpu.push(cpuUs / n);
        return seconds;
      });
      storeRates.push(n / st);
      ctx.log(
        `P2 run ${run}: store relay ${Math.round(n / st)} msgs/s (topic holds ${await topicCount(bareTopic)})`,
      );

      const bd = await measured(
        `P2 run ${run} bare relay, idempotent, deleting`,
        ctx.log,
        async () => {
          await resetTopic(bareTopic);
          await prepare(n);
          const { seconds } = await timedWithCpu(() =>
            bareKafkaRelay({
              pool,
              table: TABLE,
              producer: idempotentProducer,
              topic: bareTopic,
              settle: 'delete',
            }),
          );
          return seconds;
        },
      );
      bareDeleteRates.push(n / bd);
      ctx.log(
        `P2 run ${run}: bare sendBatch relay, idempotent producer, deleting its rows ${Math.round(n / bd)} msgs/s`,
      );
    }
  } finally {
    await app.close();
    await unordered.close();
    await deleting.close();
    await partitionsApp.close();
    await streamApp.close();
    await producer.disconnect();
    await idempotentProducer.disconnect();
    await pool.end();
    await deleteTopic(moduleTopic);
    await deleteTopic(bareTopic);
    await dropOutboxTable(pg, TABLE);
    await dropOutboxTable(pg, UNORDERED_TABLE);
    await dropOutboxTable(pg, STREAM_TABLE);
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
  const lease = addMetric(
    result,
    'lease_relay_msgs_per_s',
    "lease relay: the idempotent bare relay keeping the module's leases (lease, fencing token, attempt, the claim's columns)",
    'msgs/s',
    leaseRates,
    n,
  );
  const store = addMetric(
    result,
    'store_relay_msgs_per_s',
    "store relay: the module's store (ordered claim, park, fenced settle with promotion) in the bare relay's loop, idempotent producer",
    'msgs/s',
    storeRates,
    n,
  );
  for (const [key, label, runs] of [
    ['module', 'nestjs-outbox', moduleCpu],
    ['module_partitions', "nestjs-outbox, dispatcher.claims 'partitions'", partitionsCpu],
    ['module_stream', `nestjs-outbox, 'partitions' and publishWindow ${STREAM_WINDOW}`, streamCpu],
    ['bare', 'bare relay', bareCpu],
    ['bare_idempotent', 'bare relay, idempotent producer', idempotentCpu],
    ['lease_relay', 'lease relay', leaseCpu],
    ['store_relay', 'store relay', storeCpu],
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
  // Partitioned delivery against the same relays (issue 76: >= 1.0 x the bare relay, aim 1.3).
  for (const [key, label, rates] of [
    [
      'partitions',
      "nestjs-outbox, dispatcher.claims 'partitions' (KafkaPublisher, idempotent)",
      partitionsRates,
    ],
    ['stream', `nestjs-outbox, 'partitions' and publishWindow ${STREAM_WINDOW}`, streamRates],
  ] as const) {
    const owned = addMetric(result, `module_${key}_msgs_per_s`, label, 'msgs/s', rates, n);
    result.values[`p2_${key}_vs_bare_kafka`] = round(ratio(owned.median, bare.median), 3);
    result.values[`p2_${key}_vs_bare_idempotent`] = round(
      ratio(owned.median, idempotent.median),
      3,
    );
    result.values[`p2_${key}_vs_leases`] = round(ratio(owned.median, module.median), 3);
  }
  // Where the module's gap to the idempotent relay lies, step by step (reported, no target).
  result.values.p2_lease_relay_vs_bare_idempotent = round(
    ratio(lease.median, idempotent.median),
    3,
  );
  result.values.p2_store_relay_vs_lease_relay = round(ratio(store.median, lease.median), 3);
  result.values.p2_vs_store_relay = round(ratio(module.median, store.median), 3);
  const moduleDelete = addMetric(
    result,
    'module_delete_msgs_per_s',
    'nestjs-outbox deleting delivered rows (deliveredRetentionMs: 0)',
    'msgs/s',
    deleteRates,
    n,
  );
  const bareDelete = addMetric(
    result,
    'bare_idempotent_delete_kafka_msgs_per_s',
    'bare relay on an idempotent producer, deleting its rows at settle',
    'msgs/s',
    bareDeleteRates,
    n,
  );
  addTarget(
    result,
    'p2_delete_vs_bare_idempotent_delete',
    'module ÷ bare relay on an idempotent producer, both deleting delivered rows',
    ratio(moduleDelete.median, bareDelete.median),
    '>=',
    0.95,
  );
  const unorderedRate = addMetric(
    result,
    'module_unordered_msgs_per_s',
    'nestjs-outbox with ordering off (the bare relays keep no per-key order)',
    'msgs/s',
    unorderedRates,
    n,
  );
  result.values.p2_unordered_vs_bare_idempotent = round(
    ratio(unorderedRate.median, idempotent.median),
    3,
  );
  result.values.p2_vs_unordered = round(ratio(module.median, unorderedRate.median), 3);
  for (const [key, label, runs] of [
    ['claim', 'claim (transaction, rows read and mapped)', claimMs],
    ['publish', 'publish (KafkaPublisher)', publishMs],
    ['settle', 'settle (transaction, promotion included)', settleMs],
  ] as const) {
    addMetric(
      result,
      `module_${key}_ms`,
      `nestjs-outbox, median wall time of one batch's ${label}`,
      'ms',
      runs,
    );
  }
  if (claimExecMs.length > 0) {
    addMetric(
      result,
      'module_claim_exec_ms',
      "nestjs-outbox, PostgreSQL's execution time of one claim statement (pg_stat_statements, mean)",
      'ms',
      claimExecMs,
    );
    addMetric(
      result,
      'module_settle_exec_ms',
      "nestjs-outbox, PostgreSQL's execution time of one settle statement, promotion included (pg_stat_statements, mean)",
      'ms',
      settleExecMs,
    );
  }
  addTarget(result, 'p2_extra_records', 'records beyond the messages (duplicates)', extra, '==', 0);
  addTarget(result, 'p2_missing_records', 'messages missing from the topic', short, '==', 0);
  return result;
}

/** How the claim's statement begins (postgresClaim), and the settle's when it marks rows delivered. */
const CLAIM_TEXT = 'WITH w AS MATERIALIZED%';
const SETTLE_TEXT = 'WITH d AS (UPDATE%';

/** Mean execution time of the statements like `text` since pg_stat_statements' last reset. */
async function meanExecMs(pg: DataSource, text: string): Promise<number> {
  const [row] = await pg.query<{ ms: number | null }[]>(
    `SELECT sum(s.total_exec_time) / nullif(sum(s.calls), 0) AS ms
     FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname = current_database() AND s.query LIKE $1`,
    [text],
  );
  return row?.ms === null || row?.ms === undefined ? Number.NaN : Number(row.ms);
}
