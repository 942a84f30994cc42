/**
 * L4: what a message costs the database's log, with log tailing and with polling: WAL bytes per
 * message on PostgreSQL, binlog bytes per message on MariaDB, for the enqueue (`l4Messages`
 * messages, 1 KiB, a key per message, through `OutboxService.enqueue` in transactions of 10, no
 * dispatcher running) and for the delivery (a fresh app started, as in L1, until every message is
 * published to RabbitMQ), apart.
 *
 * Two readings of each: the server's whole log (`pg_current_wal_lsn()`; the sizes in `SHOW BINARY
 * LOGS`), which counts every other database's writes in the same seconds too (other test suites
 * on a shared machine), and the bench database's own share: on PostgreSQL the `wal_bytes` of
 * pg_stat_statements for the bench database (when it is preloaded; statements only, without the
 * commit records), on MariaDB the binlog transactions that touch the bench database (`SHOW BINLOG
 * EVENTS` over the same range).
 */
import type { DataSource } from 'typeorm';
import { logTailing } from '../../lib/log-tailing';
import { SERVICES, named } from '../support/config';
import {
  dropOutboxTable,
  keyOf,
  payloadOf,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { appDrain, makeLogPosition } from '../support/log-drain';
import {
  benchLogOptions,
  dropLog,
  logBytesBetween,
  logPosition,
  openLogTargets,
  setUpLog,
  type LogPosition,
  type LogTarget,
} from '../support/log-tailing';
import { measured, startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { purgeQueue, resetQueue } from '../support/rabbit';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { ratio, round } from '../support/stats';

const QUEUE = named('bench.l4', '.');
const PER_TRANSACTION = 10;

type Mode = 'poll' | 'log' | 'log_partitions';
const ALL_MODES: readonly Mode[] = ['poll', 'log', 'log_partitions'];
/** Log tailing on `dispatcher.claims: 'partitions'` (PostgreSQL only), as a stream of this. */
const STREAM_WINDOW = 1_000;
const modesOf = (db: string): readonly Mode[] =>
  ALL_MODES.filter((m) => m !== 'log_partitions' || db === 'postgres');
const tableOf = (mode: Mode): string => named(`bench_l4_${mode.replace(/_/g, '')}`);
const LABELS: Record<Mode, string> = {
  poll: 'polling',
  log: 'log tailing',
  log_partitions: "log tailing on dispatcher.claims 'partitions'",
};
type Phase = 'enqueue' | 'delivery';

interface Reading {
  server: number;
  own: number | undefined;
}

export async function l4(ctx: BenchContext): Promise<ScenarioResult> {
  const n = ctx.profile.l4Messages;
  const result = newResult(
    'L4',
    `Log bytes per message (PostgreSQL WAL, MariaDB binlog), enqueue and delivery apart, polling vs log tailing (${n.toLocaleString('en-US')} msgs, 1 KiB, 10 per transaction)`,
  );
  const { targets, close } = await openLogTargets(ctx, result);
  try {
    await resetQueue(ctx.rabbit, QUEUE);
    for (const target of targets) {
      try {
        await measure(ctx, result, target);
      } catch (error) {
        ctx.log(`L4 ${target.name} failed: ${String(error)}`);
        result.skipped.push(
          `${target.name}: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
  } finally {
    await ctx.rabbit.deleteQueue(QUEUE).catch(() => undefined);
    await close();
  }
  result.notes.push(
    "server-wide figures count every database's writes in the same seconds (other suites on a shared machine); the own figures count the bench database's only",
  );
  return result;
}

async function measure(
  ctx: BenchContext,
  result: ScenarioResult,
  target: LogTarget,
): Promise<void> {
  const n = ctx.profile.l4Messages;
  const { ds } = target;
  const statementWal = target.name === 'postgres' && ctx.pgSettings.statStatements;
  if (statementWal) await ds.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  const readings: Record<Mode, Record<Phase, { server: number[]; own: number[] }>> = {
    poll: { enqueue: { server: [], own: [] }, delivery: { server: [], own: [] } },
    log: { enqueue: { server: [], own: [] }, delivery: { server: [], own: [] } },
    log_partitions: { enqueue: { server: [], own: [] }, delivery: { server: [], own: [] } },
  };
  const MODES = modesOf(target.name);
  const logOptionsOf = (mode: Mode) =>
    mode === 'poll' ? undefined : benchLogOptions(target.name, tableOf(mode));
  const writers: Partial<Record<Mode, OutboxApp>> = {};
  try {
    for (const mode of MODES) {
      await resetOutboxTable(ds, tableOf(mode));
      const log = logOptionsOf(mode);
      writers[mode] = await startOutboxApp({
        dataSource: ds,
        tableName: tableOf(mode),
        workers: false,
        ...(log === undefined ? {} : { delivery: logTailing(log) }),
      });
      if (log === undefined) continue;
      await setUpLog(target, tableOf(mode));
      await makeLogPosition({
        target,
        table: tableOf(mode),
        broker: 'rabbitmq',
        destination: QUEUE,
        log,
      });
    }
    for (let run = 0; run <= ctx.runs; run++) {
      // Run 0 (a tenth of the messages) warms up; not counted.
      const count = run === 0 ? Math.max(100, Math.round(n / 10)) : n;
      const order = MODES.map((_, i) => MODES[(i + run) % MODES.length] as Mode);
      for (const mode of order) {
        const writer = writers[mode];
        if (writer === undefined) throw new Error('no writer');
        const r = await measured(`L4 ${target.name} run ${run} ${mode}`, ctx.log, async () => {
          const table = tableOf(mode);
          await truncateOutbox(ds, table);
          await purgeQueue(ctx.rabbit, QUEUE);
          const p0 = await reading(target, statementWal);
          await enqueue(ds, writer, count);
          const p1 = await reading(target, statementWal);
          const d = await appDrain({
            target,
            table,
            broker: 'rabbitmq',
            destination: QUEUE,
            n: count,
            instanceId: `bench-l4-${mode}`,
            log: logOptionsOf(mode),
            ...(mode === 'log_partitions' && { partitionsWindow: STREAM_WINDOW }),
          });
          if (d.outages > 0) throw new Error(`${d.outages} outage(s) during the drain`);
          const p2 = await reading(target, statementWal);
          return {
            enqueue: await between(target, p0, p1),
            delivery: await between(target, p1, p2),
          };
        });
        if (run === 0) continue;
        for (const phase of ['enqueue', 'delivery'] as const) {
          readings[mode][phase].server.push(r[phase].server / count);
          if (r[phase].own !== undefined) readings[mode][phase].own.push(r[phase].own / count);
        }
        ctx.log(
          `L4 ${target.name} run ${run} ${mode}: enqueue ${Math.round(r.enqueue.server / count)} B/msg (own ${fmt(r.enqueue.own, count)}), delivery ${Math.round(r.delivery.server / count)} B/msg (own ${fmt(r.delivery.own, count)})`,
        );
      }
    }
  } finally {
    for (const mode of MODES) await writers[mode]?.close();
    for (const mode of MODES) if (mode !== 'poll') await dropLog(target, tableOf(mode));
    for (const mode of MODES) await dropOutboxTable(ds, tableOf(mode));
  }
  const db = target.name;
  const logName = db === 'postgres' ? 'WAL' : 'binlog';
  const own =
    db === 'postgres' ? "the bench database's statements" : "the bench database's transactions";
  const medians: Record<string, number> = {};
  for (const mode of MODES) {
    for (const phase of ['enqueue', 'delivery'] as const) {
      const label = `${db}, ${LABELS[mode]}, ${phase}: ${logName} bytes per message`;
      const server = addMetric(
        result,
        `${db}_${mode}_${phase}_bytes_per_msg`,
        `${label} (server)`,
        'B',
        readings[mode][phase].server,
      ).median;
      result.values[`l4_${db}_${mode}_${phase}_bytes_per_msg`] = Math.round(server);
      medians[`${mode}_${phase}`] = server;
      if (readings[mode][phase].own.length > 0) {
        const o = addMetric(
          result,
          `${db}_${mode}_${phase}_own_bytes_per_msg`,
          `${label} (${own})`,
          'B',
          readings[mode][phase].own,
        ).median;
        result.values[`l4_${db}_${mode}_${phase}_own_bytes_per_msg`] = Math.round(o);
        medians[`${mode}_${phase}_own`] = o;
      }
    }
  }
  if (medians.log_partitions_delivery !== undefined) {
    result.values[`l4_${db}_log_partitions_vs_log_delivery`] = round(
      ratio(medians.log_partitions_delivery, medians.log_delivery ?? NaN),
      3,
    );
  }
  result.values[`l4_${db}_log_vs_poll_delivery`] = round(
    ratio(medians.log_delivery ?? NaN, medians.poll_delivery ?? NaN),
    3,
  );
  if (medians.log_delivery_own !== undefined && medians.poll_delivery_own !== undefined)
    result.values[`l4_${db}_log_vs_poll_delivery_own`] = round(
      ratio(medians.log_delivery_own, medians.poll_delivery_own),
      3,
    );
}

const fmt = (bytes: number | undefined, count: number): string =>
  bytes === undefined ? 'n/a' : `${Math.round(bytes / count)} B/msg`;

/** `count` messages through `OutboxService.enqueue`, 10 per transaction, one writer. */
async function enqueue(ds: DataSource, writer: OutboxApp, count: number): Promise<void> {
  for (let from = 1; from <= count; from += PER_TRANSACTION) {
    const messages = Array.from({ length: Math.min(PER_TRANSACTION, count - from + 1) }, (_, i) => {
      const key = keyOf(from + i, Number.MAX_SAFE_INTEGER);
      return {
        topic: 'bench',
        key,
        type: 'order.created',
        payload: JSON.parse(payloadOf(from + i, key)) as object,
      };
    });
    await ds.transaction((manager) => writer.outbox.enqueue(messages, manager));
  }
}

interface Point {
  position: LogPosition;
  /** PostgreSQL: the bench database's statements' WAL bytes so far (pg_stat_statements). */
  statementWal: bigint | undefined;
}

async function reading(target: LogTarget, statementWal: boolean): Promise<Point> {
  const position = await logPosition(target);
  if (!statementWal) return { position, statementWal: undefined };
  const rows = await target.ds.query<{ b: string }[]>(
    `SELECT coalesce(sum(wal_bytes), 0)::text AS b FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return { position, statementWal: BigInt(rows[0]?.b ?? '0') };
}

async function between(target: LogTarget, a: Point, b: Point): Promise<Reading> {
  const server = logBytesBetween(a.position, b.position);
  if (target.name === 'postgres') {
    const own =
      a.statementWal === undefined || b.statementWal === undefined
        ? undefined
        : Number(b.statementWal - a.statementWal);
    return { server, own };
  }
  if (!(a.position instanceof Map) || !(b.position instanceof Map))
    return { server, own: undefined };
  return { server, own: await ownBinlogBytes(target.ds, a.position, b.position) };
}

interface BinlogEvent {
  Log_name: string;
  Pos: string | number;
  Event_type: string;
  End_log_pos: string | number;
  Info: string;
}

/**
 * The bytes of the binlog transactions between two readings that touch the bench database: each
 * transaction's events (from its GTID event to its commit) are counted when one of its table maps
 * names the database.
 */
async function ownBinlogBytes(
  ds: DataSource,
  before: Map<string, number>,
  after: Map<string, number>,
): Promise<number> {
  const db = SERVICES.mariadb.database;
  let bytes = 0;
  for (const [file, size] of [...after].sort(([x], [y]) => x.localeCompare(y))) {
    const from = before.get(file) ?? 4;
    if (size <= from) continue;
    let pending = 0;
    let ours = false;
    let position = from;
    for (;;) {
      const events = await ds.query<BinlogEvent[]>(
        `SHOW BINLOG EVENTS IN '${file.replace(/'/g, '')}' FROM ${position} LIMIT 10000`,
      );
      for (const e of events) {
        const end = Number(e.End_log_pos);
        if (end > size) break;
        const length = end - Number(e.Pos);
        if (e.Event_type === 'Gtid') {
          pending = 0;
          ours = false;
        }
        pending += length;
        if (e.Event_type === 'Table_map' && e.Info.includes(`(${db}.`)) ours = true;
        if (e.Event_type === 'Xid' || (e.Event_type === 'Query' && e.Info.startsWith('COMMIT'))) {
          if (ours) bytes += pending;
          pending = 0;
          ours = false;
        }
      }
      const last = events[events.length - 1];
      if (events.length < 10_000 || last === undefined || Number(last.End_log_pos) >= size) break;
      position = Number(last.End_log_pos);
    }
  }
  return bytes;
}
