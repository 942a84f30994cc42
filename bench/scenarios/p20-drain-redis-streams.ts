/**
 * P20: the P1 drain to Redis Streams. A backlog of 1 KiB JSON messages over 1 000 keys drained
 * PostgreSQL → RedisStreamsPublisher (ordering on, the dispatcher's defaults: batches of 500, two
 * in flight) into one stream, beside the bare client's ceiling: the same ioredis client, set up
 * as the publisher sets up its own, XADDing the same messages with the same fields in pipelines
 * of the same size, two in flight, with no database; and, between the two, the bare relay
 * (claim 500, the same pipeline, settle) with that client: what the table costs any relay; and
 * the publisher driven directly with the same batches (no database, no dispatcher): what the
 * publisher itself costs. Every module drain is checked in the stream (count, duplicates,
 * missing, per-key order).
 */
import { named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  pgPool,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { drainAll, instrument, measured, startOutboxApp } from '../support/outbox-app';
import { timedWithCpu } from '../support/node-cpu';
import {
  bareRedis,
  bareRedisRelay,
  bareXadd,
  checkStream,
  publishDirect,
  redisStreamsPublisher,
} from '../support/redis';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { percentile, ratio, round } from '../support/stats';

const median = (xs: readonly number[]): number =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

const TABLE = named('bench_p20');
const BATCH_SIZE = 500;
const IN_FLIGHT = 2;

export async function p20(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, log } = ctx;
  const n = profile.p1Messages;
  const result = newResult(
    'P20',
    `Drain PostgreSQL → Redis Streams (ioredis, one pipeline per batch), ordering on, 1 000 keys, 1 KiB payloads (${n.toLocaleString('en-US')} msgs)`,
  );
  const moduleStream = named('bench:p20:module', ':');
  const bareStream = named('bench:p20:bare', ':');
  const redis = await bareRedis().catch(() => undefined);
  if (redis === undefined) {
    result.skipped.push('Redis is not reachable (REDIS_HOST/REDIS_PORT): P20 needs it');
    return result;
  }
  await resetOutboxTable(pg, TABLE);
  const publisher = redisStreamsPublisher(moduleStream);
  const app = await startOutboxApp({
    dataSource: pg,
    tableName: TABLE,
    publisher,
    autoStart: false,
    instanceId: 'bench-p20',
    ordering: { enabled: true },
    dispatcher: { batchSize: BATCH_SIZE, batchesInFlight: IN_FLIGHT },
  });
  // Where a batch's time goes: the claim and the settle (PostgreSQL), the publish (Redis).
  const phases = instrument(app.store, publisher);
  const claimMs: number[] = [];
  const publishMs: number[] = [];
  const settleMs: number[] = [];
  const prepare = async (count: number): Promise<void> => {
    await truncateOutbox(pg, TABLE);
    await seedOutbox(pg, TABLE, count);
    await analyse(pg, TABLE);
  };
  const pool = pgPool(4);
  const moduleRates: number[] = [];
  const bareRates: number[] = [];
  const relayRates: number[] = [];
  const directRates: number[] = [];
  // The same publisher class, driven directly on a stream of its own (no database, no dispatcher).
  const directStream = named('bench:p20:direct', ':');
  const direct = redisStreamsPublisher(directStream);
  const moduleCpu: number[] = [];
  const bareCpu: number[] = [];
  let extra = 0;
  let missing = 0;
  let reordered = 0;
  try {
    // Warm-up: connections, prepared statements, JIT.
    await prepare(2_000);
    await drainAll(app, pg, TABLE);
    await bareXadd(redis, bareStream, 2_000, BATCH_SIZE, IN_FLIGHT);
    await prepare(2_000);
    await bareRedisRelay(pool, TABLE, redis, bareStream);
    await publishDirect(direct, 2_000, BATCH_SIZE, IN_FLIGHT);

    for (let run = 1; run <= ctx.runs; run++) {
      const m = await measured(
        `P20 run ${run} module`,
        log,
        async () => {
          await redis.del(moduleStream);
          await prepare(n);
          for (const times of Object.values(phases)) times.length = 0;
          const timed = await timedWithCpu(() => drainAll(app, pg, TABLE));
          return { ...timed, check: await checkStream(redis, moduleStream, n) };
        },
        [app],
      );
      moduleRates.push(n / m.seconds);
      claimMs.push(median(phases.claimMs));
      publishMs.push(median(phases.publishMs));
      settleMs.push(median(phases.settleMs));
      moduleCpu.push(m.cpuUs / n);
      extra += m.check.duplicates;
      missing += m.check.missing;
      reordered += m.check.reordered;
      log(
        `P20 run ${run}: module ${Math.round(n / m.seconds)} msgs/s (stream holds ${m.check.count}, ${m.check.duplicates} duplicate(s), ${m.check.missing} missing, ${m.check.reordered} key(s) out of order)`,
      );

      const b = await measured(`P20 run ${run} bare client`, log, async () => {
        await redis.del(bareStream);
        return timedWithCpu(() => bareXadd(redis, bareStream, n, BATCH_SIZE, IN_FLIGHT));
      });
      bareRates.push(n / b.seconds);
      bareCpu.push(b.cpuUs / n);
      log(`P20 run ${run}: bare ioredis pipelines ${Math.round(n / b.seconds)} msgs/s`);

      const d = await measured(`P20 run ${run} publisher alone`, log, async () => {
        await redis.del(directStream);
        return timedWithCpu(() => publishDirect(direct, n, BATCH_SIZE, IN_FLIGHT));
      });
      directRates.push(n / d.seconds);
      log(`P20 run ${run}: RedisStreamsPublisher alone ${Math.round(n / d.seconds)} msgs/s`);

      const r = await measured(`P20 run ${run} bare relay`, log, async () => {
        await redis.del(bareStream);
        await prepare(n);
        const timed = await timedWithCpu(() => bareRedisRelay(pool, TABLE, redis, bareStream));
        return { ...timed, count: await redis.xlen(bareStream) };
      });
      relayRates.push(n / r.seconds);
      log(
        `P20 run ${run}: bare relay (claim, XADD pipeline, settle) ${Math.round(n / r.seconds)} msgs/s (stream holds ${r.count})`,
      );
    }
  } finally {
    await app.close();
    await direct.close();
    await pool.end();
    await redis.del(moduleStream, bareStream, directStream).catch(() => undefined);
    await redis.quit().catch(() => undefined);
    await dropOutboxTable(pg, TABLE);
  }

  const module = addMetric(
    result,
    'module_msgs_per_s',
    'module (RedisStreamsPublisher)',
    'msgs/s',
    moduleRates,
    n,
  );
  const bare = addMetric(
    result,
    'bare_client_msgs_per_s',
    `bare ioredis client: the same XADDs, pipelines of ${BATCH_SIZE}, ${IN_FLIGHT} in flight, no database`,
    'msgs/s',
    bareRates,
    n,
  );
  const relay = addMetric(
    result,
    'bare_relay_msgs_per_s',
    'bare relay: claim 500, the same pipeline, settle; two lanes, no leases or order',
    'msgs/s',
    relayRates,
    n,
  );
  const alone = addMetric(
    result,
    'publisher_alone_msgs_per_s',
    'RedisStreamsPublisher driven directly: the same batches, no database or dispatcher',
    'msgs/s',
    directRates,
    n,
  );
  addMetric(result, 'module_node_cpu_us_per_msg', 'module: node CPU per message', 'µs', moduleCpu);
  addMetric(result, 'bare_node_cpu_us_per_msg', 'bare client: node CPU per message', 'µs', bareCpu);
  for (const [key, label, runs] of [
    ['claim', 'claim (transaction, rows read and mapped)', claimMs],
    ['publish', 'publish (RedisStreamsPublisher: one pipeline)', publishMs],
    ['settle', 'settle (transaction, promotion included)', settleMs],
  ] as const) {
    addMetric(
      result,
      `module_${key}_ms`,
      `module, median wall time of one batch's ${label}`,
      'ms',
      runs,
    );
  }
  addTarget(
    result,
    'p20_vs_bare_client',
    'module ÷ bare client',
    ratio(module.median, bare.median),
    '>=',
    0.8,
  );
  result.values.p20_publisher_alone_vs_bare_client = round(ratio(alone.median, bare.median), 3);
  result.values.p20_vs_bare_relay = round(ratio(module.median, relay.median), 3);
  result.values.p20_bare_relay_vs_bare_client = round(ratio(relay.median, bare.median), 3);
  addTarget(result, 'p20_duplicates', 'duplicate entries over all module runs', extra, '==', 0);
  addTarget(result, 'p20_missing', 'missing entries over all module runs', missing, '==', 0);
  addTarget(
    result,
    'p20_reordered_keys',
    'keys out of order over all module runs',
    reordered,
    '==',
    0,
  );
  result.notes.push(
    `RedisStreamsPublisher alone ÷ bare client ${result.values.p20_publisher_alone_vs_bare_client} (what the publisher itself costs)`,
  );
  result.notes.push(
    `module ÷ bare relay ${result.values.p20_vs_bare_relay}; bare relay ÷ bare client ${result.values.p20_bare_relay_vs_bare_client} (what the table costs any relay)`,
  );
  result.notes.push(
    `module node CPU ${round(moduleCpu.reduce((a, b) => a + b, 0) / Math.max(1, moduleCpu.length), 1)} µs/msg, bare client ${round(bareCpu.reduce((a, b) => a + b, 0) / Math.max(1, bareCpu.length), 1)} µs/msg (both in the bench's process; PostgreSQL's work is the module's alone)`,
  );
  return result;
}
