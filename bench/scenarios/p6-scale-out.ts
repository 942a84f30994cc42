/**
 * P6: 1, 2 and 4 dispatchers (each a process of its own, like app instances) draining one
 * PostgreSQL table into one RabbitMQ queue, ordering on; every message checked at the consumer
 * for duplicates and per-key order. Two backlogs, interleaved: over 1 000 keys (fewer keys than
 * one dispatcher's batches in flight hold, so ordering leaves the others little to claim) and
 * with a key per message (the issue's workload, where they can share the work). Each
 * configuration reports the share the busiest dispatcher published, and where the CPU went: the
 * dispatcher processes', PostgreSQL's and RabbitMQ's per message, and how busy both cores were.
 */
import { KEYS, named } from '../support/config';
import { forkTs, type Child, type ChildMessage } from '../support/child';
import {
  analyse,
  dropOutboxTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
  untilDelivered,
} from '../support/databases';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import { purgeQueue, readAndCheck, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, ratio, round } from '../support/stats';
import { cpuBetween, readCpu, type CpuReading } from '../support/system-cpu';

const TABLE = named('bench_p6');
const QUEUE = named('bench.p6', '.');
const COUNTS = [1, 2, 4] as const;

/** The backlogs, by the prefix of their metric names. */
const LAYOUTS = [
  { prefix: '', keys: (): number => KEYS, label: `${KEYS.toLocaleString('en-US')} keys` },
  { prefix: 'unique_', keys: (n: number): number => n, label: 'a key per message' },
] as const;
type Prefix = (typeof LAYOUTS)[number]['prefix'];

/** Whose CPU each configuration reports, by metric name. */
const CPU_USERS = [
  ['dispatchers', 'the dispatcher processes'],
  ['postgres', 'PostgreSQL'],
  ['rabbitmq', 'RabbitMQ'],
] as const;

