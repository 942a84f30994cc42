/**
 * P26: what the optional schema steps cost a live table (issue 75, item 17). A table at every
 * step but the options' ones (what `outbox schema migrate` leaves of a 0.2 table without
 * `--with`) holding `BENCH_P26_ROWS` (500 000) rows of 1 KiB JSON is migrated `with` tenants and
 * partitions (steps 7 and 9) while a writer inserts one row per transaction at a steady
 * `BENCH_P26_RATE` (100 a second), each insert started on its schedule whether the earlier ones
 * have finished or not (so an insert the migration blocks waits, and the ones after it queue):
 * on PostgreSQL once in the one-statement form (stored generated columns, plain CREATE INDEX)
 * and once `online` (trigger, batches, CREATE INDEX CONCURRENTLY), each on a freshly seeded
 * table; on MariaDB the tenants step (its one form: a virtual column and an index built
 * `ALGORITHM=INPLACE, LOCK=NONE`; step 9 is PostgreSQL's only). The control is the same writer
 * on the same table with no migration, for `BENCH_P26_CONTROL_MS` (10 s). Printed: the
 * migration's time, the longest and the p99 an insert started during it took (start on schedule
 * → commit), the inserts that failed, and the control's. A figure to choose by, not a target.
 */
import type { DataSource } from 'typeorm';
import { ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import type { OutboxStepOption } from '../../lib/store/schema/schema-steps';
import { named } from '../support/config';
import {
  analyse,
  closeDataSource,
  dialectOf,
  dropOutboxTable,
  openMaria,
  openPostgres,
  PAD,
  quoteTable,
  seedOutbox,
} from '../support/databases';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { nowMs, percentile, round, summarise } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p26');
const ROWS = Number(process.env.BENCH_P26_ROWS ?? 500_000);
const RATE = Number(process.env.BENCH_P26_RATE ?? 100);
const CONTROL_MS = Number(process.env.BENCH_P26_CONTROL_MS ?? 10_000);
/** Connections of the writer: inserts beyond them queue in the pool (and that wait counts). */
const WRITER_CONNECTIONS = 16;
/** The writer runs this long before and after the migration, so it is steady when it starts. */
const MARGIN_MS = 1_000;

/** PostgreSQL's one-statement form, its online form; MariaDB's one form (in place, LOCK=NONE). */
type Form = 'blocking' | 'online' | 'inplace';

interface Insert {
  readonly scheduledAt: number;
  readonly tookMs: number;
  /** The error of an insert that failed. */
  readonly error?: string;
}

/** What the writer saw during a window: its inserts started in it. */
interface Window {
  readonly ms: number;
  readonly inserts: number;
  readonly maxMs: number;
  readonly p99Ms: number;
  readonly p50Ms: number;
  readonly failed: number;
  /** Inserts that took longer than a second. */
  readonly overSecond: number;
  /** The first failed insert's error. */
  readonly firstError: string | undefined;
  /** The longest stretch of the window in which no insert committed (writes stopped). */
  readonly stallMs: number;
}

export async function p26(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P26',
    `optional schema steps on a live ${ROWS}-row table: migrate --with tenants,partitions, blocking vs --online, beside a writer at ${RATE} inserts/s`,
  );
  await measureOn(ctx, result, ctx.pg, ['tenants', 'partitions'], ['blocking', 'online']);
  const maria = await openMaria();
  try {
    await measureOn(ctx, result, maria, ['tenants'], ['inplace']);
  } finally {
    await closeDataSource(maria);
  }
  result.notes.push(
    `${ROWS} rows of 1 KiB JSON (1 000 keys, pending), seeded afresh before each migration; the writer inserts one row per transaction at ${RATE}/s on ${WRITER_CONNECTIONS} connections, each insert timed from its scheduled start (pool queue included) to its commit`,
    "MariaDB's tenants step has one form (a virtual column, an index built ALGORITHM=INPLACE, LOCK=NONE), 'inplace'; it has no step 9",
  );
  return result;
}

