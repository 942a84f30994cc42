/**
 * P9 (issue 8): claim with a blocked backlog. One key ('stuck') has a dead head under
 * `ordering.onDeadLetter: 'block'` and 100 000 messages queued behind it; the other keys get a
 * steady supply (200 new messages before every claim, over a pool of 600 due ones). Times every
 * `store.claim` of 200 other-key rows, driven by `OutboxDispatcher.runOnce` with an instant
 * counting publisher, on that table and on a control table without the backlog (same dead head,
 * same other-key messages), alternating between the two so both see the same machine noise.
 *
 * The first batch after the backlog appears claims a window of followers only, and the
 * dispatcher parks them ('waiting'): that one-off is reported on its own. Afterwards the claims
 * must not see the backlog (target: claim p50 with it ≤ 1.5 × without).
 *
 * Checked: every other-key message is published exactly once; the blocked rows stay 'waiting'
 * and unpublished; the dead head stays dead and is not handed to the publisher again. On
 * PostgreSQL, MariaDB and SQLite (BENCH_P9_DATABASES picks some).
 *
 * Two variants of the table statistics (BENCH_P9_STATS=fresh,skewed picks some): 'fresh'
 * analyses the tables once the other keys' pool is in; 'skewed' (issue 13) analyses them right
 * after the backlog is loaded, while 'stuck' is nearly the whole table (what autovacuum does
 * during an import), and keeps those statistics for the run (automatic re-analysis off on the
 * two tables), so every claim is planned as if any key matched most of the table.
 */
