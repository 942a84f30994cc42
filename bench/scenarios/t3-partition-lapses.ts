/**
 * T3: lapses of `'partitions'` ownership on a loaded host (issue 75, item 10), the measurement
 * `dispatcher.partitionTimeoutMs`'s default rests on. Four dispatcher processes
 * (support/dispatcher-process.ts, 'run': each started as an app starts it, its own loop,
 * LISTEN/NOTIFY) drain a backlog of `BENCH_T3_MESSAGES` (27 000: the audit's) messages over
 * 1 000 keys from one PostgreSQL table into one RabbitMQ queue (`RabbitMqPublisher`, confirms)
 * with `dispatcher: { claims: 'partitions', partitionTimeoutMs }`, once per timeout in
 * `BENCH_T3_TIMEOUTS` (1 500, 3 000, 5 000), the timeouts rotating run by run, while
 * `BENCH_T3_BUSY` (2) busy loops run beside (as T1's `BENCH_T1_BUSY`) so that the cores are
 * loaded whatever else runs.
 *
 * Per drain: the lapses (each dispatcher's WARN "… dropping the N held …", counted in its own
 * log by support/partition-lines.ts, with the reasons), the partitions taken from a dispatcher
 * whose heartbeat ran out, how often the partitions changed owner (the sum of the generations in
 * `<table>_owners` after the drain less before: every take by another process raises one; the
 * first spread over the four counts too), copies (messages that reached the consumer twice:
 * every message checked for duplicates, per-key order and missing) and of them the messages the
 * broker confirmed more than once (each dispatcher counts its confirmed publishes per message
 * id: a copy of a message the broker had confirmed, or of one it had not), the drain rate, and the
 * host's one-minute load average around it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import type { DataSource } from 'typeorm';
import { forkTs, type Child, type ChildMessage } from '../support/child';
import { named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  quoteTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
  untilDelivered,
} from '../support/databases';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import type { PartitionLineCounts } from '../support/partition-lines';
import { purgeQueue, readAndCheck, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, round } from '../support/stats';

const TABLE = named('bench_t3');
const QUEUE = named('bench.t3', '.');
const DISPATCHERS = 4;
const MESSAGES = Number(process.env.BENCH_T3_MESSAGES ?? 27_000);
const KEYS = 1_000;
const TIMEOUTS = (process.env.BENCH_T3_TIMEOUTS ?? '1500,3000,5000')
  .split(',')
  .map((t) => Number(t.trim()))
  .filter((t) => Number.isInteger(t) && t > 0);
const BUSY_LOOPS = Number(process.env.BENCH_T3_BUSY ?? 2);
const DRAIN_TIMEOUT_MS = 600_000;

interface Drain {
  rate: number;
  lapses: number;
  lapsedPartitions: number;
  takenOver: number;
  moves: number;
  beatFailures: number;
  copies: number;
  /** Messages the broker confirmed more than once (to any dispatcher): copies of confirmed ones. */
  confirmedTwice: number;
  orderViolations: number;
  missing: number;
  load: number;
  reasons: string[];
}

