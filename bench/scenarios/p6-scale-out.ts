/**
 * P6: 1, 2 and 4 dispatchers (each a process of its own, like app instances) draining one
 * PostgreSQL table into one RabbitMQ queue, ordering on; every message checked at the consumer
 * for duplicates and per-key order.
 */
import { named } from '../support/config';
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

const TABLE = named('bench_p6');
const QUEUE = named('bench.p6', '.');
const COUNTS = [1, 2, 4] as const;

export async function p6(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p6Messages;
  const result = newResult(
    'P6',
    `Scale-out: 1, 2 and 4 dispatcher processes on one PostgreSQL table → RabbitMQ, ordering on (${n.toLocaleString('en-US')} msgs)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const rates: Record<number, number[]> = { 1: [], 2: [], 4: [] };
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
      for (const count of COUNTS) {
        const active = children.slice(0, count);
        let go = 0;
        let done: ChildMessage[] = [];
        for (let attempt = 1; ; attempt++) {
          await truncateOutbox(pg, TABLE);
          await seedOutbox(pg, TABLE, n);
          await analyse(pg, TABLE);
          await purgeQueue(rabbit, QUEUE);
          go = nowMs();
          for (const c of active) c.send({ type: 'go' });
          await untilDelivered(pg, TABLE);
          for (const c of active) c.send({ type: 'stop' });
          done = await Promise.all(active.map((c) => c.next('done')));
          const outages = done.reduce((a, d) => a + Number(d.outages ?? 0), 0);
          if (outages === 0 || attempt >= 3) break;
          ctx.log(`P6 run ${run} (${count}): ${outages} outage(s) during the run; repeating it`);
        }
        const end = Math.max(...done.map((d) => Number(d.finishedAt)));
        const published = done.reduce((a, d) => a + Number(d.published), 0);
        const rate = n / ((end - go) / 1000);
        rates[count]?.push(rate);
        const check = await readAndCheck(QUEUE, n);
        duplicates += check.duplicates;
        violations += check.orderViolations;
        missing += check.missing;
        ctx.log(
          `P6 run ${run}: ${count} dispatcher(s) ${Math.round(rate)} msgs/s (published ${published}: ${done.map((d) => d.published).join('/')}; dup ${check.duplicates}, order violations ${check.orderViolations}, missing ${check.missing})`,
        );
      }
    }
  } finally {
    for (const c of children) c.send({ type: 'exit' });
    await Promise.all(children.map((c) => c.exit()));
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const one = addMetric(result, 'd1_msgs_per_s', '1 dispatcher', 'msgs/s', rates[1] ?? [], n);
  const two = addMetric(result, 'd2_msgs_per_s', '2 dispatchers', 'msgs/s', rates[2] ?? [], n);
  const four = addMetric(result, 'd4_msgs_per_s', '4 dispatchers', 'msgs/s', rates[4] ?? [], n);
  result.values.p6_2_vs_1 = round(ratio(two.median, one.median), 3);
  addTarget(
    result,
    'p6_4_vs_1',
    '4 dispatchers ÷ 1 dispatcher (no collapse)',
    ratio(four.median, one.median),
    '>=',
    0.9,
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
