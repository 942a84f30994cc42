/**
 * P10: what retention costs on a table that keeps a large delivered history. A cleaner pass
 * when nothing is due (it runs every minute by default: it must cost nothing), then deleting the
 * whole history by the cleaner's own chunked DELETEs, on PostgreSQL and MariaDB.
 */
import type { DataSource } from 'typeorm';
import { OutboxCleaner } from '../../lib';
import { named } from '../support/config';
import {
  analyse,
  closeDataSource,
  dropOutboxTable,
  openMaria,
  resetOutboxTable,
  seedOutbox,
} from '../support/databases';
import { startOutboxApp } from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { percentile } from '../support/stats';

const TABLE = named('bench_p10');
// Passes timed per run when nothing is due; their median is the run's figure.
const IDLE_PASSES = 20;
const IDLE_ONLY = process.env.BENCH_P10_IDLE_ONLY === '1';

export async function p10(ctx: BenchContext): Promise<ScenarioResult> {
  const h = ctx.profile.p10History;
  const result = newResult(
    'P10',
    `Cleaner over ${h.toLocaleString('en-US')} retained delivered rows: a pass with nothing due, and deleting them all (PostgreSQL, MariaDB)`,
  );
  const maria = await openMaria();
  try {
    for (const [name, ds] of [
      ['postgres', ctx.pg],
      ['mariadb', maria],
    ] as const) {
      const idle: number[] = [];
      const purge: number[] = [];
      for (let run = 1; run <= ctx.runs; run++) {
        // With BENCH_P10_IDLE_ONLY the history is seeded once and kept: each run times the
        // passes with nothing due, none deletes it (ten million rows take minutes to seed).
        if (!IDLE_ONLY || run === 1) {
          await resetOutboxTable(ds, TABLE);
          const t = performance.now();
          await seedOutbox(ds, TABLE, h, { status: 'delivered' });
          await analyse(ds, TABLE);
          ctx.log(
            `P10 ${name} run ${run}: seeded ${h} delivered rows in ${((performance.now() - t) / 1000).toFixed(1)} s`,
          );
        }
        idle.push(await idlePass(ds));
        if (!IDLE_ONLY) purge.push(await purgeAll(ds, h));
        ctx.log(
          `P10 ${name} run ${run}: idle pass p50 ${idle.at(-1)?.toFixed(2)} ms${IDLE_ONLY ? '' : `, purge ${purge.at(-1)?.toFixed(1)} s`}`,
        );
      }
      const idleSummary = addMetric(
        result,
        `${name}_idle_pass_ms`,
        `${name}: cleaner pass, nothing due`,
        'ms',
        idle,
        h,
      );
      if (!IDLE_ONLY)
        addMetric(
          result,
          `${name}_purge_s`,
          `${name}: delete ${h.toLocaleString('en-US')} due rows (cleaner's chunked DELETE)`,
          's',
          purge,
          h,
        );
      addTarget(
        result,
        `p10_${name}_idle_pass_ms`,
        `${name}: a pass with nothing due under 10 ms`,
        idleSummary.median,
        '<=',
        10,
      );
    }
  } finally {
    await dropOutboxTable(ctx.pg, TABLE);
    await dropOutboxTable(maria, TABLE);
    await closeDataSource(maria);
  }
  return result;
}

/** Median of IDLE_PASSES cleaner passes over a history that is not due (a day's retention). */
async function idlePass(ds: DataSource): Promise<number> {
  const app = await startOutboxApp({
    dataSource: ds,
    tableName: TABLE,
    publisher: { publish: (m) => Promise.resolve(m.map(() => ({ ok: true as const }))) },
    autoStart: false,
    cleaner: { deliveredRetentionMs: 86_400_000, deadRetentionMs: 86_400_000 },
  });
  try {
    const cleaner = app.app.get(OutboxCleaner);
    const times: number[] = [];
    for (let i = 0; i < IDLE_PASSES; i++) {
      const start = performance.now();
      const report = await cleaner.runOnce();
      times.push(performance.now() - start);
      if (report.delivered + report.dead !== 0) throw new Error('P10: an idle pass deleted rows');
    }
    return percentile(
      times.sort((a, b) => a - b),
      50,
    );
  } finally {
    await app.close();
  }
}

/** Seconds for the cleaner to delete every delivered row, pass after pass as its timer would. */
async function purgeAll(ds: DataSource, expected: number): Promise<number> {
  const app = await startOutboxApp({
    dataSource: ds,
    tableName: TABLE,
    publisher: { publish: (m) => Promise.resolve(m.map(() => ({ ok: true as const }))) },
    autoStart: false,
    cleaner: { deliveredRetentionMs: 1 },
  });
  try {
    const cleaner = app.app.get(OutboxCleaner);
    let deleted = 0;
    const start = performance.now();
    for (;;) {
      const { delivered } = await cleaner.runOnce();
      if (delivered === 0) break;
      deleted += delivered;
    }
    const seconds = (performance.now() - start) / 1000;
    if (deleted !== expected)
      throw new Error(`P10: the cleaner deleted ${deleted} of ${expected} rows`);
    return seconds;
  } finally {
    await app.close();
  }
}
