/**
 * P22: tenant-fair claiming (docs/tenants.md). Tenant A has a backlog of `BENCH_P22_BACKLOG`
 * (200 000) pending messages (1 000 keys, 1 KiB JSON) when tenant B enqueues one message; the
 * latency of B's message, from its commit to RabbitMQ's confirm (`RabbitMqPublisher`, confirms
 * on), is measured three ways, each on a fresh PostgreSQL table with a running dispatcher (its
 * own loop, LISTEN on, batches of 500, two in flight):
 * - `alone`: B's message on an empty table (the floor);
 * - `fair`: behind A's backlog, with `tenants: { fair: true }`;
 * - `unfair`: behind A's backlog, tenant ids on but `fair` off (the control).
 * B's message is committed once the dispatcher has published its first batch of the backlog, so
 * it lands behind work in flight, not before the first claim. Target: fair ≤ 2 × alone.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';
import { OUTBOX_HEADER_TENANT } from '../../lib';
import { named } from '../support/config';
import { dropOutboxTable, PAD, quoteTable, resetOutboxTable } from '../support/databases';
import {
  connectPublisher,
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
import { ratio } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p22');
const QUEUE = named('bench.p22', '.');
const BACKLOG = Number(process.env.BENCH_P22_BACKLOG ?? 200_000);
const ALL_MODES = ['alone', 'fair', 'unfair'] as const;
type Mode = (typeof ALL_MODES)[number];
/** BENCH_P22_MODES=alone,fair skips the control, whose drain of the backlog is most of the run. */
const MODES = (process.env.BENCH_P22_MODES ?? ALL_MODES.join(','))
  .split(',')
  .map((m) => m.trim())
  .filter((m): m is Mode => (ALL_MODES as readonly string[]).includes(m));

/** Passes batches to RabbitMQ and notes when the message it waits for was confirmed. */
class WatchingPublisher implements OutboxPublisher {
  private waited: { id: string; done: (at: number) => void } | undefined;
  published = 0;

  constructor(private readonly inner: OutboxPublisher) {}

  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes = await this.inner.publish(messages, signal);
    this.published += outcomes.filter((o) => o.ok).length;
    const waited = this.waited;
    if (waited !== undefined) {
      const at = messages.findIndex((m) => m.messageId === waited.id);
      if (at >= 0 && outcomes[at]?.ok === true) waited.done(performance.now());
    }
    return outcomes;
  }

  /** Resolves to the time message `id` is confirmed; call before it is enqueued. */
  waitFor(id: string): Promise<number> {
    return new Promise((resolve) => (this.waited = { id, done: resolve }));
  }

  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }
}

/** Tenant A's backlog, written in SQL with the tenant header the service would write. */
async function seedBacklog(ds: DataSource, count: number): Promise<void> {
  const t = quoteTable(ds, TABLE);
  for (let start = 1; start <= count; start += 100_000) {
    const end = Math.min(count, start + 99_999);
    await ds.query(
      `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers)
SELECT gen_random_uuid(), 'bench', 'k' || (g % 1000), 'order.created', ('{"seq":' || g || ',"pad":"' || $1 || '"}')::json, $2::json
FROM generate_series($3::int, $4::int) AS g ORDER BY g`,
      [PAD, JSON.stringify({ [OUTBOX_HEADER_TENANT]: 'A' }), start, end],
    );
  }
  await ds.query(`ANALYZE ${t}`);
}

/** One measurement: B's commit → confirm latency in `mode`, in ms. */
async function once(ctx: BenchContext, mode: Mode): Promise<number> {
  const ds = ctx.pg;
  await resetOutboxTable(ds, TABLE);
  await purgeQueue(ctx.rabbit, QUEUE);
  if (mode !== 'alone') await seedBacklog(ds, BACKLOG);
  const publisher = new WatchingPublisher(rabbitPublisher(QUEUE));
  await connectPublisher(publisher);
  let app: OutboxApp | undefined;
  try {
    app = await startOutboxApp({
      dataSource: ds,
      tableName: TABLE,
      publisher,
      instanceId: `bench-p22-${mode}`,
      tenants: { fair: mode === 'fair' },
    });
    // Behind work in flight: the backlog's first batch is out before B commits.
    const started = performance.now();
    while (mode !== 'alone' && publisher.published === 0) {
      if (performance.now() - started > 60_000) throw new Error('the backlog never started');
      await sleep(1);
    }
    const outbox = app.outbox;
    const messageId = randomUUID();
    const confirmed = publisher.waitFor(messageId);
    await ds.transaction((m) =>
      outbox.enqueue(
        { topic: 'bench', key: 'b', payload: { seq: 0, pad: PAD }, tenant: 'B', messageId },
        m,
      ),
    );
    const committed = performance.now();
    return (await confirmed) - committed;
  } finally {
    await app?.close();
  }
}

export async function p22(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P22',
    `Tenant B's one message behind tenant A's ${BACKLOG.toLocaleString('en-US')}-message backlog (PostgreSQL → RabbitMQ)`,
  );
  await resetQueue(ctx.rabbit, QUEUE, 10_000);
  const runs: Record<Mode, number[]> = { alone: [], fair: [], unfair: [] };
  try {
    for (let run = 0; run < ctx.runs; run++) {
      // Rotated, so each mode sees the machine's noise alike.
      for (const mode of MODES) {
        const ms = await once(ctx, mode);
        runs[mode].push(ms);
        ctx.log(`P22 run ${run + 1} ${mode}: ${ms.toFixed(1)} ms`);
      }
    }
  } finally {
    await dropOutboxTable(ctx.pg, TABLE);
    await (await ctx.rabbit.ch()).deleteQueue(QUEUE);
  }
  const alone = addMetric(result, 'alone', "B's message alone: commit → confirm", 'ms', runs.alone);
  const fair = addMetric(result, 'fair', 'behind the backlog, tenants.fair', 'ms', runs.fair);
  const unfair = addMetric(result, 'unfair', 'behind the backlog, fair off', 'ms', runs.unfair);
  result.values.p22_backlog = BACKLOG;
  result.values.p22_unfair_vs_alone = ratio(unfair.median, alone.median);
  addTarget(
    result,
    'p22_fair_vs_alone',
    'fair latency ÷ alone (medians)',
    ratio(fair.median, alone.median),
    '<=',
    2,
  );
  return result;
}
