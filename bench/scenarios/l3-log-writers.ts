/**
 * L3: `l3Writers` (8) writers commit as fast as they can, `l3PerTransaction` (10) messages per
 * transaction (a key per message, 1 KiB), for `l3DurationMs`, while one dispatcher delivers to
 * RabbitMQ: polling (the defaults; on PostgreSQL also `claims: 'partitions'`, batch by batch and
 * publishing as a stream), log tailing with the default sweep (5 s), and log tailing
 * with the sweep effectively off (`sweepIntervalMs` one hour, so that only the log feeds it), on
 * PostgreSQL and MariaDB; on PostgreSQL also log tailing on `'partitions'` publishing as a stream
 * (the reader owns every partition; the log wakes it); and the bare pipelined relay in a process
 * of its own beside the same writers (looking again every 2 ms when it finds the table empty),
 * which tells what the machine lets any relay deliver under this load. Reported per mode: messages committed per second, delivered per second
 * (rows delivered when the writers stop ÷ the window), the backlog then (committed, not yet
 * delivered), and whether the log's reader reconnected or read again (its start and reconnect
 * lines, counted in the dispatcher's own log).
 *
 * The dispatcher runs in a process of its own, started for each window; the writers' app is set
 * up as the dispatcher's. After a window its backlog is dropped, not drained: the table is
 * emptied and the log's position moved to the end (the slot advanced; MariaDB's position table
 * made again, so the next reader starts at the binlog's end), so each window starts clean.
 */