export async function p6(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p6Messages;
  const result = newResult(
    'P6',
    `Scale-out: 1, 2 and 4 dispatcher processes on one PostgreSQL table → RabbitMQ, ordering on (${n.toLocaleString('en-US')} msgs)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const perCount = (): Record<number, number[]> => ({ 1: [], 2: [], 4: [] });
  const samples = () => ({
    rates: perCount(),
    busiest: perCount(),
    /** CPU per message (µs) of the dispatcher processes, PostgreSQL and RabbitMQ. */
    dispatchers: perCount(),
    postgres: perCount(),
    rabbitmq: perCount(),
    /** Share of both cores' time that was busy. */
    busy: perCount(),
  });
  const byLayout: Record<Prefix, ReturnType<typeof samples>> = {
    '': samples(),
    unique_: samples(),
  };
  let duplicates = 0;
  let violations = 0;
  let missing = 0;
  // Four dispatcher processes started once; each configuration uses the first 1, 2 or 4.
  const children: Child[] = Array.from({ length: 4 }, (_, i) =>
    forkTs('../support/dispatcher-process.ts', {
      mode: 'run',
      table: TABLE,
      queue: QUEUE,
      instanceId: `bench-p6-${i}`,
    } satisfies DispatcherChildConfig),
  );
  try {
    await Promise.all(children.map((c) => c.next('ready', 60_000)));
    for (let run = 1; run <= ctx.runs; run++) {
      for (const layout of LAYOUTS) {
        for (const count of COUNTS) {
          const active = children.slice(0, count);
          let go = 0;
          let done: ChildMessage[] = [];
          let cpuBefore: CpuReading | undefined;
          let cpuAfter: CpuReading | undefined;
          for (let attempt = 1; ; attempt++) {
            await truncateOutbox(pg, TABLE);
            await seedOutbox(pg, TABLE, n, { keys: layout.keys(n) });
            await analyse(pg, TABLE);
            await purgeQueue(rabbit, QUEUE);
            cpuBefore = readCpu();
            go = nowMs();
            for (const c of active) c.send({ type: 'go' });
            await untilDelivered(pg, TABLE);
            cpuAfter = readCpu();
            for (const c of active) c.send({ type: 'stop' });
            done = await Promise.all(active.map((c) => c.next('done')));
            const outages = done.reduce((a, d) => a + Number(d.outages ?? 0), 0);
            if (outages === 0 || attempt >= 3) break;
            ctx.log(
              `P6 run ${run} (${layout.label}, ${count}): ${outages} outage(s) during the run; repeating it`,
            );
          }
          const end = Math.max(...done.map((d) => Number(d.finishedAt)));
          const published = done.map((d) => Number(d.published));
          const rate = n / ((end - go) / 1000);
          const of = byLayout[layout.prefix];
          of.rates[count]?.push(rate);
          of.busiest[count]?.push(Math.max(...published) / n);
          if (cpuBefore !== undefined && cpuAfter !== undefined) {
            const use = cpuBetween(cpuBefore, cpuAfter);
            of.dispatchers[count]?.push(done.reduce((a, d) => a + Number(d.cpuUs ?? 0), 0) / n);
            of.postgres[count]?.push((use.servicesUs.postgres ?? 0) / n);
            of.rabbitmq[count]?.push((use.servicesUs.rabbitmq ?? 0) / n);
            of.busy[count]?.push(use.busyShare);
          }
          const check = await readAndCheck(QUEUE, n);
          duplicates += check.duplicates;
          violations += check.orderViolations;
          missing += check.missing;
          ctx.log(
            `P6 run ${run}, ${layout.label}: ${count} dispatcher(s) ${Math.round(rate)} msgs/s (published ${published.reduce((a, b) => a + b, 0)}: ${published.join('/')}; dup ${check.duplicates}, order violations ${check.orderViolations}, missing ${check.missing})`,
          );
        }
      }
    }
  } finally {
    for (const c of children) c.send({ type: 'exit' });
    await Promise.all(children.map((c) => c.exit()));
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const ratios: Record<Prefix, { two: number; four: number }> = {
    '': { two: 0, four: 0 },
    unique_: { two: 0, four: 0 },
  };
  for (const layout of LAYOUTS) {
    const { rates: r, busiest, ...cpu } = byLayout[layout.prefix];
    const name = (what: string): string => `${layout.prefix}${what}`;
    const on = layout.prefix === '' ? '' : `, ${layout.label}`;
    const median: Record<number, number> = {};
    for (const count of COUNTS) {
      const who = `${count} dispatcher${count === 1 ? '' : 's'}${on}`;
      const rate = addMetric(
        result,
        name(`d${count}_msgs_per_s`),
        who,
        'msgs/s',
        r[count] ?? [],
        n,
      );
      median[count] = rate.median;
      for (const [what, whose] of CPU_USERS) {
        const runs = cpu[what][count] ?? [];
        if (runs.length === 0) continue;
        addMetric(
          result,
          name(`d${count}_cpu_${what}_us_per_msg`),
          `${who}: CPU of ${whose} per message`,
          'µs',
          runs,
        );
      }
      if ((cpu.busy[count] ?? []).length > 0) {
        addMetric(
          result,
          name(`d${count}_busy_share`),
          `${who}: share of both cores busy`,
          'share',
          cpu.busy[count] ?? [],
        );
      }
      if (count === 1) continue;
      addMetric(
        result,
        name(`d${count}_busiest_share`),
        `${who}: share the busiest one published`,
        'share',
        busiest[count] ?? [],
      );
    }
    ratios[layout.prefix] = {
      two: ratio(median[2] ?? Number.NaN, median[1] ?? Number.NaN),
      four: ratio(median[4] ?? Number.NaN, median[1] ?? Number.NaN),
    };
  }
  result.values.p6_2_vs_1 = round(ratios[''].two, 3);
  addTarget(
    result,
    'p6_4_vs_1',
    '4 dispatchers ÷ 1 dispatcher (no collapse)',
    ratios[''].four,
    '>=',
    0.9,
  );
  // The scale-out target, on its workload (a key per message).
  addTarget(
    result,
    'p6_unique_2_vs_1',
    'a key per message: 2 dispatchers ÷ 1 dispatcher',
    ratios.unique_.two,
    '>=',
    1,
  );
  addTarget(
    result,
    'p6_unique_4_vs_1',
    'a key per message: 4 dispatchers ÷ 1 dispatcher',
    ratios.unique_.four,
    '>=',
    1,
  );
  addTarget(result, 'p6_duplicates', 'duplicates at the consumer (all runs)', duplicates, '==', 0);
  addTarget(
    result,
    'p6_order_violations',
    'per-key order violations (all runs)',
    violations,
    '==',
    0,
  );
  addTarget(result, 'p6_missing', 'messages missing at the consumer', missing, '==', 0);
  return result;
}
