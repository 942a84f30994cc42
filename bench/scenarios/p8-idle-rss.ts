/**
 * P8: (a) an idle dispatcher on PostgreSQL with LISTEN/NOTIFY (defaults: poll 1 s, unlocker 30 s,
 * cleaner 60 s) — statements per second counted by a TypeORM logger in its process over
 * consecutive windows, cross-checked with pg_stat_statements when it is preloaded; (b) the
 * dispatcher process's RSS sampled through a long drain, and its heap after a full GC at 10 % and
 * at the end (a leak shows as retained heap, not as the GC sawtooth of RSS).
 */
import { named } from '../support/config';
import { forkTs } from '../support/child';
import { analyse, dropOutboxTable, resetOutboxTable, seedOutbox } from '../support/databases';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import { resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p8');
const QUEUE = named('bench.p8', '.');

interface RssSample {
  t: number;
  published: number;
  rssMb: number;
  heapMb: number;
}

export async function p8(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const result = newResult(
    'P8',
    `Idle dispatcher (LISTEN/NOTIFY, defaults), ${ctx.runs} × ${profile.p8IdleMs / 1000} s; RSS over a ${profile.p8DrainMessages.toLocaleString('en-US')}-message drain`,
  );
  await resetOutboxTable(pg, TABLE);
  // Capped queue: the broker drops the oldest, so a long drain does not fill its memory.
  await resetQueue(rabbit, QUEUE, 10_000);
  const qps: number[] = [];
  const serverQps: number[] = [];
  const statements = ctx.pgSettings.statStatements;
  try {
    if (statements) await pg.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const idle = forkTs('../support/dispatcher-process.ts', {
      mode: 'idle',
      table: TABLE,
      queue: QUEUE,
      instanceId: 'bench-p8-idle',
    } satisfies DispatcherChildConfig);
    try {
      await idle.next('ready', 60_000);
      await sleep(1_500); // past the start-up drain
      for (let run = 1; run <= ctx.runs; run++) {
        if (statements) await pg.query('SELECT pg_stat_statements_reset()');
        idle.send({ type: 'go' });
        await sleep(profile.p8IdleMs);
        idle.send({ type: 'stop' });
        const done = await idle.next('done');
        let server = Number.NaN;
        if (statements) {
          // Everything this database ran in the window except the bench's own bookkeeping.
          const rows = await pg.query<{ calls: string }[]>(
            `SELECT coalesce(sum(calls), 0) AS calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%'`,
          );
          server = Number(rows[0]?.calls ?? 0) / (profile.p8IdleMs / 1000);
          serverQps.push(server);
        }
        const rate = Number(done.queries) / Number(done.seconds);
        qps.push(rate);
        ctx.log(
          `P8 window ${run}: idle ${rate.toFixed(2)} statements/s from the dispatcher's process${statements ? `, ${server.toFixed(2)}/s seen by pg_stat_statements` : ''} ${JSON.stringify(done.texts)}`,
        );
      }
    } finally {
      idle.send({ type: 'exit' });
      await idle.exit();
    }
    if (!statements) {
      result.notes.push(
        'pg_stat_statements is not preloaded; statements counted client-side only (TypeORM logger). `npm run bench -- --configure-postgres` preloads it.',
      );
    }

    // RSS through a long drain (one run: it is long by design).
    const n = profile.p8DrainMessages;
    const t = performance.now();
    await seedOutbox(pg, TABLE, n);
    await analyse(pg, TABLE);
    ctx.log(`P8: seeded ${n} messages in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const child = forkTs(
      '../support/dispatcher-process.ts',
      {
        mode: 'rss',
        table: TABLE,
        queue: QUEUE,
        instanceId: 'bench-p8-rss',
      } satisfies DispatcherChildConfig,
      ['--expose-gc'],
    );
    try {
      await child.next('ready', 60_000);
      child.send({ type: 'go', expected: n });
      const done = await child.next('done', 3_600_000);
      const samples = done.rss as RssSample[];
      const seconds = (Number(done.finishedAt) - Number(done.startedAt)) / 1000;
      const after = samples.filter((x) => x.published >= n * 0.1);
      const first = after.filter((x) => x.published < n * 0.55);
      const second = after.filter((x) => x.published >= n * 0.55);
      const peak = (list: RssSample[]): number =>
        Math.max(...(list.length > 0 ? list : samples).map((x) => x.rssMb));
      const firstPeak = peak(first);
      const secondPeak = peak(second);
      const gcHeap = done.gcHeap as { at: string; heapMb: number }[];
      const heapWarm = gcHeap.find((g) => g.at === '10%')?.heapMb ?? Number.NaN;
      const heapEnd = gcHeap.find((g) => g.at === 'end')?.heapMb ?? Number.NaN;
      addMetric(
        result,
        'drain_msgs_per_s',
        'drain rate (dispatcher in its own process)',
        'msgs/s',
        [n / seconds],
        n,
      );
      addMetric(result, 'rss_peak_first_half_mb', 'RSS peak, 10–55 % of the drain', 'MB', [
        firstPeak,
      ]);
      addMetric(result, 'rss_peak_second_half_mb', 'RSS peak, 55–100 % of the drain', 'MB', [
        secondPeak,
      ]);
      addMetric(result, 'heap_after_gc_10pct_mb', 'heap after a full GC at 10 %', 'MB', [heapWarm]);
      addMetric(result, 'heap_after_gc_end_mb', 'heap after a full GC at the end', 'MB', [heapEnd]);
      addTarget(
        result,
        'p8_rss_peak_growth_pct',
        'RSS peak growth, second half vs first half (%)',
        (100 * (secondPeak - firstPeak)) / firstPeak,
        '<=',
        10,
      );
      result.values.p8_heap_growth_mb = round(heapEnd - heapWarm, 1);
      result.values.p8_rss_samples = JSON.stringify(
        samples
          .filter((_, i) => i % Math.max(1, Math.floor(samples.length / 40)) === 0)
          .map((x) => [Math.round(x.published), round(x.rssMb, 1)]),
      );
      result.notes.push(
        'RSS includes the ts-node TypeScript compiler loaded into the dispatcher process (constant).',
      );
      ctx.log(
        `P8: drained ${n} in ${seconds.toFixed(1)} s; RSS peak ${firstPeak.toFixed(0)} MB (10–55 %) vs ${secondPeak.toFixed(0)} MB (55–100 %); heap after GC ${heapWarm.toFixed(1)} → ${heapEnd.toFixed(1)} MB`,
      );
    } finally {
      child.send({ type: 'exit' });
      await child.exit();
    }
  } finally {
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  if (ctx.runs * profile.p8IdleMs < 60_000) {
    result.notes.push(
      `The idle windows (${(ctx.runs * profile.p8IdleMs) / 1000} s in all) are shorter than the unlocker (30 s) and cleaner (60 s) intervals, which add about 0.05 statements/s in the long run; --full observes 150 s.`,
    );
  }
  const q = addMetric(
    result,
    'idle_statements_per_s',
    'idle: statements/s (TypeORM logger in the dispatcher)',
    'q/s',
    qps,
  );
  addTarget(result, 'p8_idle_qps', 'idle statements per second', q.median, '<=', 1);
  if (serverQps.length > 0) {
    const s = addMetric(
      result,
      'idle_server_statements_per_s',
      'idle: statements/s seen by pg_stat_statements',
      'q/s',
      serverQps,
    );
    result.values.p8_idle_server_qps = round(s.median, 3);
  }
  return result;
}
