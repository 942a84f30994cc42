/**
 * L1: a backlog drained by log tailing, beside polling and the bare pipelined relay, in the same
 * run, on PostgreSQL (logical replication) and MariaDB (binlog), to RabbitMQ (confirms) and Kafka.
 *
 * The log's position is made first (the app's first start makes the slot, or stores the binlog
 * position, and is closed), then `l1Messages` messages (1 KiB, a key per message) are committed in
 * transactions of 100 while no dispatcher runs, then a fresh app with `delivery: logTailing()`
 * (the defaults, the bench's slot name) is started and timed until every message
 * is published and none is pending: its reader reads the whole backlog from the log. Polling (the
 * defaults) and the bare relay drain the same backlog in a table of their own (their rows would
 * otherwise pass through the slot). Log tailing runs twice: with the default sweep (5 s: a drain
 * longer than that is helped by the table's poll) and with the sweep off (an hour: the log path
 * alone); on PostgreSQL also on `dispatcher.claims: 'partitions'` as a stream (the reader owns
 * every partition, the log wakes it, the sweep off). Modes rotate run by run; each module run is checked at the consumer (RabbitMQ:
 * duplicates, missing) or counted in the topic (Kafka).
 */
import type { Producer } from 'kafkajs';
import { named } from '../support/config';
import { dropOutboxTable, resetOutboxTable, truncateOutbox } from '../support/databases';
import { bareProducer, deleteTopic, ensureKafka, resetTopic, topicCount } from '../support/kafka';
import { appDrain, BareRelay, makeLogPosition, type Broker } from '../support/log-drain';
import {
  benchLogOptions,
  dropLog,
  openLogTargets,
  prefill,
  setUpLog,
  type LogTarget,
} from '../support/log-tailing';
import { kafkaWarmupTopic, measured } from '../support/outbox-app';
import { ConfirmLink, purgeQueue, readAndCheck, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { ratio, round } from '../support/stats';

const LOG_TABLE = named('bench_l1_log');
const POLL_TABLE = named('bench_l1_poll');
const QUEUE = named('bench.l1', '.');
const TOPIC = named('bench-l1', '-');
const WARMUP = 1_000;

type Mode = 'log' | 'log_no_sweep' | 'log_partitions' | 'poll' | 'bare';
const ALL_MODES: readonly Mode[] = ['log', 'log_no_sweep', 'log_partitions', 'poll', 'bare'];
/** Log tailing on `dispatcher.claims: 'partitions'` (PostgreSQL only), as a stream of this. */
const STREAM_WINDOW = 1_000;
const modesOf = (db: string): readonly Mode[] =>
  ALL_MODES.filter((m) => m !== 'log_partitions' || db === 'postgres');
/** The sweep "off": an hour, so that only the log feeds the dispatcher. */
const NO_SWEEP_MS = 3_600_000;

interface Problems {
  duplicates: number;
  missing: number;
}

export async function l1(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.l1Messages;
  const result = newResult(
    'L1',
    `Log-tailing drain vs polling vs bare relay, ${n.toLocaleString('en-US')} msgs (1 KiB, a key per message, ordering on), PostgreSQL and MariaDB → RabbitMQ and Kafka`,
  );
  const { targets, close } = await openLogTargets(ctx, result);
  const stopKafka = await ensureKafka(ctx.log);
  const brokers: Broker[] = ['rabbitmq'];
  if (stopKafka === undefined) result.skipped.push('Kafka: not reachable, could not be started');
  else brokers.push('kafka');
  const link = new ConfirmLink(1_000);
  let producer: Producer | undefined;
  const problems: Problems = { duplicates: 0, missing: 0 };
  try {
    await resetQueue(ctx.rabbit, QUEUE);
    if (stopKafka !== undefined) {
      await resetTopic(TOPIC);
      await resetTopic(kafkaWarmupTopic(TOPIC));
      producer = await bareProducer();
    }
    for (const target of targets) {
      for (const broker of brokers) {
        try {
          await drains(ctx, result, target, broker, link, producer, problems);
        } catch (error) {
          ctx.log(`L1 ${target.name} → ${broker} failed: ${String(error)}`);
          result.skipped.push(
            `${target.name} → ${broker}: ${error instanceof Error ? error.message : String(error)}`,
          );
        }
      }
    }
  } finally {
    await link.close();
    await producer?.disconnect();
    await ctx.rabbit.deleteQueue(QUEUE).catch(() => undefined);
    if (stopKafka !== undefined) {
      await deleteTopic(TOPIC);
      await deleteTopic(kafkaWarmupTopic(TOPIC));
      stopKafka();
    }
    await close();
  }
  addTarget(
    result,
    'l1_duplicates',
    'duplicates at the consumer (module, RabbitMQ; Kafka: records beyond n)',
    problems.duplicates,
    '==',
    0,
  );
  addTarget(
    result,
    'l1_missing',
    'messages missing at the consumer or in the topic (module)',
    problems.missing,
    '==',
    0,
  );
  return result;
}

async function drains(
  ctx: BenchContext,
  result: ScenarioResult,
  target: LogTarget,
  broker: Broker,
  link: ConfirmLink,
  producer: Producer | undefined,
  problems: Problems,
): Promise<void> {
  const n = ctx.profile.l1Messages;
  const { ds } = target;
  const label = `L1 ${target.name} → ${broker}`;
  const destination = broker === 'rabbitmq' ? QUEUE : TOPIC;
  const rates: Record<Mode, number[]> = {
    log: [],
    log_no_sweep: [],
    log_partitions: [],
    poll: [],
    bare: [],
  };
  const MODES = modesOf(target.name);
  const bare = new BareRelay(target);
  await resetOutboxTable(ds, LOG_TABLE);
  await resetOutboxTable(ds, POLL_TABLE);
  await setUpLog(target, LOG_TABLE);
  const logOptions = benchLogOptions(target.name, LOG_TABLE);
  const emptyDestination = async (): Promise<void> => {
    if (broker === 'rabbitmq') await purgeQueue(ctx.rabbit, QUEUE);
    else await resetTopic(TOPIC);
  };
  const check = async (count: number, mode: Mode): Promise<void> => {
    if (broker === 'rabbitmq') {
      const c = await readAndCheck(QUEUE, count);
      problems.duplicates += c.duplicates;
      problems.missing += c.missing;
      if (c.duplicates + c.missing > 0)
        ctx.log(`${label} ${mode}: dup ${c.duplicates}, missing ${c.missing}`);
    } else {
      const got = await topicCount(TOPIC);
      problems.duplicates += Math.max(0, got - count);
      problems.missing += Math.max(0, count - got);
      if (got !== count)
        ctx.log(`${label} ${mode}: ${got} records in the topic, ${count} expected`);
    }
  };
  const once = async (mode: Mode, count: number, instanceId: string): Promise<number> => {
    const table = mode === 'poll' || mode === 'bare' ? POLL_TABLE : LOG_TABLE;
    await truncateOutbox(ds, table);
    await prefill(ds, table, count);
    await emptyDestination();
    if (mode === 'bare') return bare.drain({ table, broker, destination, link, producer });
    const d = await appDrain({
      target,
      table,
      broker,
      destination,
      n: count,
      instanceId,
      log:
        mode === 'log'
          ? logOptions
          : mode === 'log_no_sweep' || mode === 'log_partitions'
            ? { ...logOptions, sweepIntervalMs: NO_SWEEP_MS }
            : undefined,
      ...(mode === 'log_partitions' && { partitionsWindow: STREAM_WINDOW }),
    });
    if (d.outages > 0) throw new Error(`${d.outages} outage(s) during the drain`);
    return d.seconds;
  };
  try {
    // The slot (or the binlog position) exists before any backlog is committed.
    await makeLogPosition({ target, table: LOG_TABLE, broker, destination, log: logOptions });
    // Warm-up (connections, JIT, plans); not measured.
    for (const mode of MODES) await once(mode, WARMUP, `bench-l1-warmup-${mode}`);
    for (let run = 1; run <= ctx.runs; run++) {
      // Each run starts with another mode, so that none always follows the same one.
      const order = MODES.map((_, i) => MODES[(i + run - 1) % MODES.length] as Mode);
      const line: string[] = [];
      for (const mode of order) {
        const s = await measured(`${label} run ${run} ${mode}`, ctx.log, async () => {
          const seconds = await once(mode, n, `bench-l1-${mode}`);
          if (mode !== 'bare') await check(n, mode);
          return seconds;
        });
        rates[mode].push(n / s);
        line.push(`${mode} ${Math.round(n / s)}`);
      }
      ctx.log(`${label} run ${run}: ${line.join(', ')} msgs/s`);
    }
  } finally {
    await bare.close();
    await dropLog(target, LOG_TABLE);
    await dropOutboxTable(ds, LOG_TABLE);
    await dropOutboxTable(ds, POLL_TABLE);
  }
  const key = `${target.name}_${broker}`;
  const log = addMetric(
    result,
    `${key}_log_msgs_per_s`,
    `${target.name} → ${broker}: log tailing (logTailing() defaults)`,
    'msgs/s',
    rates.log,
    n,
  );
  const poll = addMetric(
    result,
    `${key}_poll_msgs_per_s`,
    `${target.name} → ${broker}: polling (defaults)`,
    'msgs/s',
    rates.poll,
    n,
  );
  const bareS = addMetric(
    result,
    `${key}_bare_msgs_per_s`,
    `${target.name} → ${broker}: bare pipelined relay`,
    'msgs/s',
    rates.bare,
    n,
  );
  const noSweep = addMetric(
    result,
    `${key}_log_no_sweep_msgs_per_s`,
    `${target.name} → ${broker}: log tailing, sweep off (sweepIntervalMs ${NO_SWEEP_MS}: the log alone)`,
    'msgs/s',
    rates.log_no_sweep,
    n,
  );
  if (MODES.includes('log_partitions')) {
    const onPartitions = addMetric(
      result,
      `${key}_log_partitions_msgs_per_s`,
      `${target.name} → ${broker}: log tailing on dispatcher.claims 'partitions', publishWindow ${STREAM_WINDOW}, sweep off`,
      'msgs/s',
      rates.log_partitions,
      n,
    );
    result.values[`l1_${key}_log_partitions_vs_bare`] = round(
      ratio(onPartitions.median, bareS.median),
      3,
    );
  }
  result.values[`l1_${key}_log_vs_bare`] = round(ratio(log.median, bareS.median), 3);
  result.values[`l1_${key}_log_no_sweep_vs_bare`] = round(ratio(noSweep.median, bareS.median), 3);
  result.values[`l1_${key}_poll_vs_bare`] = round(ratio(poll.median, bareS.median), 3);
  result.values[`l1_${key}_log_vs_poll`] = round(ratio(log.median, poll.median), 3);
}