async function measureOn(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  steps: readonly OutboxStepOption[],
  forms: readonly Form[],
): Promise<void> {
  const label = dialectOf(db);
  const writerDb =
    label === 'postgres' ? await openPostgres({ poolSize: WRITER_CONNECTIONS }) : await openMaria();
  const migrationMs: Record<Form, number[]> = { blocking: [], online: [], inplace: [] };
  const during: Record<Form, Window[]> = { blocking: [], online: [], inplace: [] };
  const control: Window[] = [];
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      for (const form of forms) {
        await seedTable(db);
        // The control: the same writer on the same table, no migration.
        const alone = await withWriter(writerDb, async () => {
          await sleep(CONTROL_MS);
        });
        control.push(alone.window);
        const migrated = await withWriter(writerDb, async () => {
          await ensureOutboxTable(db, {
            tableName: TABLE,
            with: steps,
            ...(form === 'online' ? { online: true } : {}),
          });
        });
        migrationMs[form].push(migrated.window.ms);
        during[form].push(migrated.window);
        ctx.log(
          `P26 ${label} run ${run} ${form}: migration ${(migrated.window.ms / 1000).toFixed(2)} s; inserts during it ${migrated.window.inserts}, longest ${migrated.window.maxMs.toFixed(0)} ms, p99 ${migrated.window.p99Ms.toFixed(0)} ms, over 1 s ${migrated.window.overSecond}, no commit for ${migrated.window.stallMs.toFixed(0)} ms, failed ${migrated.window.failed}${migrated.window.firstError === undefined ? '' : ` (${migrated.window.firstError})`}; control (${alone.window.inserts} inserts) longest ${alone.window.maxMs.toFixed(0)} ms, p99 ${alone.window.p99Ms.toFixed(1)} ms`,
        );
        await dropTable(db);
      }
    }
  } finally {
    await dropTable(db);
    await closeDataSource(writerDb);
  }
  for (const form of forms) {
    const windows = during[form];
    addMetric(
      result,
      `${label}_${form}_migration_s`,
      `${label}: migrate --with ${steps.join(',')}${form === 'online' ? ' --online' : ''}: time`,
      's',
      migrationMs[form].map((ms) => ms / 1000),
    );
    addMetric(
      result,
      `${label}_${form}_longest_insert_ms`,
      `${label}, ${form}: the longest an insert took during the migration`,
      'ms',
      windows.map((w) => w.maxMs),
    );
    addMetric(
      result,
      `${label}_${form}_p99_insert_ms`,
      `${label}, ${form}: p99 of the inserts during the migration`,
      'ms',
      windows.map((w) => w.p99Ms),
    );
    addMetric(
      result,
      `${label}_${form}_stall_ms`,
      `${label}, ${form}: the longest stretch of the migration with no insert committed`,
      'ms',
      windows.map((w) => w.stallMs),
    );
    result.values[`p26_${label}_${form}_failed_inserts`] = windows.reduce(
      (n, w) => n + w.failed,
      0,
    );
    result.values[`p26_${label}_${form}_inserts_over_1s`] = round(
      summarise(windows.map((w) => w.overSecond)).median,
      0,
    );
  }
  addMetric(
    result,
    `${label}_control_longest_insert_ms`,
    `${label}, control (no migration): the longest an insert took`,
    'ms',
    control.map((w) => w.maxMs),
  );
  addMetric(
    result,
    `${label}_control_p99_insert_ms`,
    `${label}, control: p99 of the inserts`,
    'ms',
    control.map((w) => w.p99Ms),
  );
  addMetric(
    result,
    `${label}_control_stall_ms`,
    `${label}, control: the longest stretch with no insert committed`,
    'ms',
    control.map((w) => w.stallMs),
  );
  result.values[`p26_${label}_control_failed_inserts`] = control.reduce((n, w) => n + w.failed, 0);
}

