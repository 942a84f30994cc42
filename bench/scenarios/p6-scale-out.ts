/**
 * P6: 1, 2 and 4 dispatchers (each a process of its own, like app instances) draining one
 * PostgreSQL table into one RabbitMQ queue, ordering on; every message checked at the consumer
 * for duplicates and per-key order. Two backlogs, interleaved: over 1 000 keys (fewer keys than
 * one dispatcher's batches in flight hold, so ordering leaves the others little to claim) and
 * with a key per message (the issue's workload, where they can share the work). Each
 * configuration reports the share the busiest dispatcher published, and where the CPU went: the
 * dispatcher processes', PostgreSQL's and RabbitMQ's per message, and how busy both cores were.
 * Beside them, the queue's ceiling: 1, 2 and 4 publisher processes with no database publish the
 * same number of messages, with the module's message properties, into the same queue (`ceiling_…`
 * metrics): what RabbitMQ accepts here when the drain asks nothing else of the machine.
 *
 * P6P: the same with `dispatcher.claims: 'partitions'` (the processes divide the key space's
 * partitions between them), on a table of its own.
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
import type { PublisherChildConfig } from '../support/publisher-process';
import { purgeQueue, queueDepth, readAndCheck, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, ratio, round, summarise } from '../support/stats';
import { cpuBetween, readCpu, type CpuReading } from '../support/system-cpu';

const QUEUE = named('bench.p6', '.');

/** Which scale-out: the default claims (P6) or partitions (P6P). */
interface ScaleOut {
  readonly id: 'P6' | 'P6P';
  readonly table: string;
  readonly claims?: 'partitions';
}
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

export function p6(ctx: BenchContext): Promise<ScenarioResult> {
  return scaleOut(ctx, { id: 'P6', table: named('bench_p6') });
}

export function p6p(ctx: BenchContext): Promise<ScenarioResult> {
  return scaleOut(ctx, { id: 'P6P', table: named('bench_p6p'), claims: 'partitions' });
}