import { logTailing, type LogTailingOptions } from '../../lib/log-tailing';
import { forkTs, stopChild, type Child } from '../support/child';
import { named } from '../support/config';
import {
  countByStatus,
  dropOutboxTable,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { BARE_IDLE_MS, forkBareRelay } from '../support/bare-relay-child';
import type { DispatcherChildConfig } from '../support/dispatcher-process';
import {
  benchLogOptions,
  dropLog,
  openLogTargets,
  postgresBenchLogNames,
  readerReady,
  setUpLog,
  type LogTarget,
} from '../support/log-tailing';
import { runWriters } from '../support/log-writers';
import { startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { purgeQueue, resetQueue } from '../support/rabbit';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { ratio, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const QUEUE = named('bench.l3', '.');
/** The "sweep off" setting: an hour, far beyond any window. */
const NO_SWEEP_MS = 3_600_000;
const WARMUP_MS = 1_000;

type Mode = 'bare' | 'poll' | 'partitions' | 'stream' | 'log' | 'log_no_sweep' | 'log_partitions';
const ALL_MODES: readonly Mode[] = [
  'bare',
  'poll',
  'partitions',
  'stream',
  'log',
  'log_no_sweep',
  'log_partitions',
];
/** `'stream'`: partitions publishing as a stream, a window as P4's. */
const STREAM_WINDOW = 1_000;
/** Modes that poll the table (no log reader). */
const polls = (mode: Mode): boolean =>
  mode === 'bare' || mode === 'poll' || mode === 'partitions' || mode === 'stream';
/** Partitioned delivery (`dispatcher.claims: 'partitions'`) runs on PostgreSQL only. */
const partitioned = (mode: Mode): boolean =>
  mode === 'partitions' || mode === 'stream' || mode === 'log_partitions';
/** `BENCH_L3_MODES=bare,log_partitions` runs only those modes (default all). */
const WANTED = process.env.BENCH_L3_MODES?.split(',').map((mode) => mode.trim());
const modesOf = (db: string): readonly Mode[] =>
  ALL_MODES.filter(
    (m) => (!partitioned(m) || db === 'postgres') && (WANTED === undefined || WANTED.includes(m)),
  );
const tableOf = (mode: Mode): string => named(`bench_l3_${mode.replace(/_/g, '')}`);

interface ModeStats {
  committed: number[];
  delivered: number[];
  backlog: number[];
  /** The dispatcher process's CPU per message it delivered in the window (µs). */
  cpuPerMsg: number[];
  readerStarts: number;
  reconnects: string[];
}

export async function l3(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile } = ctx;
  const result = newResult(
    'L3',
    `${profile.l3Writers} writers at full rate, ${profile.l3PerTransaction} msgs/tx for ${profile.l3DurationMs / 1000} s: committed, delivered and backlog, polling vs log tailing (default sweep, sweep off), PostgreSQL and MariaDB → RabbitMQ`,
  );
  const { targets, close } = await openLogTargets(ctx, result);
  try {
    // Capped: nobody reads the queue during a window, and 100 000 × 1 KiB would sit in memory.
    await resetQueue(ctx.rabbit, QUEUE, 10_000);
    for (const target of targets) {
      try {
        await windows(ctx, result, target);
      } catch (error) {
        ctx.log(`L3 ${target.name} failed: ${String(error)}`);
        result.skipped.push(
          `${target.name}: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
  } finally {
    await ctx.rabbit.deleteQueue(QUEUE).catch(() => undefined);
    await close();
  }
  return result;
}

function logOptionsOf(target: LogTarget, mode: Mode): LogTailingOptions | undefined {
  if (polls(mode)) return undefined;
  return benchLogOptions(
    target.name,
    tableOf(mode),
    // On partitions the owner sweeps the table itself: the log alone, as `log_no_sweep`.
    mode === 'log_no_sweep' || mode === 'log_partitions' ? { sweepIntervalMs: NO_SWEEP_MS } : {},
  );
}

async function windows(
  ctx: BenchContext,
  result: ScenarioResult,
  target: LogTarget,
): Promise<void> {
  const { ds } = target;
  const MODES = modesOf(target.name);
  const stats = Object.fromEntries(
    ALL_MODES.map((mode): [Mode, ModeStats] => [
      mode,
      { committed: [], delivered: [], backlog: [], readerStarts: 0, reconnects: [], cpuPerMsg: [] },
    ]),
  ) as Record<Mode, ModeStats>;
  const writers: Partial<Record<Mode, OutboxApp>> = {};
  const children: Partial<Record<Mode, Child>> = {};
  try {
    for (const mode of MODES) {
      await resetOutboxTable(ds, tableOf(mode));
      const log = logOptionsOf(target, mode);
      if (log !== undefined) await setUpLog(target, tableOf(mode));
      writers[mode] = await startOutboxApp({
        dataSource: ds,
        tableName: tableOf(mode),
        workers: false,
        ...(log === undefined ? {} : { delivery: logTailing(log) }),
      });
      children[mode] =
        mode === 'bare'
          ? forkBareRelay(target.name, tableOf(mode), QUEUE)
          : forkTs('../support/dispatcher-process.ts', {
              mode: 'run',
              database: target.name,
              table: tableOf(mode),
              queue: QUEUE,
              instanceId: `bench-l3-${mode}`,
              ...(mode === 'partitions' ? { dispatcher: { claims: 'partitions' } } : {}),
              ...(mode === 'stream' || mode === 'log_partitions'
                ? { dispatcher: { claims: 'partitions', publishWindow: STREAM_WINDOW } }
                : {}),
              ...(log === undefined ? {} : { logTailing: log }),
            } satisfies DispatcherChildConfig);
    }
    for (const mode of MODES) await children[mode]?.next('ready', 120_000);
    ctx.log(`L3 ${target.name}: the dispatchers are ready`);
    for (let run = 0; run <= ctx.runs; run++) {
      // Run 0 (a short window) warms every mode up and makes the slots; not counted.
      const order = MODES.map((_, i) => MODES[(i + run) % MODES.length] as Mode);
      for (const mode of order) {
        const child = children[mode];
        const writer = writers[mode];
        if (child === undefined || writer === undefined) throw new Error('no child or writer');
        const durationMs = run === 0 ? WARMUP_MS : ctx.profile.l3DurationMs;
        const w = await window(ctx, target, mode, child, writer, durationMs);
        if (run === 0) continue;
        const s = stats[mode];
        s.committed.push(w.committed / (durationMs / 1000));
        s.delivered.push(w.delivered / (durationMs / 1000));
        s.backlog.push(w.committed - w.delivered);
        if (w.delivered > 0) s.cpuPerMsg.push(w.cpuUs / w.delivered);
        s.readerStarts += w.readerStarts;
        s.reconnects.push(...w.reconnects);
        ctx.log(
          `L3 ${target.name} run ${run} ${mode}: committed ${Math.round(w.committed / (durationMs / 1000))} msgs/s, delivered ${Math.round(w.delivered / (durationMs / 1000))} msgs/s, backlog ${w.committed - w.delivered}, dispatcher CPU ${(w.cpuUs / 1e6).toFixed(2)} s${polls(mode) ? '' : `, reader starts ${w.readerStarts}, reconnect lines ${w.reconnects.length}`}`,
        );
        for (const line of w.reconnects) ctx.log(`L3 ${target.name} ${mode} reader: ${line}`);
      }
    }
  } finally {
    for (const mode of MODES) {
      await stopChild(children[mode]);
      await writers[mode]?.close();
    }
    for (const mode of MODES) {
      if (!polls(mode)) await dropLog(target, tableOf(mode));
      await dropOutboxTable(ds, tableOf(mode));
    }
  }
  const db = target.name;
  const label: Record<Mode, string> = {
    bare: `bare pipelined relay (idle poll every ${BARE_IDLE_MS} ms)`,
    poll: 'polling (defaults)',
    partitions: "polling, dispatcher.claims 'partitions'",
    stream: `polling, 'partitions' with publishWindow ${STREAM_WINDOW}`,
    log: 'log tailing (default sweep, 5 s)',
    log_no_sweep: `log tailing, sweep off (sweepIntervalMs ${NO_SWEEP_MS})`,
    log_partitions: `log tailing on 'partitions' with publishWindow ${STREAM_WINDOW}, sweep off`,
  };
  const committed: Partial<Record<Mode, number>> = {};
  for (const mode of MODES) {
    const s = stats[mode];
    committed[mode] = addMetric(
      result,
      `${db}_${mode}_committed_msgs_per_s`,
      `${db}, ${label[mode]}: committed`,
      'msgs/s',
      s.committed,
    ).median;
    const delivered = addMetric(
      result,
      `${db}_${mode}_delivered_msgs_per_s`,
      `${db}, ${label[mode]}: delivered during the window`,
      'msgs/s',
      s.delivered,
    ).median;
    const backlog = addMetric(
      result,
      `${db}_${mode}_backlog`,
      `${db}, ${label[mode]}: backlog when the writers stop`,
      'msgs',
      s.backlog,
    ).median;
    result.values[`l3_${db}_${mode}_committed_msgs_per_s`] = Math.round(committed[mode] ?? NaN);
    result.values[`l3_${db}_${mode}_delivered_msgs_per_s`] = Math.round(delivered);
    result.values[`l3_${db}_${mode}_backlog`] = Math.round(backlog);
    if (s.cpuPerMsg.length > 0) {
      const cpu = addMetric(
        result,
        `${db}_${mode}_dispatcher_cpu_us_per_msg`,
        `${db}, ${label[mode]}: the dispatcher process's CPU per message delivered`,
        'µs',
        s.cpuPerMsg,
      ).median;
      result.values[`l3_${db}_${mode}_dispatcher_cpu_us_per_msg`] = Math.round(cpu);
    }
    if (!polls(mode)) {
      // One start per window is the reader's own; more is a reconnect that read the log again.
      result.values[`l3_${db}_${mode}_reader_restarts`] = s.readerStarts - ctx.runs;
      result.values[`l3_${db}_${mode}_reader_reconnect_lines`] = s.reconnects.length;
    }
  }
  if (committed.poll !== undefined) {
    for (const mode of ['log', 'log_no_sweep'] as const) {
      if (committed[mode] === undefined) continue;
      result.values[`l3_${db}_${mode}_vs_poll_committed`] = round(
        ratio(committed[mode], committed.poll),
        3,
      );
    }
  }
  // Issue 76's targets: delivered ≥ 0.95 × committed beside the same writers, and ≥ what the
  // bare relay delivers beside them.
  const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
  const share = (mode: Mode): number =>
    ratio(sum(stats[mode].delivered), sum(stats[mode].committed));
  for (const mode of MODES) {
    result.values[`l3_${db}_${mode}_delivered_vs_committed`] = round(share(mode), 3);
    if (mode !== 'bare' && MODES.includes('bare')) {
      result.values[`l3_${db}_${mode}_share_vs_bare`] = round(ratio(share(mode), share('bare')), 3);
    }
  }
}

interface Window {
  committed: number;
  delivered: number;
  /** The dispatcher process's CPU over the window (µs: user and system). */
  cpuUs: number;
  readerStarts: number;
  reconnects: string[];
}

async function window(
  ctx: BenchContext,
  target: LogTarget,
  mode: Mode,
  child: Child,
  writer: OutboxApp,
  durationMs: number,
): Promise<Window> {
  const { profile } = ctx;
  const table = tableOf(mode);
  try {
    // The other modes' windows wrote since this slot was last advanced: a reader starting there
    // would spend its window decoding their WAL. Advanced again here, just before it starts.
    if (!polls(mode) && target.name === 'postgres') await advanceSlot(target, table);
    child.send({ type: 'go' });
    if (!polls(mode)) await readerReady(target, table);
    const committed = await runWriters({
      ds: target.ds,
      outbox: writer.outbox,
      writers: profile.l3Writers,
      perTransaction: profile.l3PerTransaction,
      durationMs,
    });
    const delivered = (await countByStatus(target.ds, table)).delivered ?? 0;
    child.send({ type: 'stop' });
    const done = await child.next('done');
    return {
      committed,
      delivered,
      cpuUs: Number(done.cpuUs ?? 0),
      readerStarts: Number(done.readerStarts ?? 0),
      reconnects: Array.isArray(done.readerReconnects) ? done.readerReconnects.map(String) : [],
    };
  } finally {
    await dropBacklog(target, mode);
    await purgeQueue(ctx.rabbit, QUEUE);
  }
}

/** Empties the table and moves the log's position past what it held (see the file's comment). */
async function dropBacklog(target: LogTarget, mode: Mode): Promise<void> {
  const table = tableOf(mode);
  if (!polls(mode)) {
    if (target.name === 'postgres') {
      await advanceSlot(target, table);
    } else {
      await dropLog(target, table);
      await setUpLog(target, table);
    }
  }
  await truncateOutbox(target.ds, table);
}

/** Moves the table's slot to the WAL's end once no reader holds it (PostgreSQL). */
async function advanceSlot(target: LogTarget, table: string): Promise<void> {
  const { slot } = postgresBenchLogNames(table);
  for (let i = 0; i < 150; i++) {
    const rows = await target.ds.query<{ active: boolean }[]>(
      'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    if (rows.every((r) => !r.active)) break;
    await sleep(100);
  }
  // A logical slot's restart point moves only to where the log records which transactions were
  // running, which PostgreSQL 15 writes every 15 s and at a checkpoint; an advance alone left it
  // 200-360 MB behind after the other modes' windows, and each log window began by decoding all
  // of that again (its reader delivered 0-5 % of what the writers committed). A checkpoint
  // writes that record now; the first advance finds it, the second moves the restart point.
  await target.ds.query('CHECKPOINT');
  for (let i = 0; i < 2; i++) {
    await target.ds.query(
      'SELECT pg_replication_slot_advance(slot_name, pg_current_wal_lsn()) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active',
      [slot],
    );
  }
}