import type { DataSource } from 'typeorm';
import {
  PermanentPublishError,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { type OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { named } from '../support/config';
import {
  analyse,
  closeDataSource,
  countByStatus,
  dialectOf,
  dropOutboxTable,
  ensureMariaDatabase,
  openMaria,
  openSqlite,
  PAD,
  pendingCount,
  quoteTable,
  resetOutboxTable,
  seedOutbox,
  type Dialect,
} from '../support/databases';
import { startOutboxApp, type OutboxApp } from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { percentile, ratio, round } from '../support/stats';

const BLOCKED = named('bench_p9_blocked');
const CONTROL = named('bench_p9_control');
const STUCK = 'stuck';

/** When the tables are analysed: see the file comment. */
type StatsVariant = 'fresh' | 'skewed';
const STATS_VARIANTS = (process.env.BENCH_P9_STATS ?? 'fresh,skewed')
  .split(',')
  .map((s) => s.trim())
  .filter((s): s is StatsVariant => s === 'fresh' || s === 'skewed');
const BATCH = 200;

/**
 * Publishes instantly, counting every acknowledged message id; fails the 'stuck' key
 * permanently (its head goes dead, and blocks the key).
 */
class CountingPublisher implements OutboxPublisher {
  readonly published = new Map<string, number>();
  stuckPublished = 0;
  stuckAttempts = 0;

  publish(messages: readonly OutboxRecord[]): Promise<readonly PublishOutcome[]> {
    return Promise.resolve(
      messages.map((m): PublishOutcome => {
        if (m.key === STUCK) {
          this.stuckAttempts++;
          return { ok: false, error: new PermanentPublishError('bench: the stuck key is dead') };
        }
        this.published.set(m.messageId, (this.published.get(m.messageId) ?? 0) + 1);
        return { ok: true };
      }),
    );
  }
}

/** Times of the store's claim, park and settle calls, and what claim and park returned. */
interface StoreTimes {
  claimMs: number[];
  claimed: number[];
  parkMs: number[];
  parked: number[];
  settleMs: number[];
}

function timeStore(store: OutboxStore): StoreTimes {
  const times: StoreTimes = { claimMs: [], claimed: [], parkMs: [], parked: [], settleMs: [] };
  const claim = store.claim.bind(store);
  const park = store.park.bind(store);
  const settle = store.settle.bind(store);
  store.claim = async (o) => {
    const t = performance.now();
    const batch = await claim(o);
    times.claimMs.push(performance.now() - t);
    times.claimed.push(batch.records.length);
    return batch;
  };
  store.park = async (keys) => {
    const t = performance.now();
    const n = await park(keys);
    times.parkMs.push(performance.now() - t);
    times.parked.push(n);
    return n;
  };
  store.settle = async (token, settlement, deleteDelivered) => {
    const t = performance.now();
    const n = await settle(token, settlement, deleteDelivered);
    times.settleMs.push(performance.now() - t);
    return n;
  };
  return times;
}

const clear = (t: StoreTimes): void => {
  for (const list of Object.values(t) as number[][]) list.length = 0;
};

/** `count` pending messages of the key 'stuck' (1 KiB JSON, seq from `from`), in bulk. */
async function seedStuck(
  ds: DataSource,
  table: string,
  count: number,
  from: number,
): Promise<void> {
  const t = quoteTable(ds, table);
  const to = from + count - 1;
  switch (dialectOf(ds)) {
    case 'postgres':
      await ds.query(
        `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers)
SELECT gen_random_uuid(), 'bench', $1::text, 'order.created', ('{"seq":' || g || ',"key":"' || $1::text || '","pad":"' || $2::text || '"}')::json, '{}'
FROM generate_series($3::int, $4::int) AS g ORDER BY g`,
        [STUCK, PAD, from, to],
      );
      break;
    case 'mariadb':
      for (let start = from; start <= to; start += 50_000) {
        const end = Math.min(to, start + 49_999);
        await ds.query(
          `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers)
SELECT UNHEX(REPLACE(UUID(), '-', '')), 'bench', ?, 'order.created', CONCAT('{"seq":', seq, ',"key":"', ?, '","pad":"', ?, '"}'), '{}'
FROM seq_${start}_to_${end} ORDER BY seq`,
          [STUCK, STUCK, PAD],
        );
      }
      break;
    case 'sqlite':
      await ds.query(
        `WITH RECURSIVE g(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM g WHERE x < ?)
INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers)
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(2)) || '-' || hex(randomblob(6))),
  'bench', ?, 'order.created', '{"seq":' || x || ',"key":"' || ? || '","pad":"' || ? || '"}', '{}'
FROM g`,
        [from, to, STUCK, STUCK, PAD],
      );
      break;
  }
}

interface TableRun {
  table: string;
  app: OutboxApp;
  publisher: CountingPublisher;
  times: StoreTimes;
  /** Other-key messages written so far (seq 1…others). */
  others: number;
}

interface DialectRuns {
  /** Per run: p50 / p99 of the steady claims, with the backlog and without. */
  p50Blocked: number[];
  p99Blocked: number[];
  p50Control: number[];
  p99Control: number[];
  /** Per run: p50 with ÷ p50 without. */
  p50Ratio: number[];
  /** Per run: settle p50 with the backlog and without (the promotion of advanced keys). */
  settleBlocked: number[];
  settleControl: number[];
  /** Per run, the one-off: the first claim (window of followers), the park, the whole first batch. */
  firstClaimMs: number[];
  parkMs: number[];
  firstBatchMs: number[];
  parked: number[];
  /** Steady claims measured per run (fewer than asked when the time budget ran out). */
  claimsDone: number[];
  /** Parks during the steady claims (should be none), and claims that got fewer than 200 rows. */
  steadyParks: number;
  shortClaims: number;
  /** Correctness over all runs. */
  duplicates: number;
  missing: number;
  stuckPublished: number;
  notWaiting: number;
  errors: string[];
}

const newRuns = (): DialectRuns => ({
  p50Blocked: [],
  p99Blocked: [],
  p50Control: [],
  p99Control: [],
  p50Ratio: [],
  settleBlocked: [],
  settleControl: [],
  firstClaimMs: [],
  parkMs: [],
  firstBatchMs: [],
  parked: [],
  claimsDone: [],
  steadyParks: 0,
  shortClaims: 0,
  duplicates: 0,
  missing: 0,
  stuckPublished: 0,
  notWaiting: 0,
  errors: [],
});

/** Keeps the statistics an explicit ANALYZE took: no automatic re-analysis of the table. */
async function freezeStatistics(ds: DataSource, table: string): Promise<void> {
  const t = quoteTable(ds, table);
  switch (dialectOf(ds)) {
    case 'postgres':
      await ds.query(`ALTER TABLE ${t} SET (autovacuum_enabled = false)`);
      break;
    case 'mariadb':
      await ds.query(`ALTER TABLE ${t} STATS_AUTO_RECALC = 0`);
      break;
    case 'sqlite':
      // SQLite only analyses when asked to.
      break;
  }
}

async function startTable(ds: DataSource, table: string, stats: StatsVariant): Promise<TableRun> {
  await resetOutboxTable(ds, table);
  if (stats === 'skewed') await freezeStatistics(ds, table);
  const publisher = new CountingPublisher();
  const app = await startOutboxApp({
    dataSource: ds,
    tableName: table,
    publisher,
    autoStart: false,
    instanceId: `bench-${table}`,
    ordering: { enabled: true, onDeadLetter: 'block' },
    // Long database timeouts: a slow claim is measured, not abandoned by the watchdog.
    dispatcher: {
      batchSize: BATCH,
      listen: false,
      leaseMs: 900_000,
      publishTimeoutMs: 10_000,
      dbTimeoutMs: 600_000,
    },
  });
  return { table, app, publisher, times: timeStore(app.store), others: 0 };
}

/** The steady supply: `count` more other-key messages (keys k0…k999). */
async function supply(ds: DataSource, t: TableRun, count: number): Promise<void> {
  await seedOutbox(ds, t.table, count, { from: t.others + 1 });
  t.others += count;
}

async function runOnce(t: TableRun): Promise<{ ms: number; claimed: number }> {
  const dispatcher = t.app.dispatcher;
  if (dispatcher === undefined) throw new Error('no dispatcher');
  const start = performance.now();
  const report = await dispatcher.runOnce();
  return { ms: performance.now() - start, claimed: report.claimed };
}

const sortedP = (values: readonly number[], p: number): number =>
  percentile(
    [...values].sort((a, b) => a - b),
    p,
  );

/**
 * One run on one dialect: fresh tables, the dead head, the backlog, a pool of other-key
 * messages, then claims alternating between the tables with 200 more other-key messages
 * written to each before every pair (the steady supply).
 */
async function oneRun(
  ds: DataSource,
  dialect: Dialect,
  sizes: { blocked: number; claims: number; pool: number; budgetMs: number },
  stats: StatsVariant,
  out: DialectRuns,
  log: (line: string) => void,
  run: number,
): Promise<boolean> {
  const { blocked, claims, pool, budgetMs } = sizes;
  const tables: TableRun[] = [];
  try {
    const withBacklog = await startTable(ds, BLOCKED, stats);
    tables.push(withBacklog);
    const control = await startTable(ds, CONTROL, stats);
    tables.push(control);

    // The head of 'stuck' goes dead (permanent failure) on both tables.
    for (const t of tables) {
      await seedStuck(ds, t.table, 1, 0);
      await runOnce(t);
      const status = await countByStatus(ds, t.table);
      if (status.dead !== 1)
        throw new Error(`${t.table}: the stuck head did not go dead (${JSON.stringify(status)})`);
    }
    // Then the backlog behind it (only on one table), and the other keys' pool after it.
    const seedStart = performance.now();
    await seedStuck(ds, BLOCKED, blocked, 1);
    const seededMs = performance.now() - seedStart;
    if (stats === 'skewed') for (const t of tables) await analyse(ds, t.table);
    for (const t of tables) {
      await supply(ds, t, pool);
      if (stats === 'fresh') await analyse(ds, t.table);
      clear(t.times);
    }

    // The one-off: the first batch on the backlog table parks the followers.
    const firstBatch = await runOnce(withBacklog);
    const first = withBacklog.times;
    out.firstBatchMs.push(firstBatch.ms);
    out.firstClaimMs.push(first.claimMs[0] ?? Number.NaN);
    out.parkMs.push(first.parkMs.reduce((a, b) => a + b, 0));
    out.parked.push(first.parked.reduce((a, b) => a + b, 0));
    await runOnce(control);
    log(
      `P9 ${dialect} ${stats} run ${run}: ${blocked} blocked rows seeded in ${(seededMs / 1000).toFixed(1)} s; first batch ${firstBatch.ms.toFixed(0)} ms: claims ${first.claimMs.map((m) => m.toFixed(1)).join(' + ')} ms, park of ${first.parked.join(' + ')} rows ${first.parkMs.map((m) => m.toFixed(0)).join(' + ')} ms, settle ${first.settleMs.map((m) => m.toFixed(1)).join(' + ')} ms`,
    );
    for (const t of tables) clear(t.times);

    // Steady state: 200 more other-key messages per table, then one batch on each.
    const steadyStart = performance.now();
    let done = 0;
    while (done < claims && (done === 0 || performance.now() - steadyStart < budgetMs)) {
      for (const t of tables) await supply(ds, t, BATCH);
      await runOnce(withBacklog);
      await runOnce(control);
      done++;
    }
    const overBudget = done < claims;
    if (overBudget)
      log(
        `P9 ${dialect} ${stats} run ${run}: time budget (${budgetMs / 1000} s) spent after ${done} of ${claims} claims`,
      );
    out.claimsDone.push(done);
    for (const t of tables) {
      out.steadyParks += t.times.parkMs.length;
      out.shortClaims += t.times.claimed.filter((n) => n !== BATCH).length;
    }
    const b50 = sortedP(withBacklog.times.claimMs, 50);
    const c50 = sortedP(control.times.claimMs, 50);
    out.p50Blocked.push(b50);
    out.p99Blocked.push(sortedP(withBacklog.times.claimMs, 99));
    out.p50Control.push(c50);
    out.p99Control.push(sortedP(control.times.claimMs, 99));
    out.p50Ratio.push(ratio(b50, c50));
    out.settleBlocked.push(sortedP(withBacklog.times.settleMs, 50));
    out.settleControl.push(sortedP(control.times.settleMs, 50));
    log(
      `P9 ${dialect} ${stats} run ${run}: claim p50 ${b50.toFixed(2)} ms with ${blocked} blocked rows vs ${c50.toFixed(2)} ms without (p99 ${out.p99Blocked.at(-1)?.toFixed(2)} vs ${out.p99Control.at(-1)?.toFixed(2)}; settle p50 ${out.settleBlocked.at(-1)?.toFixed(1)} vs ${out.settleControl.at(-1)?.toFixed(1)} ms), ${withBacklog.times.claimMs.length} + ${control.times.claimMs.length} claims`,
    );

    // Whatever the budget left pending is drained, then: every other-key message exactly once,
    // the backlog untouched and waiting, the dead head dead.
    for (const t of tables) {
      for (let i = 0; i < 1_000 && (await pendingCount(ds, t.table)) > 0; i++) await runOnce(t);
      const published = t.publisher.published;
      out.missing += t.others - published.size;
      for (const n of published.values()) if (n > 1) out.duplicates += n - 1;
      out.stuckPublished += t.publisher.stuckPublished;
      const status = await countByStatus(ds, t.table);
      const expected: Record<string, number> = {
        delivered: t.others,
        dead: 1,
        ...(t === withBacklog ? { waiting: blocked } : {}),
      };
      const wrong = Object.keys({ ...status, ...expected }).filter(
        (k) => (status[k] ?? 0) !== (expected[k] ?? 0),
      );
      if (wrong.length > 0)
        out.errors.push(
          `${dialect} run ${run} ${t === withBacklog ? 'backlog' : 'control'} table: statuses ${JSON.stringify(status)}, expected ${JSON.stringify(expected)}`,
        );
      if (t === withBacklog) out.notWaiting += blocked - (status.waiting ?? 0);
      // The dead head was handed to the publisher once (when it went dead), never again.
      if (t.publisher.stuckAttempts !== 1)
        out.errors.push(
          `${dialect} run ${run}: the stuck key was handed to the publisher ${t.publisher.stuckAttempts} times`,
        );
    }
    return overBudget;
  } finally {
    for (const t of tables) {
      await t.app.close();
      await dropOutboxTable(ds, t.table).catch(() => undefined);
    }
  }
}

export async function p9(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg } = ctx;
  const blocked = profile.p9Blocked;
  const claims = profile.p9Claims;
  const result = newResult(
    'P9',
    `Claim with a blocked backlog: ${claims} claims of ${BATCH} other-key rows behind ${blocked.toLocaleString('en-US')} rows of a dead-headed key ('block') vs none`,
  );
  const dialects: { dialect: Dialect; open: () => Promise<DataSource>; close: boolean }[] = [
    { dialect: 'postgres', open: () => Promise.resolve(pg), close: false },
    {
      dialect: 'mariadb',
      open: async () => {
        await ensureMariaDatabase();
        return openMaria();
      },
      close: true,
    },
    { dialect: 'sqlite', open: openSqlite, close: true },
  ];
  for (const { dialect, open, close } of dialects) {
    if (!profile.p9Dialects.includes(dialect)) continue;
    for (const stats of STATS_VARIANTS) {
      const out = newRuns();
      let ds: DataSource | undefined;
      try {
        ds = await open();
        for (let run = 1; run <= ctx.runs; run++) {
          const overBudget = await oneRun(
            ds,
            dialect,
            { blocked, claims, pool: profile.p9Pool, budgetMs: profile.p9BudgetS * 1_000 },
            stats,
            out,
            ctx.log,
            run,
          );
          if (overBudget && run < ctx.runs) {
            result.notes.push(
              `${dialect} ${stats}: run ${run} spent its ${profile.p9BudgetS} s budget before ${claims} claims; no further runs`,
            );
            break;
          }
        }
      } catch (error) {
        ctx.log(
          `P9 ${dialect} ${stats} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
        );
        result.skipped.push(
          `${dialect} ${stats}: ${error instanceof Error ? error.message : String(error)}`,
        );
      } finally {
        if (close && ds !== undefined) await closeDataSource(ds);
      }
      if (out.p50Blocked.length === 0) continue;
      report(result, dialect, stats, out, blocked);
    }
  }
  result.notes.push(
    `claim = one store.claim call (the claim statement/transaction) of ${BATCH} rows; p50/p99 over the steady claims of each run, medians over runs. The one-off is the first batch after the backlog appears: a claim whose window holds only followers, the park of the backlog, then a normal claim.`,
  );
  return result;
}

function report(
  result: ScenarioResult,
  dialect: Dialect,
  stats: StatsVariant,
  out: DialectRuns,
  blocked: number,
): void {
  // The fresh-statistics keys keep their earlier names, so older results stay comparable.
  const d = `${dialect === 'postgres' ? 'pg' : dialect}${stats === 'skewed' ? '_skewed' : ''}`;
  const db = `${dialect === 'postgres' ? 'PostgreSQL' : dialect === 'mariadb' ? 'MariaDB' : 'SQLite'}${stats === 'skewed' ? ' (skewed statistics)' : ''}`;
  const rows = `${Math.round(blocked / 1_000)}k`;
  const metric = (key: string, label: string, values: number[], unit = 'ms') =>
    addMetric(result, `${d}_${key}`, `${db}: ${label}`, unit, values);
  const b50 = metric('claim_p50_ms_blocked', `claim p50, ${rows} blocked rows`, out.p50Blocked);
  const c50 = metric('claim_p50_ms_control', 'claim p50, no backlog', out.p50Control);
  const b99 = metric('claim_p99_ms_blocked', `claim p99, ${rows} blocked rows`, out.p99Blocked);
  const c99 = metric('claim_p99_ms_control', 'claim p99, no backlog', out.p99Control);
  metric('settle_p50_ms_blocked', `settle p50, ${rows} blocked rows`, out.settleBlocked);
  metric('settle_p50_ms_control', 'settle p50, no backlog', out.settleControl);
  metric('first_claim_ms', 'one-off: first claim (followers)', out.firstClaimMs);
  const park = metric('park_ms', `one-off: park of the ${rows} rows`, out.parkMs);
  metric('first_batch_ms', 'one-off: whole first batch', out.firstBatchMs);
  const perRun = metric('p50_ratio', 'claim p50 with ÷ without, per run', out.p50Ratio, '×');
  metric('claims', 'steady claims measured per table', out.claimsDone, 'claims');
  addTarget(
    result,
    `p9_${d}_claim_blocked_vs_control`,
    `${db}: claim p50 with ${rows} blocked ÷ without`,
    ratio(b50.median, c50.median),
    '<=',
    1.5,
  );
  result.values[`p9_${d}_claim_p50_ms_blocked`] = round(b50.median, 2);
  result.values[`p9_${d}_claim_p50_ms_control`] = round(c50.median, 2);
  result.values[`p9_${d}_claim_p99_ms_blocked`] = round(b99.median, 2);
  result.values[`p9_${d}_claim_p99_ms_control`] = round(c99.median, 2);
  result.values[`p9_${d}_p50_ratio_median_of_runs`] = round(perRun.median, 3);
  result.values[`p9_${d}_park_ms`] = round(park.median, 1);
  result.values[`p9_${d}_parked_rows`] = out.parked.join(',');
  result.values[`p9_${d}_steady_parks`] = out.steadyParks;
  result.values[`p9_${d}_short_claims`] = out.shortClaims;
  result.values[`p9_${d}_duplicates`] = out.duplicates;
  result.values[`p9_${d}_missing`] = out.missing;
  result.values[`p9_${d}_stuck_published`] = out.stuckPublished;
  result.values[`p9_${d}_blocked_not_waiting`] = out.notWaiting;
  addTarget(
    result,
    `p9_${d}_correct`,
    `${db}: others once each, backlog waiting (errors)`,
    out.duplicates + out.missing + out.stuckPublished + out.notWaiting + out.errors.length,
    '==',
    0,
  );
  for (const e of out.errors) result.notes.push(e);
}
