/**
 * L2: commit → consumer latency at `l2Rate` (1 000) msgs/s with log tailing and with polling
 * (LISTEN/NOTIFY on PostgreSQL), beside the bare pipelined relay looking at its table every 2 ms
 * when it finds it empty (the floor of a relay on this machine), on PostgreSQL and MariaDB.
 *
 * As in P4: 8 writers in this process commit one message per transaction (a key per message,
 * 1 KiB) through an enqueue-only app set up like the dispatcher's (log tailing or not); the
 * dispatcher (or the relay) runs in a process of its own, started for each window (`dispatcher.
 * start()`, and for log tailing until its reader holds the slot or the binlog lock); a RabbitMQ
 * consumer in this process stamps each arrival. The first second of each window is not counted.
 * Each mode has a table of its own; windows rotate the modes run by run. On PostgreSQL also log
 * tailing on delivery partitions (`log_partitions`: `logTailing()` and `dispatcher.claims:
 * 'partitions'`, both at their defaults).
 */
import * as amqp from 'amqplib';
import { logTailing } from '../../lib/log-tailing';
import { BARE_IDLE_MS, forkBareRelay } from '../support/bare-relay-child';
import { forkTs, stopChild, type Child } from '../support/child';
import { SERVICES, named } from '../support/config';
import { dropOutboxTable, resetOutboxTable, truncateOutbox } from '../support/databases';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import {
  benchLogOptions,
  dropLog,
  openLogTargets,
  readerReady,
  setUpLog,
  type LogTarget,
} from '../support/log-tailing';
import { runWriters } from '../support/log-writers';
import { startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { purgeQueue, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { nowMs, percentile, ratio, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const QUEUE = named('bench.l2', '.');
const WARMUP_MS = 1_000;

type Mode = 'log' | 'log_partitions' | 'poll' | 'bare';
const ALL_MODES: readonly Mode[] = ['log', 'log_partitions', 'poll', 'bare'];
/** Log tailing on delivery partitions is PostgreSQL's only. */
const modesOf = (db: LogTarget['name']): readonly Mode[] =>
  ALL_MODES.filter((m) => m !== 'log_partitions' || db === 'postgres');
const onLog = (mode: Mode): boolean => mode === 'log' || mode === 'log_partitions';
const tableOf = (mode: Mode): string => named(`bench_l2_${mode}`);

interface ModeStats {
  p50: number[];
  p99: number[];
  max: number[];
  rate: number[];
  lost: number;
  reconnects: number;
}

export async function l2(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile } = ctx;
  const result = newResult(
    'L2',
    `Commit → consumer latency at ${profile.l2Rate} msgs/s, log tailing vs polling vs bare relay, PostgreSQL and MariaDB → RabbitMQ (${profile.l2DurationMs / 1000} s windows)`,
  );
  const { targets, close } = await openLogTargets(ctx, result);
  let lost = 0;
  try {
    await resetQueue(ctx.rabbit, QUEUE);
    for (const target of targets) {
      try {
        lost += await windows(ctx, result, target);
      } catch (error) {
        ctx.log(`L2 ${target.name} failed: ${String(error)}`);
        result.skipped.push(
          `${target.name}: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
  } finally {
    await ctx.rabbit.deleteQueue(QUEUE).catch(() => undefined);
    await close();
  }
  addTarget(result, 'l2_not_received', 'committed messages never received', lost, '==', 0);
  return result;
}

async function windows(
  ctx: BenchContext,
  result: ScenarioResult,
  target: LogTarget,
): Promise<number> {
  const { ds } = target;
  const modes = modesOf(target.name);
  const empty = (): ModeStats => ({ p50: [], p99: [], max: [], rate: [], lost: 0, reconnects: 0 });
  const stats: Record<Mode, ModeStats> = {
    log: empty(),
    log_partitions: empty(),
    poll: empty(),
    bare: empty(),
  };
  for (const mode of modes) await resetOutboxTable(ds, tableOf(mode));
  for (const mode of modes.filter(onLog)) await setUpLog(target, tableOf(mode));
  const logOptions = (mode: Mode) => benchLogOptions(target.name, tableOf(mode));
  const writers: Partial<Record<Mode, OutboxApp>> = {};
  const children: Partial<Record<Mode, Child>> = {};
  try {
    for (const mode of modes) {
      // The writers' app is set up as the dispatcher's (with log tailing no NOTIFY is sent).
      writers[mode] = await startOutboxApp({
        dataSource: ds,
        tableName: tableOf(mode),
        workers: false,
        ...(onLog(mode) ? { delivery: logTailing(logOptions(mode)) } : {}),
      });
      children[mode] =
        mode === 'bare'
          ? forkBareRelay(target.name, tableOf(mode), QUEUE)
          : forkTs('../support/dispatcher-process.ts', {
              mode: 'run',
              database: target.name,
              table: tableOf(mode),
              queue: QUEUE,
              instanceId: `bench-l2-${mode}`,
              ...(onLog(mode) ? { logTailing: logOptions(mode) } : {}),
              ...(mode === 'log_partitions' && { dispatcher: { claims: 'partitions' } }),
            } satisfies DispatcherChildConfig);
    }
    for (const mode of modes) await children[mode]?.next('ready', 120_000);
    ctx.log(`L2 ${target.name}: the dispatchers and the relay are ready`);
    for (let run = 0; run <= ctx.runs; run++) {
      // Run 0 warms every mode up (the log's first start makes its slot); not counted.
      const order = modes.map((_, i) => modes[(i + run) % modes.length] as Mode);
      for (const mode of order) {
        const child = children[mode];
        const writer = writers[mode];
        if (child === undefined || writer === undefined) throw new Error('no child or writer');
        const w = await window(ctx, target, mode, child, writer);
        if (run === 0) continue;
        const sorted = [...w.latencies].sort((a, b) => a - b);
        const s = stats[mode];
        s.p50.push(percentile(sorted, 50));
        s.p99.push(percentile(sorted, 99));
        s.max.push(sorted[sorted.length - 1] ?? Number.NaN);
        s.rate.push(w.rate);
        s.lost += w.lost;
        s.reconnects += w.reconnects;
        ctx.log(
          `L2 ${target.name} run ${run} ${mode}: p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${(sorted[sorted.length - 1] ?? NaN).toFixed(1)} ms over ${sorted.length} msgs at ${Math.round(w.rate)} msgs/s${w.lost > 0 ? `, ${w.lost} not received` : ''}${w.reconnects > 0 ? `, ${w.reconnects} reader reconnect line(s)` : ''}`,
        );
      }
    }
  } finally {
    for (const mode of modes) {
      await stopChild(children[mode]);
      await writers[mode]?.close();
    }
    for (const mode of modes.filter(onLog)) await dropLog(target, tableOf(mode));
    for (const mode of modes) await dropOutboxTable(ds, tableOf(mode));
  }
  const db = target.name;
  const label: Record<Mode, string> = {
    log: 'log tailing (logTailing() defaults)',
    log_partitions: "log tailing on delivery partitions (defaults, claims: 'partitions')",
    poll: `polling (defaults${db === 'postgres' ? ', LISTEN/NOTIFY' : ''})`,
    bare: `bare relay (idle poll every ${BARE_IDLE_MS} ms)`,
  };
  const p = Object.fromEntries(ALL_MODES.map((m) => [m, { p50: NaN, p99: NaN }])) as Record<
    Mode,
    { p50: number; p99: number }
  >;
  for (const mode of modes) {
    const s = stats[mode];
    p[mode].p50 = addMetric(
      result,
      `${db}_${mode}_p50_ms`,
      `${db}, ${label[mode]}: p50`,
      'ms',
      s.p50,
    ).median;
    p[mode].p99 = addMetric(
      result,
      `${db}_${mode}_p99_ms`,
      `${db}, ${label[mode]}: p99`,
      'ms',
      s.p99,
    ).median;
    addMetric(result, `${db}_${mode}_max_ms`, `${db}, ${label[mode]}: max`, 'ms', s.max);
    addMetric(
      result,
      `${db}_${mode}_rate`,
      `${db}, ${label[mode]}: achieved enqueue rate`,
      'msgs/s',
      s.rate,
    );
    result.values[`l2_${db}_${mode}_p50_ms`] = round(p[mode].p50, 2);
    result.values[`l2_${db}_${mode}_p99_ms`] = round(p[mode].p99, 2);
  }
  result.values[`l2_${db}_log_vs_poll_p50`] = round(ratio(p.log.p50, p.poll.p50), 3);
  result.values[`l2_${db}_log_vs_poll_p99`] = round(ratio(p.log.p99, p.poll.p99), 3);
  result.values[`l2_${db}_log_vs_bare_p50`] = round(ratio(p.log.p50, p.bare.p50), 3);
  result.values[`l2_${db}_poll_vs_bare_p50`] = round(ratio(p.poll.p50, p.bare.p50), 3);
  result.values[`l2_${db}_log_reader_reconnects`] = stats.log.reconnects;
  if (modes.includes('log_partitions')) {
    result.values[`l2_${db}_log_partitions_vs_poll_p99`] = round(
      ratio(p.log_partitions.p99, p.poll.p99),
      3,
    );
    result.values[`l2_${db}_log_partitions_vs_bare_p99`] = round(
      ratio(p.log_partitions.p99, p.bare.p99),
      3,
    );
  }
  return modes.reduce((a, m) => a + stats[m].lost, 0);
}

interface Window {
  latencies: number[];
  rate: number;
  lost: number;
  reconnects: number;
}

async function window(
  ctx: BenchContext,
  target: LogTarget,
  mode: Mode,
  child: Child,
  writer: OutboxApp,
): Promise<Window> {
  const { profile } = ctx;
  const table = tableOf(mode);
  const connection = await amqp.connect(SERVICES.rabbitmq.url);
  const channel = await connection.createChannel();
  const committedAt = new Map<string, number>();
  const receivedAt = new Map<string, number>();
  try {
    child.send({ type: 'go' });
    if (onLog(mode)) await readerReady(target, table);
    await channel.consume(
      QUEUE,
      (msg) => {
        if (msg !== null) receivedAt.set(String(msg.properties.messageId), nowMs());
      },
      { noAck: true },
    );
    const measureFrom = nowMs() + WARMUP_MS;
    await runWriters({
      ds: target.ds,
      outbox: writer.outbox,
      writers: 8,
      perTransaction: 1,
      rate: profile.l2Rate,
      durationMs: WARMUP_MS + profile.l2DurationMs,
      onCommit: (ids, at) => {
        if (at >= measureFrom) for (const id of ids) committedAt.set(id, at);
      },
    });
    const deadline = nowMs() + 10_000;
    while (nowMs() < deadline && [...committedAt.keys()].some((id) => !receivedAt.has(id)))
      await sleep(50);
    child.send({ type: 'stop' });
    const done = await child.next('done');
    const latencies: number[] = [];
    let lost = 0;
    for (const [id, at] of committedAt) {
      const got = receivedAt.get(id);
      if (got === undefined) lost++;
      else latencies.push(got - at);
    }
    const reconnects = Array.isArray(done.readerReconnects) ? done.readerReconnects.length : 0;
    return {
      latencies,
      rate: committedAt.size / (profile.l2DurationMs / 1000),
      lost,
      reconnects,
    };
  } finally {
    await channel.close().catch(() => undefined);
    await connection.close().catch(() => undefined);
    await truncateOutbox(target.ds, table);
    await purgeQueue(ctx.rabbit, QUEUE);
  }
}
