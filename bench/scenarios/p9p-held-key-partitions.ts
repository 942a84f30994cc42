/**
 * P9P: a held key's backlog in `dispatcher: { claims: 'partitions' }` mode (issue 75, item 3).
 * On each of two fresh PostgreSQL tables, one key (`k0`) has a dead head under ordering
 * `'block'` (the default): its first message is enqueued and the running dispatcher dead-letters
 * it (the publisher refuses that key with `PermanentPublishError`). On the backlog table
 * `BENCH_P9P_BACKLOG` (100 000) more messages of that key are then written behind it (higher
 * ids, in SQL), and both tables are analysed, so that the statistics see one key where the
 * backlog is; the control table has the same dead head and no backlog. Then, in windows that
 * alternate between the tables (a fresh app per window, so that one table's dispatcher does not
 * load the other's), one writer commits other keys' messages at 100 msgs/s, one per transaction
 * (a key each), and each message's commit → RabbitMQ confirm latency is taken (the first second
 * of a window not counted). Target: p99 behind the backlog ≤ 1.5 × the control's. Before the
 * windows an owner runs on the backlog table until it has parked the held key's rows. Two
 * phases: with the statistics of the bulk insert (every held row counted pending; the bench's
 * server runs without autovacuum), then after VACUUM ANALYZE of both tables.
 *
 * Checked at the end (recorded as targets, not a test): every other-key message confirmed once,
 * and no message of the held key delivered. The read's statement, with its `prev_id` probe, is
 * printed under EXPLAIN ANALYZE on the backlog table (it reads, never writes), as the store runs
 * it and under the planner settings of the store's dispatch transactions, with the probe alone
 * for the newest other-key row.
 */