async function scaleOut(ctx: BenchContext, variant: ScaleOut): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p6Messages;
  const TABLE = variant.table;
  const claims = variant.claims === undefined ? '' : ` with dispatcher.claims '${variant.claims}'`;
  const result = newResult(
    variant.id,
    `Scale-out: 1, 2 and 4 dispatcher processes${claims} on one PostgreSQL table → RabbitMQ, ordering on (${n.toLocaleString('en-US')} msgs)`,
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
    /** Claims per 1 000 messages, and of those, the ones that leased nothing. */
    claims: perCount(),
    emptyClaims: perCount(),
  });
  const byLayout: Record<Prefix, ReturnType<typeof samples>> = {
    '': samples(),
    unique_: samples(),
  };
  const ceiling = {
    rates: perCount(),
    publishers: perCount(),
    rabbitmq: perCount(),
    busy: perCount(),
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
      instanceId: `bench-${variant.id.toLowerCase()}-${i}`,
      ...(variant.claims === undefined ? {} : { dispatcher: { claims: variant.claims } }),
    } satisfies DispatcherChildConfig),
  );
  const publishers: Child[] = Array.from({ length: 4 }, () =>
    forkTs('../support/publisher-process.ts', { queue: QUEUE } satisfies PublisherChildConfig),
  );
  try {
    await Promise.all([...children, ...publishers].map((c) => c.next('ready', 60_000)));
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
          const sum = (field: string): number =>
            done.reduce((a, d) => a + Number(d[field] ?? 0), 0);
          of.claims[count]?.push((1000 * sum('claims')) / n);
          of.emptyClaims[count]?.push((1000 * sum('emptyClaims')) / n);
          const check = await readAndCheck(QUEUE, n);
          duplicates += check.duplicates;
          violations += check.orderViolations;
          missing += check.missing;
          ctx.log(
            `P6 run ${run}, ${layout.label}: ${count} dispatcher(s) ${Math.round(rate)} msgs/s (published ${published.reduce((a, b) => a + b, 0)}: ${published.join('/')}; dup ${check.duplicates}, order violations ${check.orderViolations}, missing ${check.missing})`,
          );
        }
      }
      for (const count of COUNTS) {
        const active = publishers.slice(0, count);
        await purgeQueue(rabbit, QUEUE);
        const before = readCpu();
        const go = nowMs();
        active.forEach((c, i) => c.send({ type: 'go', count: n / count, from: (i * n) / count }));
        const done = await Promise.all(active.map((c) => c.next('done')));
        const after = readCpu();
        const rate = n / ((Math.max(...done.map((d) => Number(d.finishedAt))) - go) / 1000);
        ceiling.rates[count]?.push(rate);
        ceiling.publishers[count]?.push(done.reduce((a, d) => a + Number(d.cpuUs), 0) / n);
        if (before !== undefined && after !== undefined) {
          const use = cpuBetween(before, after);
          ceiling.rabbitmq[count]?.push((use.servicesUs.rabbitmq ?? 0) / n);
          ceiling.busy[count]?.push(use.busyShare);
        }
        const depth = await queueDepth(rabbit, QUEUE);
        // Every message was confirmed, so each should be in the queue: a shortfall is the
        // broker's (or this baseline's), not the module's, and is said apart.
        if (depth !== n)
          result.notes.push(
            `the queue's ceiling, run ${run}, ${count} publisher(s): the queue held ${depth} of ${n}`,
          );
        ctx.log(
          `P6 run ${run}, the queue's ceiling: ${count} publisher(s), no database, ${Math.round(rate)} msgs/s (queue holds ${depth})`,
        );
      }
    }
  } finally {
    for (const c of [...children, ...publishers]) c.send({ type: 'exit' });
    await Promise.all([...children, ...publishers].map((c) => c.exit()));
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const ratios: Record<Prefix, { two: number; four: number }> = {
    '': { two: 0, four: 0 },
    unique_: { two: 0, four: 0 },
  };
  for (const layout of LAYOUTS) {
    const { rates: r, busiest, claims, emptyClaims, ...cpu } = byLayout[layout.prefix];
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
      for (const [what, runs, label] of [
        ['claims', claims, 'claims per 1 000 messages'],
        ['empty_claims', emptyClaims, 'claims that leased nothing, per 1 000 messages'],
      ] as const) {
        addMetric(
          result,
          name(`d${count}_${what}_per_1000`),
          `${who}: ${label}`,
          'claims',
          runs[count] ?? [],
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
  const ceilingMedian: Record<number, number> = {};
  for (const count of COUNTS) {
    const who = `the queue's ceiling: ${count} publisher${count === 1 ? '' : 's'}, no database`;
    ceilingMedian[count] = addMetric(
      result,
      `ceiling_p${count}_msgs_per_s`,
      who,
      'msgs/s',
      ceiling.rates[count] ?? [],
      n,
    ).median;
    addMetric(
      result,
      `ceiling_p${count}_cpu_publishers_us_per_msg`,
      `${who}: CPU of the publisher processes per message`,
      'µs',
      ceiling.publishers[count] ?? [],
    );
    if ((ceiling.rabbitmq[count] ?? []).length > 0) {
      addMetric(
        result,
        `ceiling_p${count}_cpu_rabbitmq_us_per_msg`,
        `${who}: CPU of RabbitMQ per message`,
        'µs',
        ceiling.rabbitmq[count] ?? [],
      );
      addMetric(
        result,
        `ceiling_p${count}_busy_share`,
        `${who}: share of both cores busy`,
        'share',
        ceiling.busy[count] ?? [],
      );
    }
  }
  // How close one dispatcher's drain (a key per message) comes to what the queue takes alone.
  result.values.p6_unique_1_vs_ceiling = round(
    ratio(
      summarise(byLayout.unique_.rates[1] ?? []).median,
      Math.max(...COUNTS.map((c) => ceilingMedian[c] ?? 0)),
    ),
    3,
  );
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