/** A table at every step but the options' ones, holding ROWS rows. */
async function seedTable(db: DataSource): Promise<void> {
  await dropTable(db);
  await ensureOutboxTable(db, { tableName: TABLE });
  await seedOutbox(db, TABLE, ROWS);
  await analyse(db, TABLE);
}

async function dropTable(db: DataSource): Promise<void> {
  await dropOutboxTable(db, TABLE);
  if (dialectOf(db) === 'postgres') {
    // The online form's trigger functions outlive the table.
    for (const tag of ['tenant', 'part']) {
      await db.query(`DROP FUNCTION IF EXISTS "${TABLE}_${tag}_fill"()`);
    }
  }
}

/**
 * Runs `work` while a writer inserts at RATE a second, from MARGIN_MS before it to MARGIN_MS
 * after it; the window is `work`'s, and its inserts those scheduled within it.
 */
async function withWriter(
  writerDb: DataSource,
  work: () => Promise<void>,
): Promise<{ window: Window }> {
  const inserts: Insert[] = [];
  const pending = new Set<Promise<void>>();
  const t = quoteTable(writerDb, TABLE);
  const sql =
    dialectOf(writerDb) === 'postgres'
      ? `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (gen_random_uuid(), 'bench', $1, 'order.created', $2, $3)`
      : `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'bench', ?, 'order.created', ?, ?)`;
  let seq = 0;
  let stop = false;
  const interval = 1000 / RATE;
  const writer = (async () => {
    const start = nowMs();
    for (let n = 0; !stop; n++) {
      const at = start + n * interval;
      const wait = at - nowMs();
      if (wait > 0) await sleep(wait);
      const s = ++seq;
      const key = `w${s % 100}`;
      const headers = JSON.stringify({ 'x-outbox-tenant': `t${s % 4}` });
      const one = writerDb
        .query(sql, [key, `{"seq":${s},"key":"${key}","pad":"${PAD}"}`, headers])
        .then(
          () => inserts.push({ scheduledAt: at, tookMs: nowMs() - at }),
          (error: unknown) =>
            inserts.push({
              scheduledAt: at,
              tookMs: nowMs() - at,
              error: error instanceof Error ? error.message : String(error),
            }),
        )
        .then(() => undefined);
      pending.add(one);
      void one.finally(() => pending.delete(one));
    }
  })();
  let from = 0;
  let to = 0;
  try {
    await sleep(MARGIN_MS);
    from = nowMs();
    await work();
    to = nowMs();
    await sleep(MARGIN_MS);
  } finally {
    stop = true;
    await writer;
    await Promise.all(pending);
  }
  const within = inserts.filter((i) => i.scheduledAt >= from && i.scheduledAt <= to);
  const took = within.map((i) => i.tookMs).sort((a, b) => a - b);
  return {
    window: {
      ms: to - from,
      inserts: within.length,
      maxMs: took.length === 0 ? Number.NaN : (took[took.length - 1] as number),
      p99Ms: percentile(took, 99),
      p50Ms: percentile(took, 50),
      failed: within.filter((i) => i.error !== undefined).length,
      overSecond: took.filter((ms) => ms > 1000).length,
      firstError: within.find((i) => i.error !== undefined)?.error,
      stallMs: longestStall(inserts, from, to),
    },
  };
}

/** The longest time between `from` and `to` in which no insert committed. */
function longestStall(inserts: readonly Insert[], from: number, to: number): number {
  const commits = inserts
    .filter((i) => i.error === undefined)
    .map((i) => i.scheduledAt + i.tookMs)
    .filter((at) => at > from && at < to)
    .sort((a, b) => a - b);
  let last = from;
  let longest = 0;
  for (const at of [...commits, to]) {
    longest = Math.max(longest, at - last);
    last = at;
  }
  return longest;
}
