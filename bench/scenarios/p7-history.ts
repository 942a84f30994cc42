/**
 * P7: does delivered history slow the dispatcher down? The same backlog drained from a table
 * that retains a large delivered history (default retention keeps delivered rows a day), from a
 * table partitioned by day whose same history sits in yesterday's partition beside today's
 * (docs/partitioning.md), and from an empty table; claim time per batch timed around the store.
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
import { partitionedTableWithPast } from '../support/partitions';
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
const PARTITIONED = named('bench_p7_part');
const TABLES = [EMPTY, HISTORY, PARTITIONED] as const;
/** The partitioned table's history was delivered yesterday: it sits in yesterday's partition. */
const AGE_DAYS = 1;
const QUEUE = named('bench.p7', '.');

export async function p7(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p7Messages;
  const h = profile.p7History;
  const result = newResult(
    'P7',
    `Drain ${n.toLocaleString('en-US')} msgs over ${h.toLocaleString('en-US')} retained delivered rows (plain table, and in a past partition) vs an empty history (PostgreSQL → RabbitMQ)`,
  );
  const apps: Record<string, { app: OutboxApp; claims: number[]; rates: number[] }> = {};
  const claimMedians: Record<string, number[]> = {
    [EMPTY]: [],
    [HISTORY]: [],
    [PARTITIONED]: [],
  };
  try {
    await resetQueue(rabbit, QUEUE, 10_000);
    await resetOutboxTable(pg, EMPTY);
    await resetOutboxTable(pg, HISTORY);
    const t = performance.now();
    await seedOutbox(pg, HISTORY, h, { status: 'delivered', from: -h });
    await analyse(pg, HISTORY);
    ctx.log(`P7: seeded ${h} delivered rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const past = await partitionedTableWithPast(pg, PARTITIONED, AGE_DAYS);
    const tp = performance.now();
    await seedOutbox(pg, PARTITIONED, h, { status: 'delivered', from: -h, ageDays: AGE_DAYS });
    await analyse(pg, PARTITIONED);
    // A row outside the past partition would sit beside the backlog and measure something else.
    const inPast = await past.rows();
    if (inPast !== h)
      throw new Error(
        `P7: ${inPast} of the ${h} delivered rows landed in the partition ${past.suffix} (midnight UTC passed while seeding?)`,
      );
    ctx.log(
      `P7: seeded ${h} delivered rows into the partition ${past.suffix} in ${((performance.now() - tp) / 1000).toFixed(1)} s`,
    );

    for (const table of TABLES) {
      const app = await startOutboxApp({
        dataSource: pg,
        tableName: table,
        publisher: rabbitPublisher(QUEUE),
        autoStart: false,
        instanceId: `bench-${table}`,
        ...(table === PARTITIONED ? { partitioning: { interval: 'day' as const } } : {}),
      });
      apps[table] = { app, claims: [], rates: [] };
    }
    for (const table of TABLES) {
      const entry = apps[table];
      if (entry === undefined) continue;
      await seedOutbox(pg, table, 1_000, { from: 1 });
      await drainAll(entry.app, pg, table);
    }
    for (let run = 1; run <= ctx.runs; run++) {
      for (const table of TABLES) {
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
        const what =
          table === EMPTY
            ? 'empty history'
            : table === HISTORY
              ? `${h} delivered rows`
              : `${h} delivered rows in ${past.suffix}`;
        ctx.log(
          `P7 run ${run}: ${what}: ${Math.round(rate)} msgs/s, claim p50 ${claimMedian.toFixed(2)} ms`,
        );
        uninstrument(entry.app);
      }
    }
  } finally {
    for (const { app } of Object.values(apps)) await app.close();
    await dropOutboxTable(pg, EMPTY);
    await dropOutboxTable(pg, HISTORY);
    await dropOutboxTable(pg, PARTITIONED);
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
  const part = addMetric(
    result,
    'partitioned_msgs_per_s',
    `${h.toLocaleString('en-US')} delivered rows in yesterday's partition`,
    'msgs/s',
    apps[PARTITIONED]?.rates ?? [],
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
  const cp = addMetric(
    result,
    'claim_p50_ms_partitioned',
    'claim statement p50, history in a past partition',
    'ms',
    claimMedians[PARTITIONED] ?? [],
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
  addTarget(
    result,
    'p7_partitioned_vs_empty',
    'drain with history in a past partition ÷ drain into empty history (within 1.1 ×)',
    ratio(part.median, empty.median),
    '>=',
    0.91,
  );
  addTarget(
    result,
    'p7_claim_partitioned_vs_empty',
    'claim time with history in a past partition ÷ empty',
    ratio(cp.median, ce.median),
    '<=',
    1.1,
  );
  return result;
}

/** Drops the timing wrappers instrument() put on the store (they are own properties). */
function uninstrument(app: OutboxApp): void {
  delete (app.store as unknown as Record<string, unknown>).claim;
  delete (app.store as unknown as Record<string, unknown>).settle;
}