import type { DataSource } from 'typeorm';
import {
  PermanentPublishError,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import { blockingCondition } from '../../lib/store/shared-sql/dead-blocking';
import { POSTGRES_CLAIMED_COLUMNS } from '../../lib/store/postgres/postgres.sql';
import { postgresReadOwned } from '../../lib/store/postgres/postgres.delivery-partitions-sql';
import { named } from '../support/config';
import {
  analyse,
  dropOutboxTable,
  quoteTable,
  resetOutboxTable,
  seedOutbox,
} from '../support/databases';
import { runWriters } from '../support/log-writers';
import {
  connectPublisher,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from '../support/outbox-app';
import { purgeQueue, queueDepth, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, percentile, ratio, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const BACKLOG_TABLE = named('bench_p9p_backlog');
const CONTROL_TABLE = named('bench_p9p_control');
const QUEUE = named('bench.p9p', '.');
/** The held key: `seedOutbox(…, { keys: 1 })` writes every row with it. */
const HELD_KEY = 'k0';
const BACKLOG = Number(process.env.BENCH_P9P_BACKLOG ?? 100_000);
const RATE = 100;
/** Each window's first second is the dispatcher settling in: not counted. */
const SETTLE_MS = 1_000;
/** The issue's bound: the backlog may cost the other keys' p99 at most half again. */
const TARGET = 1.5;
/**
 * `stale`: the planner's statistics as of the bulk insert (the held rows counted pending: the
 * bench's server runs without autovacuum, and a busy one may not have passed yet); `analysed`:
 * after VACUUM ANALYZE of both tables, once the backlog is parked.
 */
const PHASES = ['stale', 'analysed'] as const;

/** Refuses the held key for good (it is dead-lettered) and stamps every other key's confirm. */
class RefusingPublisher implements OutboxPublisher {
  /** Confirmations per message id, with the time of the first. */
  readonly confirmed = new Map<string, { at: number; count: number }>();
  heldOffered = 0;

  constructor(private readonly inner: OutboxPublisher) {}

  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const others = messages.filter((m) => m.key !== HELD_KEY);
    const answers = others.length > 0 ? await this.inner.publish(others, signal) : [];
    const at = nowMs();
    let next = 0;
    return messages.map((m): PublishOutcome => {
      if (m.key === HELD_KEY) {
        this.heldOffered++;
        return { ok: false, error: new PermanentPublishError('bench: the held key is refused') };
      }
      const outcome = answers[next++] ?? { ok: false, error: new Error('no answer') };
      if (outcome.ok) {
        const seen = this.confirmed.get(m.messageId);
        if (seen === undefined) this.confirmed.set(m.messageId, { at, count: 1 });
        else seen.count++;
      }
      return outcome;
    });
  }

  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }
}

interface Window {
  p50: number;
  p99: number;
  committed: number;
  /** Committed messages never confirmed, and those confirmed more than once. */
  missing: number;
  copies: number;
}

export async function p9p(ctx: BenchContext): Promise<ScenarioResult> {
  const { pg, profile } = ctx;
  const windowMs = Number(
    process.env.BENCH_P9P_WINDOW_MS ?? (profile.name === 'full' ? 30_000 : 10_000),
  );
  const result = newResult(
    'P9P',
    `A held key's backlog in 'partitions' mode: other keys' commit → confirm latency at ${RATE} msgs/s behind one dead head with ${BACKLOG.toLocaleString('en-US')} messages queued, vs the same dead head alone (PostgreSQL → RabbitMQ, ${windowMs / 1000} s windows alternating, ${ctx.runs} run(s))`,
  );
  await resetQueue(ctx.rabbit, QUEUE);
  const latencies = {
    stale: { backlog: [] as Window[], control: [] as Window[] },
    analysed: { backlog: [] as Window[], control: [] as Window[] },
  };
  let missing = 0;
  let copies = 0;
  let heldDelivered = 0;
  try {
    for (const table of [BACKLOG_TABLE, CONTROL_TABLE]) {
      await resetOutboxTable(pg, table);
      await deadHead(ctx, table);
    }
    const seededAt = nowMs();
    await seedOutbox(pg, BACKLOG_TABLE, BACKLOG, { from: 2, keys: 1 });
    ctx.log(
      `P9P: ${BACKLOG} messages of ${HELD_KEY} written behind its dead head in ${Math.round(nowMs() - seededAt)} ms`,
    );
    // Statistics as they stand after the bulk insert: every held row counted pending, one key.
    for (const table of [BACKLOG_TABLE, CONTROL_TABLE]) await analyse(pg, table);
    const parkMs = await parkHeld(ctx, BACKLOG_TABLE);
    ctx.log(`P9P: the owner parked the held key's backlog in ${Math.round(parkMs)} ms`);
    result.values.p9p_park_ms = Math.round(parkMs);
    for (const phase of PHASES) {
      if (phase === 'analysed') {
        // What autovacuum gives once it has passed (it is off on the bench's server).
        for (const table of [BACKLOG_TABLE, CONTROL_TABLE]) await analyse(pg, table);
      }
      for (const line of await explainRead(pg, BACKLOG_TABLE))
        ctx.log(`P9P plan (${phase}): ${line}`);
      for (let run = 1; run <= ctx.runs; run++) {
        // Alternate which goes first, so that a drift of the machine's load spreads over both.
        const order =
          run % 2 === 1 ? (['backlog', 'control'] as const) : (['control', 'backlog'] as const);
        for (const which of order) {
          const table = which === 'backlog' ? BACKLOG_TABLE : CONTROL_TABLE;
          const w = await window(ctx, table, windowMs);
          latencies[phase][which].push(w);
          missing += w.missing;
          copies += w.copies;
          ctx.log(
            `P9P ${phase}, run ${run}, ${which}: p50 ${w.p50.toFixed(1)} ms, p99 ${w.p99.toFixed(1)} ms (${w.committed} committed; ${w.missing} never confirmed, ${w.copies} confirmed twice)`,
          );
        }
      }
    }
    for (const table of [BACKLOG_TABLE, CONTROL_TABLE]) {
      const statuses = await heldStatuses(pg, table);
      heldDelivered += statuses.delivered ?? 0;
      const total = Object.values(statuses).reduce((a, b) => a + b, 0);
      const expected = table === BACKLOG_TABLE ? BACKLOG + 1 : 1;
      if (total !== expected)
        result.notes.push(`${table}: ${total} rows of ${HELD_KEY}, ${expected} written`);
      result.values[`${table === BACKLOG_TABLE ? 'backlog' : 'control'}_held_statuses`] =
        JSON.stringify(statuses);
    }
  } finally {
    await dropOutboxTable(pg, BACKLOG_TABLE);
    await dropOutboxTable(pg, CONTROL_TABLE);
    await ctx.rabbit.deleteQueue(QUEUE).catch(() => undefined);
  }
  const p50 = (w: Window): number => w.p50;
  const p99 = (w: Window): number => w.p99;
  for (const phase of PHASES) {
    const prefix = phase === 'stale' ? '' : `${phase}_`;
    const when = phase === 'stale' ? 'statistics of the bulk insert' : 'after VACUUM ANALYZE';
    const of = latencies[phase];
    const backlogP50 = addMetric(
      result,
      `${prefix}backlog_p50_ms`,
      `${when}: behind the backlog, p50`,
      'ms',
      of.backlog.map(p50),
    );
    const backlogP99 = addMetric(
      result,
      `${prefix}backlog_p99_ms`,
      `${when}: behind the backlog, p99`,
      'ms',
      of.backlog.map(p99),
    );
    const controlP50 = addMetric(
      result,
      `${prefix}control_p50_ms`,
      `${when}: control (dead head alone), p50`,
      'ms',
      of.control.map(p50),
    );
    const controlP99 = addMetric(
      result,
      `${prefix}control_p99_ms`,
      `${when}: control (dead head alone), p99`,
      'ms',
      of.control.map(p99),
    );
    addTarget(
      result,
      `p9p_${prefix}p99_backlog_vs_control`,
      `${when}: other keys' p99 behind ${BACKLOG.toLocaleString('en-US')} held rows ÷ the control's`,
      ratio(backlogP99.median, controlP99.median),
      '<=',
      TARGET,
    );
    result.values[`p9p_${prefix}p50_backlog_vs_control`] = round(
      ratio(backlogP50.median, controlP50.median),
      3,
    );
  }
  result.values.p9p_backlog_rows = BACKLOG;
  addTarget(result, 'p9p_missing', 'other-key messages never confirmed', missing, '==', 0);
  addTarget(result, 'p9p_copies', 'other-key messages confirmed more than once', copies, '==', 0);
  addTarget(
    result,
    'p9p_held_delivered',
    `messages of ${HELD_KEY} delivered`,
    heldDelivered,
    '==',
    0,
  );
  return result;
}

function partitionsApp(
  ds: DataSource,
  table: string,
  publisher: OutboxPublisher,
): Promise<OutboxApp> {
  return startOutboxApp({
    dataSource: ds,
    tableName: table,
    publisher,
    instanceId: `bench-p9p-${table}`,
    autoStart: true,
    ordering: { enabled: true },
    dispatcher: { claims: 'partitions' },
  });
}

/** Runs an owner on `table` until no row of the held key is pending (each parked); its time. */
async function parkHeld(ctx: BenchContext, table: string): Promise<number> {
  const publisher = new RefusingPublisher(rabbitPublisher(QUEUE));
  await connectPublisher(publisher);
  const startedAt = nowMs();
  const app = await partitionsApp(ctx.pg, table, publisher);
  try {
    const deadline = nowMs() + 120_000;
    while ((await heldStatuses(ctx.pg, table)).pending !== undefined) {
      if (nowMs() > deadline) throw new Error(`${table}: the held key's rows were not parked`);
      await sleep(20);
    }
    return nowMs() - startedAt;
  } finally {
    await app.close();
  }
}

/** Enqueues the held key's first message and waits until the dispatcher dead-letters it. */
async function deadHead(ctx: BenchContext, table: string): Promise<void> {
  const publisher = new RefusingPublisher(rabbitPublisher(QUEUE));
  await connectPublisher(publisher);
  const app = await partitionsApp(ctx.pg, table, publisher);
  try {
    await seedOutbox(ctx.pg, table, 1, { from: 1, keys: 1 });
    const deadline = nowMs() + 60_000;
    while ((await heldStatuses(ctx.pg, table)).dead !== 1) {
      if (nowMs() > deadline)
        throw new Error(`${table}: the head of ${HELD_KEY} was not dead-lettered`);
      await sleep(20);
    }
  } finally {
    await app.close();
  }
}

/** One window: a fresh app on `table`, the writer at RATE, every committed message awaited. */
async function window(ctx: BenchContext, table: string, windowMs: number): Promise<Window> {
  const { pg } = ctx;
  await purgeQueue(ctx.rabbit, QUEUE);
  const publisher = new RefusingPublisher(rabbitPublisher(QUEUE));
  await connectPublisher(publisher);
  const app = await partitionsApp(pg, table, publisher);
  const committed = new Map<string, number>();
  try {
    // Ownership taken and the first reads made before the window starts: one message through.
    const writer = await startOutboxApp({ dataSource: pg, tableName: table, workers: false });
    try {
      const [probe] = await pg.transaction((m) =>
        writer.outbox.enqueue([{ topic: 'bench', key: 'warmup', type: 'warmup', payload: {} }], m),
      );
      const deadline = nowMs() + 30_000;
      while (probe !== undefined && !publisher.confirmed.has(probe)) {
        if (nowMs() > deadline) throw new Error(`${table}: the warm-up message was not published`);
        await sleep(5);
      }
      publisher.confirmed.clear();
      const startedAt = nowMs();
      await runWriters({
        ds: pg,
        outbox: writer.outbox,
        writers: 1,
        perTransaction: 1,
        rate: RATE,
        durationMs: windowMs,
        onCommit: (ids, at) => {
          for (const id of ids) committed.set(id, at);
        },
      });
      const deadline2 = nowMs() + 60_000;
      while ([...committed.keys()].some((id) => !publisher.confirmed.has(id))) {
        if (nowMs() > deadline2) break;
        await sleep(20);
      }
      const counted = [...committed]
        .filter(([, at]) => at >= startedAt + SETTLE_MS)
        .map(([id, at]) => (publisher.confirmed.get(id)?.at ?? Number.NaN) - at)
        .filter((ms) => Number.isFinite(ms))
        .sort((a, b) => a - b);
      const ids = [...committed.keys()];
      const depth = await queueDepth(ctx.rabbit, QUEUE);
      // The warm-up message is in the queue too.
      if (depth !== ids.length + 1)
        ctx.log(
          `P9P ${table}: the queue holds ${depth} of ${ids.length} committed (+ the warm-up)`,
        );
      return {
        p50: percentile(counted, 50),
        p99: percentile(counted, 99),
        committed: ids.length,
        missing: ids.filter((id) => !publisher.confirmed.has(id)).length,
        copies: ids.filter((id) => (publisher.confirmed.get(id)?.count ?? 0) > 1).length,
      };
    } finally {
      await writer.close();
    }
  } finally {
    await app.close();
  }
}

async function heldStatuses(ds: DataSource, table: string): Promise<Record<string, number>> {
  const rows = await ds.query<{ status: string; n: string }[]>(
    `SELECT status, count(*) AS n FROM ${quoteTable(ds, table)} WHERE message_key = $1 GROUP BY status`,
    [HELD_KEY],
  );
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

/**
 * The owner's read as the store builds it (postgres.delivery-partitions.store.ts) for an owner of
 * every partition, under EXPLAIN ANALYZE with the parameters of a sweep that skips the held key; then its `prev_id`
 * probe alone for the newest row of another key.
 */
async function explainRead(ds: DataSource, table: string): Promise<string[]> {
  const names = outboxTableNames(table, null, 'double');
  const policy = { ordered: true, deadBlocksKey: true, maxRun: 50, batchSize: 500 };
  const columns = POSTGRES_CLAIMED_COLUMNS.replace('o.attempts,', 'o.attempts + 1 AS attempts,');
  // The scenario's one owner holds every partition: the store's read then names none.
  const read = postgresReadOwned(names, blockingCondition('e', policy), columns, true);
  const params = [500, '0', [], [HELD_KEY]];
  const lines: string[] = [];
  // As the store runs it (a statement of its own), then under the planner settings of its
  // dispatch transactions (postgresOpening: sequential and bitmap scans off), which the
  // `'leases'` claims run under. The read writes nothing, so ANALYZE runs it for real.
  for (const settings of [false, true]) {
    const plan = await ds.transaction(async (m) => {
      if (settings) {
        await m.query('SET LOCAL enable_seqscan = off');
        await m.query('SET LOCAL enable_bitmapscan = off');
      }
      return m.query<{ 'QUERY PLAN': string }[]>(`EXPLAIN (ANALYZE, BUFFERS) ${read}`, params);
    });
    lines.push(
      `the read, a sweep from the start skipping ${HELD_KEY}, ${settings ? "under the dispatch transactions' planner settings" : 'as the store runs it'} (EXPLAIN ANALYZE):`,
      // The partition list (0 … 255) makes a line of a thousand characters.
      ...plan.map((r) => `  ${r['QUERY PLAN'].replace(/\{0,1,2,[0-9,]*\}/, '{0 … 255}')}`),
    );
  }
  const t = quoteTable(ds, table);
  const [newest] = await ds.query<{ id: string; message_key: string }[]>(
    `SELECT id::text AS id, message_key FROM ${t} WHERE message_key IS NOT NULL AND message_key <> $1 ORDER BY id DESC LIMIT 1`,
    [HELD_KEY],
  );
  // Before any window no other key has a row: a key that sorts beside the held one stands in.
  const key = newest?.message_key ?? 'k1';
  const id = newest?.id ?? String(BACKLOG + 10);
  const probe = await ds.query<{ 'QUERY PLAN': string }[]>(
    `EXPLAIN (ANALYZE, BUFFERS) SELECT e.id FROM ${t} AS e
WHERE e.message_key >= $1 AND e.message_key <= $1 AND e.id < $2::int8
  AND e.status <> 'delivered' AND ${blockingCondition('e', policy)}
ORDER BY e.message_key DESC, e.id DESC LIMIT 1`,
    [key, id],
  );
  lines.push(
    `the prev_id probe alone for key ${key}, id ${id} (EXPLAIN ANALYZE):`,
    ...probe.map((r) => `  ${r['QUERY PLAN']}`),
  );
  return lines;
}
