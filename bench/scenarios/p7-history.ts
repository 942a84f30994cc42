/**
 * P7: does delivered history slow the dispatcher down? The same backlog drained from a table
 * that retains a large delivered history (default retention keeps delivered rows a day) and
 * from an empty table; claim time per batch timed around the store.
 */
import { named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import {
  drainAll,
  instrument,
  measured,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from '../support/outbox-app';
import { purgeQueue, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { percentile, ratio } from '../support/stats';

const EMPTY = named('bench_p7_empty');
const HISTORY = named('bench_p7_history');
const QUEUE = named('bench.p7', '.');

export async function p7(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p7Messages;
  const h = profile.p7History;
  const result = newResult(
    'P7',
    `Drain ${n.toLocaleString('en-US')} msgs over ${h.toLocaleString('en-US')} retained delivered rows vs an empty history (PostgreSQL → RabbitMQ)`,
  );
  await resetQueue(rabbit, QUEUE, 10_000);
  await resetOutboxTable(pg, EMPTY);
  await resetOutboxTable(pg, HISTORY);
  const t = performance.now();
  await seedOutbox(pg, HISTORY, h, { status: 'delivered', from: -h });
  await analyse(pg, HISTORY);
  ctx.log(`P7: seeded ${h} delivered rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  const apps: Record<string, { app: OutboxApp; claims: number[]; rates: number[] }> = {};
  for (const table of [EMPTY, HISTORY]) {
    const publisher = rabbitPublisher(QUEUE);
    const app = await startOutboxApp({
      dataSource: pg,
      tableName: table,
      publisher,
      autoStart: false,
      instanceId: `bench-${table}`,
    });
    apps[table] = { app, claims: [], rates: [] };
  }
  const claimMedians: Record<string, number[]> = { [EMPTY]: [], [HISTORY]: [] };
  try {
    for (const table of [EMPTY, HISTORY]) {
      const entry = apps[table];
      if (entry === undefined) continue;
      await seedOutbox(pg, table, 1_000, { from: 1 });
      await drainAll(entry.app, pg, table);
    }
    for (let run = 1; run <= ctx.runs; run++) {
      for (const table of [EMPTY, HISTORY]) {
        const entry = apps[table];
        if (entry === undefined) continue;
        const times = instrument(entry.app.store);
        const rate = await measured(
          `P7 run ${run} ${table}`,
          ctx.log,
          async () => {
            if (table === EMPTY) await truncateOutbox(pg, table);
            else await pg.query(`DELETE FROM "${table}" WHERE status <> 'delivered'`);
            await seedOutbox(pg, table, n, { from: 1 });
            await analyse(pg, table);
            await purgeQueue(rabbit, QUEUE);
            times.claimMs.length = 0;
            const start = performance.now();
            await drainAll(entry.app, pg, table);
            return n / ((performance.now() - start) / 1000);
          },
          [entry.app],
        );
        entry.rates.push(rate);
        const claimMedian = percentile(
          [...times.claimMs].sort((a, b) => a - b),
          50,
        );
        claimMedians[table]?.push(claimMedian);
        ctx.log(
          `P7 run ${run}: ${table === EMPTY ? 'empty history' : `${h} delivered rows`}: ${Math.round(rate)} msgs/s, claim p50 ${claimMedian.toFixed(2)} ms`,
        );
        uninstrument(entry.app);
      }
    }
  } finally {
    for (const { app } of Object.values(apps)) await app.close();
    await dropOutboxTable(pg, EMPTY);
    await dropOutboxTable(pg, HISTORY);
    await rabbit.deleteQueue(QUEUE);
  }
  const empty = addMetric(
    result,
    'empty_msgs_per_s',
    'empty history',
    'msgs/s',
    apps[EMPTY]?.rates ?? [],
    n,
  );
  const hist = addMetric(
    result,
    'history_msgs_per_s',
    `${h.toLocaleString('en-US')} delivered rows retained`,
    'msgs/s',
    apps[HISTORY]?.rates ?? [],
    n,
  );
  const ce = addMetric(
    result,
    'claim_p50_ms_empty',
    'claim statement p50, empty history',
    'ms',
    claimMedians[EMPTY] ?? [],
  );
  const ch = addMetric(
    result,
    'claim_p50_ms_history',
    'claim statement p50, with history',
    'ms',
    claimMedians[HISTORY] ?? [],
  );
  addTarget(
    result,
    'p7_history_vs_empty',
    'drain with history ÷ drain into empty history',
    ratio(hist.median, empty.median),
    '>=',
    0.8,
  );
  addTarget(
    result,
    'p7_claim_history_vs_empty',
    'claim time with history ÷ empty (independent of history)',
    ratio(ch.median, ce.median),
    '<=',
    1.25,
  );
  return result;
}

/** Drops the timing wrappers instrument() put on the store (they are own properties). */
function uninstrument(app: OutboxApp): void {
  delete (app.store as unknown as Record<string, unknown>).claim;
  delete (app.store as unknown as Record<string, unknown>).settle;
}