export async function t3(ctx: BenchContext): Promise<ScenarioResult> {
  const { pg, rabbit } = ctx;
  const result = newResult(
    'T3',
    `Lapses of 'partitions' ownership on a loaded host: ${DISPATCHERS} dispatcher processes drain ${MESSAGES.toLocaleString('en-US')} msgs (${KEYS} keys) PostgreSQL → RabbitMQ with partitionTimeoutMs ${TIMEOUTS.join(', ')}, ${BUSY_LOOPS} busy loop(s) beside (${ctx.runs} run(s) each)`,
  );
  result.values.t3_busy_loops = BUSY_LOOPS;
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const drains = new Map<number, Drain[]>(TIMEOUTS.map((t) => [t, []]));
  const busy: ChildProcess[] = [];
  const children = new Map<number, Child[]>();
  try {
    for (const timeout of TIMEOUTS) {
      const group = Array.from({ length: DISPATCHERS }, (_, i) =>
        forkTs('../support/dispatcher-process.ts', {
          mode: 'run',
          table: TABLE,
          queue: QUEUE,
          instanceId: `bench-t3-${timeout}-${i}`,
          dispatcher: { claims: 'partitions', partitionTimeoutMs: timeout },
          partitionLines: true,
        } satisfies DispatcherChildConfig),
      );
      children.set(timeout, group);
      // A group at a time, before the busy loops: twelve starts at once on a loaded host
      // took more than two minutes.
      await Promise.all(group.map((c) => c.next('ready', 300_000)));
    }
    for (let i = 0; i < BUSY_LOOPS; i++)
      busy.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
    for (let run = 1; run <= ctx.runs; run++) {
      // Rotated, so that a drift of the host's load does not fall on one timeout.
      const order = TIMEOUTS.map((_, i) => TIMEOUTS[(i + run - 1) % TIMEOUTS.length] as number);
      for (const timeout of order) {
        const drain = await drainOnce(ctx, children.get(timeout) ?? []);
        drains.get(timeout)?.push(drain);
        ctx.log(
          `T3 run ${run}, partitionTimeoutMs ${timeout}: ${Math.round(drain.rate)} msgs/s, ${drain.lapses} lapse(s) (${drain.lapsedPartitions} partitions dropped; ${drain.reasons.join(' | ') || 'none'}), ${drain.takenOver} taken over, ${drain.moves} owner changes, ${drain.beatFailures} failed beat streak(s); copies ${drain.copies} (${drain.confirmedTwice} confirmed twice), order violations ${drain.orderViolations}, missing ${drain.missing}; load ${drain.load.toFixed(1)}`,
        );
      }
    }
  } finally {
    for (const group of children.values()) for (const c of group) c.send({ type: 'exit' });
    await Promise.all([...children.values()].flat().map((c) => c.exit()));
    for (const loop of busy) loop.kill('SIGKILL');
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE).catch(() => undefined);
  }
  let copies = 0;
  let violations = 0;
  let missing = 0;
  for (const [timeout, runs] of drains) {
    const of = (f: (d: Drain) => number): number[] => runs.map(f);
    const at = `partitionTimeoutMs ${timeout}`;
    addMetric(
      result,
      `t${timeout}_msgs_per_s`,
      `${at}: drain`,
      'msgs/s',
      of((d) => d.rate),
      MESSAGES,
    );
    addMetric(
      result,
      `t${timeout}_lapses`,
      `${at}: lapses (all dispatchers)`,
      'lapses',
      of((d) => d.lapses),
    );
    addMetric(
      result,
      `t${timeout}_copies`,
      `${at}: copies at the consumer`,
      'msgs',
      of((d) => d.copies),
    );
    addMetric(
      result,
      `t${timeout}_confirmed_twice`,
      `${at}: messages the broker confirmed twice`,
      'msgs',
      of((d) => d.confirmedTwice),
    );
    addMetric(
      result,
      `t${timeout}_taken_over`,
      `${at}: partitions taken from a lapsed owner`,
      'parts',
      of((d) => d.takenOver),
    );
    addMetric(
      result,
      `t${timeout}_owner_changes`,
      `${at}: owner changes (generations)`,
      'moves',
      of((d) => d.moves),
    );
    addMetric(
      result,
      `t${timeout}_load`,
      `${at}: 1-min load average`,
      'load',
      of((d) => d.load),
    );
    result.values[`t3_${timeout}_lapses_total`] = runs.reduce((a, d) => a + d.lapses, 0);
    result.values[`t3_${timeout}_copies_total`] = runs.reduce((a, d) => a + d.copies, 0);
    copies += runs.reduce((a, d) => a + d.copies, 0);
    violations += runs.reduce((a, d) => a + d.orderViolations, 0);
    missing += runs.reduce((a, d) => a + d.missing, 0);
  }
  const rates = (t: number): number[] => (drains.get(t) ?? []).map((d) => d.rate);
  const median = (values: number[]): number => {
    const s = [...values].sort((a, b) => a - b);
    return s.length === 0 ? Number.NaN : (s[Math.floor((s.length - 1) / 2)] as number);
  };
  if (TIMEOUTS.includes(1_500) && TIMEOUTS.includes(5_000))
    result.values.t3_5000_vs_1500_rate = round(median(rates(5_000)) / median(rates(1_500)), 3);
  addTarget(
    result,
    't3_missing',
    'messages missing at the consumer (all drains)',
    missing,
    '==',
    0,
  );
  addTarget(
    result,
    't3_order_violations',
    'per-key order violations (all drains)',
    violations,
    '==',
    0,
  );
  result.values.t3_copies_total = copies;
  return result;
}

async function drainOnce(ctx: BenchContext, active: readonly Child[]): Promise<Drain> {
  const { pg, rabbit } = ctx;
  await truncateOutbox(pg, TABLE);
  await seedOutbox(pg, TABLE, MESSAGES, { keys: KEYS });
  await analyse(pg, TABLE);
  await purgeQueue(rabbit, QUEUE);
  const generationsBefore = await generations(pg);
  const loadBefore = loadavg()[0] ?? 0;
  const go = nowMs();
  for (const c of active) c.send({ type: 'go' });
  await untilDelivered(pg, TABLE, { timeoutMs: DRAIN_TIMEOUT_MS });
  for (const c of active) c.send({ type: 'stop' });
  const done: ChildMessage[] = await Promise.all(active.map((c) => c.next('done')));
  const loadAfter = loadavg()[0] ?? 0;
  const end = Math.max(...done.map((d) => Number(d.finishedAt)));
  const moves = (await generations(pg)) - generationsBefore;
  const lines = done.map((d) => d.partitionLines as PartitionLineCounts | undefined);
  const sum = (f: (c: PartitionLineCounts) => number): number =>
    lines.reduce((a, c) => a + (c === undefined ? 0 : f(c)), 0);
  const check = await readAndCheck(QUEUE, MESSAGES);
  const confirmations = new Map<string, number>();
  for (const d of done)
    for (const id of (d.confirmedIds as string[] | undefined) ?? [])
      confirmations.set(id, (confirmations.get(id) ?? 0) + 1);
  return {
    rate: MESSAGES / ((end - go) / 1000),
    lapses: sum((c) => c.lapses),
    lapsedPartitions: sum((c) => c.lapsedPartitions),
    takenOver: sum((c) => c.takenOver),
    beatFailures: sum((c) => c.beatFailures),
    moves,
    copies: check.duplicates,
    confirmedTwice: [...confirmations.values()].filter((n) => n > 1).length,
    orderViolations: check.orderViolations,
    missing: check.missing,
    load: (loadBefore + loadAfter) / 2,
    reasons: lines.flatMap((c) => c?.lapseReasons ?? []),
  };
}

/** The sum of the partitions' generations: each take by another process raises its one. */
async function generations(ds: DataSource): Promise<number> {
  const [row] = await ds.query<{ n: string | null }[]>(
    `SELECT sum(generation)::text AS n FROM ${quoteTable(ds, `${TABLE}_owners`)}`,
  );
  return Number(row?.n ?? 0);
}
