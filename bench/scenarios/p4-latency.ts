/**
 * P4: commit → broker latency under a steady load. 8 writers in this process commit 1 000
 * messages/s through an enqueue-only OutboxModule; the dispatcher runs in another process (as
 * another app instance would), woken by LISTEN/NOTIFY — or, for comparison, by polling only;
 * and, with LISTEN/NOTIFY, 5 000 messages/s: one message per transaction (`listen_high`), which
 * 8 writers cannot commit on 2 cores beside the dispatcher (about 1 600–1 950 msgs/s), and
 * `p4HighBatch` messages per transaction (`listen_high_tx`), which offers the rate.
 * A RabbitMQ consumer in this process stamps each arrival; latency = arrival − commit, both on
 * this process's clock.
 */
import * as amqp from 'amqplib';
import type { OutboxService } from '../../lib';
import { forkTs, type Child } from '../support/child';
import { SERVICES, named } from '../support/config';
import { keyOf, payloadOf, resetOutboxTable, dropOutboxTable } from '../support/databases';
import type { BareRelayChildConfig } from '../support/bare-relay-process';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import { startOutboxApp } from '../support/outbox-app';
import { purgeQueue, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, percentile, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

/**
 * `BENCH_P4_VARIANTS=listen,listen_partitions,listen_stream` runs only those (default all):
 * the modes' p99s over many interleaved windows in less time.
 */
const WANTED = process.env.BENCH_P4_VARIANTS?.split(',').map((variant) => variant.trim());
const TABLE = named('bench_p4');
const QUEUE = named('bench.p4', '.');
const WARMUP_MS = 1_000;
/** How often the bare relay looks at an empty table: the issue's reference polls every 2 ms. */
const BARE_IDLE_MS = 2;
/** The stream variant's window: the bare relay's unconfirmed publishes, as in P1. */
const STREAM_WINDOW = 1_000;

type Variant =
  | 'bare'
  | 'listen'
  | 'polling'
  | 'listen_high'
  | 'listen_high_tx'
  | 'listen_partitions'
  | 'listen_stream';

interface Window {
  latencies: number[];
  committed: number;
  achievedRate: number;
  lost: number;
  outages: number;
  /** Statements the dispatcher ran through TypeORM from its start to its stop. */
  statements: number;
  texts: Record<string, number>;
}

export async function p4(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const result = newResult(
    'P4',
    `Commit → broker latency, PostgreSQL → RabbitMQ, steady ${profile.p4Rate} and ${profile.p4HighRate} msgs/s from ${profile.p4Writers} writers (${profile.p4DurationMs / 1000} s windows)`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const writerApp = await startOutboxApp({ dataSource: pg, tableName: TABLE, workers: false });
  const stats: Record<
    Variant,
    {
      p50: number[];
      p90: number[];
      p99: number[];
      max: number[];
      rate: number[];
      statements: number[];
      lost: number;
    }
  > = {
    bare: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    listen: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    polling: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    listen_high: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    listen_high_tx: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    listen_partitions: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
    listen_stream: { p50: [], p90: [], p99: [], max: [], rate: [], statements: [], lost: 0 },
  };
  const rateOf = (variant: Variant): number =>
    variant === 'listen_high' || variant === 'listen_high_tx' ? profile.p4HighRate : profile.p4Rate;
  const perTransaction = (variant: Variant): number =>
    variant === 'listen_high_tx' ? profile.p4HighBatch : 1;
  try {
    // One dispatcher process per variant, each started for its own windows only (never two
    // dispatching at once). The windows interleave the variants, run by run: the machine's
    // drift over a run falls on every variant alike, and no variant's windows all come first
    // after a start. The last two: `'partitions'` batch by batch and publishing as a stream,
    // with LISTEN, at the steady rate.
    const variants = (
      [
        'bare',
        'listen',
        'polling',
        'listen_high',
        'listen_high_tx',
        'listen_partitions',
        'listen_stream',
      ] as const
    ).filter((variant) => WANTED === undefined || WANTED.includes(variant));
    const children = new Map<Variant, Child>();
    try {
      for (const variant of variants) {
        // The issue's reference: the bare pipelined relay, looking every 2 ms while the table
        // is empty (bench/baselines/bare-relay.ts), keeping none of the module's promises.
        const child =
          variant === 'bare'
            ? forkTs('../support/bare-relay-process.ts', {
                database: 'postgres',
                table: TABLE,
                queue: QUEUE,
                idleMs: BARE_IDLE_MS,
              } satisfies BareRelayChildConfig)
            : forkTs('../support/dispatcher-process.ts', {
                mode: 'run',
                countStatements: true,
                table: TABLE,
                queue: QUEUE,
                instanceId: `bench-p4-${variant}`,
                dispatcher:
                  variant === 'listen_stream'
                    ? { listen: true, claims: 'partitions', publishWindow: STREAM_WINDOW }
                    : variant === 'listen_partitions'
                      ? { listen: true, claims: 'partitions' }
                      : { listen: variant !== 'polling' },
              } satisfies DispatcherChildConfig);
        children.set(variant, child);
        await child.next('ready', 60_000);
      }
      for (let run = 1; run <= ctx.runs; run++) {
        for (const variant of variants) {
          const child = children.get(variant);
          if (child === undefined) throw new Error(`no dispatcher for ${variant}`);
          const window = (): Promise<Window> =>
            measureWindow(
              ctx,
              writerApp.outbox,
              child,
              variant,
              rateOf(variant),
              perTransaction(variant),
            );
          let w = await window();
          for (let attempt = 2; w.outages > 0 && attempt <= 3; attempt++) {
            ctx.log(
              `P4 run ${run} ${variant}: ${w.outages} outage(s) during the window; repeating it`,
            );
            w = await window();
          }
          const sorted = [...w.latencies].sort((a, b) => a - b);
          const s = stats[variant];
          s.p50.push(percentile(sorted, 50));
          s.p90.push(percentile(sorted, 90));
          s.p99.push(percentile(sorted, 99));
          s.max.push(sorted[sorted.length - 1] ?? Number.NaN);
          s.rate.push(w.achievedRate);
          s.lost += w.lost;
          // The bare relay's statements are not counted.
          const perMessage =
            variant !== 'bare' && w.latencies.length > 0
              ? w.statements / w.latencies.length
              : Number.NaN;
          if (variant !== 'bare') s.statements.push(perMessage);
          ctx.log(
            `P4 run ${run} ${variant}: p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${(sorted[sorted.length - 1] ?? NaN).toFixed(1)} ms over ${w.latencies.length} msgs at ${Math.round(w.achievedRate)} msgs/s${variant === 'bare' ? '' : `, ${perMessage.toFixed(2)} statements a message`}${w.lost > 0 ? `, ${w.lost} not received` : ''}`,
          );
          if (process.env.BENCH_P4_STATEMENTS === '1')
            for (const [text, n] of Object.entries(w.texts).sort((a, b) => b[1] - a[1]))
              ctx.log(`  ${String(n).padStart(7)}  ${text}`);
        }
      }
    } finally {
      for (const child of children.values()) {
        child.send({ type: 'exit' });
        await child.exit();
      }
    }
  } finally {
    await writerApp.close();
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const p50 = addMetric(
    result,
    'listen_p50_ms',
    'LISTEN/NOTIFY: p50 commit → consumer',
    'ms',
    stats.listen.p50,
  );
  addMetric(result, 'listen_p90_ms', 'LISTEN/NOTIFY: p90', 'ms', stats.listen.p90);
  const p99 = addMetric(result, 'listen_p99_ms', 'LISTEN/NOTIFY: p99', 'ms', stats.listen.p99);
  addMetric(result, 'listen_max_ms', 'LISTEN/NOTIFY: max', 'ms', stats.listen.max);
  addMetric(
    result,
    'listen_rate',
    'LISTEN/NOTIFY: achieved enqueue rate',
    'msgs/s',
    stats.listen.rate,
  );
  const pp50 = addMetric(
    result,
    'polling_p50_ms',
    'polling only (pollIntervalMs 1000): p50',
    'ms',
    stats.polling.p50,
  );
  const pp99 = addMetric(result, 'polling_p99_ms', 'polling only: p99', 'ms', stats.polling.p99);
  addMetric(
    result,
    'polling_rate',
    'polling only: achieved enqueue rate',
    'msgs/s',
    stats.polling.rate,
  );
  // The two 5 000 msgs/s windows, measured alike: p50, p99 and the rate the writers reached.
  const highWindow = (variant: 'listen_high' | 'listen_high_tx', load: string) => {
    const metric = (stat: 'p50' | 'p99' | 'rate', key: string, label: string, unit: string) =>
      addMetric(
        result,
        `${variant}_${key}`,
        `LISTEN/NOTIFY at ${load}: ${label}`,
        unit,
        stats[variant][stat],
      );
    return {
      p50: metric('p50', 'p50_ms', 'p50', 'ms'),
      p99: metric('p99', 'p99_ms', 'p99', 'ms'),
      rate: metric('rate', 'rate', 'achieved enqueue rate', 'msgs/s'),
    };
  };
  const high = highWindow('listen_high', `${profile.p4HighRate} msgs/s`);
  const batched = `${profile.p4HighRate} msgs/s in transactions of ${profile.p4HighBatch} messages`;
  const highTx = highWindow('listen_high_tx', batched);
  addTarget(result, 'p4_p50_ms', 'LISTEN/NOTIFY p50 (ms)', p50.median, '<=', 10);
  addTarget(result, 'p4_p99_ms', 'LISTEN/NOTIFY p99 (ms)', p99.median, '<=', 10);
  // One message per transaction: 8 writers do not reach the rate here, so its p99 is reported,
  // and the target is judged where the rate was offered (transactions of several messages).
  result.values.p4_high_single_p50_ms = round(high.p50.median, 2);
  result.values.p4_high_single_p99_ms = round(high.p99.median, 2);
  result.values.p4_high_p50_ms = round(highTx.p50.median, 2);
  // The issue's 5 000 msgs/s, offered: its p99 counts only beside the rate the writers reached.
  addTarget(
    result,
    'p4_high_p99_ms',
    `LISTEN/NOTIFY p99 at ${batched} (ms)`,
    highTx.p99.median,
    '<=',
    25,
  );
  addTarget(
    result,
    'p4_high_tx_rate_vs_offered',
    `achieved ÷ offered enqueue rate at ${batched}`,
    highTx.rate.median / profile.p4HighRate,
    '>=',
    0.95,
  );
  const pp99partitions = addMetric(
    result,
    'partitions_p99_ms',
    `LISTEN/NOTIFY, dispatcher.claims 'partitions' batch by batch: p99`,
    'ms',
    stats.listen_partitions.p99,
  );
  addMetric(
    result,
    'partitions_p50_ms',
    `LISTEN/NOTIFY, 'partitions' batch by batch: p50`,
    'ms',
    stats.listen_partitions.p50,
  );
  // The windows interleave, so each run's windows of the modes are a pair: the median of the
  // runs' ratios is the comparison, the ratio of the medians is kept beside it.
  const pairedP99 = (variant: Variant, base: Variant = 'listen'): number => {
    const ratios = stats[variant].p99
      .map((value, run) => value / (stats[base].p99[run] ?? Number.NaN))
      .filter((ratio) => Number.isFinite(ratio))
      .sort((a, b) => a - b);
    return ratios.length === 0 ? Number.NaN : percentile(ratios, 50);
  };
  result.values.p4_partitions_p99_vs_leases = round(pp99partitions.median / p99.median, 2);
  result.values.p4_partitions_p99_vs_leases_paired = round(pairedP99('listen_partitions'), 2);
  const sp50 = addMetric(
    result,
    'stream_p50_ms',
    `LISTEN/NOTIFY, dispatcher.claims 'partitions' with publishWindow ${STREAM_WINDOW}: p50`,
    'ms',
    stats.listen_stream.p50,
  );
  const sp99 = addMetric(
    result,
    'stream_p99_ms',
    `LISTEN/NOTIFY, 'partitions' as a stream: p99`,
    'ms',
    stats.listen_stream.p99,
  );
  addMetric(
    result,
    'stream_rate',
    `LISTEN/NOTIFY, 'partitions' as a stream: achieved enqueue rate`,
    'msgs/s',
    stats.listen_stream.rate,
  );
  result.values.p4_stream_p50_ms = round(sp50.median, 2);
  result.values.p4_stream_p99_ms = round(sp99.median, 2);
  // The default criterion (bench/HISTORY.md): partitions as it would ship ahead of leases here.
  result.values.p4_stream_p99_vs_leases = round(sp99.median / p99.median, 2);
  result.values.p4_stream_p99_vs_leases_paired = round(pairedP99('listen_stream'), 2);
  // The issue's own line: each mode's p99 against the bare relay's in the same run, and its worst
  // case against that p99 (at most 3 ×), the largest over the runs.
  addMetric(
    result,
    'bare_p50_ms',
    `the bare relay (looks every ${BARE_IDLE_MS} ms): p50`,
    'ms',
    stats.bare.p50,
  );
  addMetric(result, 'bare_p99_ms', 'the bare relay: p99', 'ms', stats.bare.p99);
  for (const [variant, name] of [
    ['listen', 'leases'],
    ['listen_partitions', 'partitions'],
    ['listen_stream', 'stream'],
  ] as const) {
    result.values[`p4_${name}_p99_vs_bare_paired`] = round(pairedP99(variant, 'bare'), 2);
    const worst = stats[variant].max
      .map((max, run) => max / (stats.bare.p99[run] ?? Number.NaN))
      .filter((ratio) => Number.isFinite(ratio));
    result.values[`p4_${name}_worst_vs_bare_p99`] =
      worst.length === 0 ? null : round(Math.max(...worst), 2);
  }
  // What the dispatcher asks the database per delivered message at the steady rate (reads,
  // claims, settles, beats): printed beside the latencies, as CPU is in P1.
  for (const [variant, label] of [
    ['listen', 'LISTEN/NOTIFY'],
    ['listen_partitions', `'partitions' batch by batch`],
    ['listen_stream', `'partitions' as a stream`],
  ] as const)
    addMetric(
      result,
      `${variant}_statements`,
      `${label}: statements per delivered message`,
      'statements',
      stats[variant].statements,
    );
  result.values.p4_polling_p50_ms = round(pp50.median, 2);
  result.values.p4_polling_p99_ms = round(pp99.median, 2);
  addTarget(
    result,
    'p4_not_received',
    'committed messages never received',
    // The module's variants: the bare relay keeps no promise (its losses are in its lines).
    stats.listen.lost +
      stats.polling.lost +
      stats.listen_high.lost +
      stats.listen_high_tx.lost +
      stats.listen_partitions.lost +
      stats.listen_stream.lost,
    '==',
    0,
  );
  return result;
}

async function measureWindow(
  ctx: BenchContext,
  outbox: OutboxService,
  child: Child,
  variant: Variant,
  rate: number,
  perTransaction: number,
): Promise<Window> {
  const { profile, pg } = ctx;
  const connection = await amqp.connect(SERVICES.rabbitmq.url);
  const channel = await connection.createChannel();
  const committedAt = new Map<string, number>();
  const receivedAt = new Map<string, number>();
  try {
    child.send({ type: 'go' });
    await channel.consume(
      QUEUE,
      (msg) => {
        if (msg !== null) receivedAt.set(String(msg.properties.messageId), nowMs());
      },
      { noAck: true },
    );

    const start = nowMs();
    const measureFrom = start + WARMUP_MS;
    const end = measureFrom + profile.p4DurationMs;
    const intervalMs = (1_000 * profile.p4Writers * perTransaction) / rate;
    let seq = 0;
    let measured = 0;
    const writer = async (index: number): Promise<void> => {
      let due = start + (index * intervalMs) / profile.p4Writers;
      while (due < end) {
        const wait = due - nowMs();
        if (wait > 0) await sleep(wait);
        const messages = Array.from({ length: perTransaction }, () => {
          const s = ++seq;
          const key = keyOf(s);
          return {
            topic: 'bench',
            key,
            type: 'order.created',
            payload: JSON.parse(payloadOf(s, key)) as object,
          };
        });
        const ids = await pg.transaction((manager) => outbox.enqueue(messages, manager));
        const at = nowMs();
        if (at >= measureFrom) {
          for (const id of ids) committedAt.set(id, at);
          measured += ids.length;
        }
        due += intervalMs;
        // A writer that fell behind skips the missed slots instead of bursting to catch up.
        if (due < nowMs() - intervalMs) due = nowMs();
      }
    };
    await Promise.all(Array.from({ length: profile.p4Writers }, (_, i) => writer(i)));
    const achievedRate = measured / (profile.p4DurationMs / 1000);
    const deadline = nowMs() + 10_000;
    while (nowMs() < deadline && [...committedAt.keys()].some((id) => !receivedAt.has(id)))
      await sleep(50);
    const latencies: number[] = [];
    let lost = 0;
    for (const [id, at] of committedAt) {
      const got = receivedAt.get(id);
      if (got === undefined) lost++;
      else latencies.push(got - at);
    }
    child.send({ type: 'stop' });
    const done = await child.next('done');
    return {
      latencies,
      committed: committedAt.size,
      achievedRate,
      lost,
      outages: Number(done.outages ?? 0),
      statements: Number(done.queries ?? 0),
      texts: (done.texts ?? {}) as Record<string, number>,
    };
  } finally {
    await channel.close().catch(() => undefined);
    await connection.close().catch(() => undefined);
    // Leave nothing for the next window.
    const leftover = await pg.query<{ n: string }[]>(
      `SELECT count(*) AS n FROM "${TABLE}" WHERE status = 'pending'`,
    );
    if (Number(leftover[0]?.n) > 0)
      ctx.log(`P4 ${variant}: ${leftover[0]?.n} message(s) still pending after the window`);
    // Ids keep rising: a `'partitions'` owner reads after the ids it has seen (its read floor),
    // so ids started again from 1 would wait for its sweeps (every pollIntervalMs).
    await pg.query(`TRUNCATE "${TABLE}"`);
    await purgeQueue(ctx.rabbit, QUEUE);
  }
}
