/**
 * P13: the MySQL/MariaDB server settings that matter for an outbox, measured rather than
 * guessed (docs/performance.md, "MySQL and MariaDB server settings"). Each variant sets its global settings, then times the two things the
 * outbox asks of the server: committing a business transaction with its enqueue (one order row +
 * one event, one connection, sequential: commit-bound) and draining a backlog to RabbitMQ (claim,
 * publish, settle). The variants interleave run by run; the server's own settings are put back
 * at the end, whatever happens.
 *
 * Variants: the server's defaults as found; `innodb_flush_log_at_trx_commit = 2` (the redo log
 * is written at each commit but flushed to disk once a second); a buffer pool of 1 GiB instead of
 * the 128 MiB default. Only dynamic settings: nothing restarts the server.
 */
import type { DataSource, EntityManager } from 'typeorm';
import { named } from '../support/config';
import { checkedRabbitDrain } from '../support/checked-drain';
import {
  BenchOrder,
  closeDataSource,
  dropOutboxTable,
  keyOf,
  openMaria,
  PAD,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { OrderPlaced } from '../support/order-placed.event';
import { rabbitPublisher, startOutboxApp } from '../support/outbox-app';
import { resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { ratio, round } from '../support/stats';
import { sleep } from '../../test/support/wait-for';

const TABLE = named('bench_p13');
const QUEUE = named('bench.p13', '.');

interface Variant {
  readonly name: string;
  readonly label: string;
  readonly settings: Readonly<Record<string, number>>;
}

const VARIANTS: readonly Variant[] = [
  { name: 'defaults', label: 'server defaults', settings: {} },
  {
    name: 'flush_2',
    label: 'innodb_flush_log_at_trx_commit = 2',
    settings: { innodb_flush_log_at_trx_commit: 2 },
  },
  {
    name: 'pool_1g',
    label: 'innodb_buffer_pool_size = 1 GiB',
    settings: { innodb_buffer_pool_size: 1024 * 1024 * 1024 },
  },
];

const SETTING_NAMES = ['innodb_flush_log_at_trx_commit', 'innodb_buffer_pool_size'] as const;

export async function p13(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, rabbit } = ctx;
  const n = profile.p3Messages;
  const tx = profile.p5Transactions;
  const result = newResult(
    'P13',
    `MariaDB server settings: ${tx.toLocaleString('en-US')} enqueue transactions and a ${n.toLocaleString('en-US')}-message drain per variant`,
  );
  const maria = await openMaria();
  const found = await currentSettings(maria);
  await resetOutboxTable(maria, TABLE);
  const app = await startOutboxApp({
    dataSource: maria,
    tableName: TABLE,
    publisher: rabbitPublisher(QUEUE),
    autoStart: false,
    instanceId: 'bench-p13',
  });
  const enqueueUs: Record<string, number[]> = {};
  const drainRates: Record<string, number[]> = {};
  let problems = 0;
  try {
    await resetQueue(rabbit, QUEUE);
    let seq = 0;
    const order = (m: EntityManager): Promise<BenchOrder> =>
      m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
    const enqueueOne = (): Promise<void> =>
      maria.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        await app.outbox.enqueue(new OrderPlaced(s, keyOf(s), PAD), m);
      });
    for (let run = 1; run <= ctx.runs; run++) {
      for (const variant of VARIANTS) {
        await applySettings(maria, { ...found, ...variant.settings });
        // The enqueue transactions, sequential on one connection: each waits for its commit.
        await truncateOutbox(maria, TABLE);
        for (let i = 0; i < 20; i++) await enqueueOne();
        const t = performance.now();
        for (let i = 0; i < tx; i++) await enqueueOne();
        const us = ((performance.now() - t) / tx) * 1000;
        (enqueueUs[variant.name] ??= []).push(us);
        // The drain, checked at the consumer.
        const drained = await checkedRabbitDrain({
          label: `P13 run ${run} ${variant.name}`,
          log: ctx.log,
          app,
          ds: maria,
          table: TABLE,
          rabbit,
          queue: QUEUE,
          n,
        });
        const rate = drained.msgsPerS;
        problems += drained.problems;
        (drainRates[variant.name] ??= []).push(rate);
        ctx.log(
          `P13 run ${run} ${variant.label}: enqueue transaction ${us.toFixed(0)} µs, drain ${Math.round(rate)} msgs/s`,
        );
      }
    }
  } finally {
    await applySettings(maria, found).catch((error: unknown) =>
      ctx.log(`P13: could not put the server's settings back: ${String(error)}`),
    );
    await app.close();
    await dropOutboxTable(maria, TABLE).catch(() => undefined);
    await rabbit.deleteQueue(QUEUE).catch(() => undefined);
    await closeDataSource(maria);
  }
  const base = {
    enqueue: addMetric(
      result,
      'defaults_enqueue_us',
      'server defaults: order + enqueue transaction',
      'µs',
      enqueueUs.defaults ?? [],
      tx,
    ),
    drain: addMetric(
      result,
      'defaults_drain_msgs_per_s',
      'server defaults: drain to RabbitMQ',
      'msgs/s',
      drainRates.defaults ?? [],
      n,
    ),
  };
  for (const variant of VARIANTS.slice(1)) {
    const e = addMetric(
      result,
      `${variant.name}_enqueue_us`,
      `${variant.label}: order + enqueue transaction`,
      'µs',
      enqueueUs[variant.name] ?? [],
      tx,
    );
    const d = addMetric(
      result,
      `${variant.name}_drain_msgs_per_s`,
      `${variant.label}: drain to RabbitMQ`,
      'msgs/s',
      drainRates[variant.name] ?? [],
      n,
    );
    result.values[`p13_${variant.name}_enqueue_vs_defaults`] = round(
      ratio(e.median, base.enqueue.median),
      3,
    );
    result.values[`p13_${variant.name}_drain_vs_defaults`] = round(
      ratio(d.median, base.drain.median),
      3,
    );
  }
  addTarget(
    result,
    'p13_delivery_problems',
    'duplicates + order violations + missing messages at the consumer, every variant',
    problems,
    '<=',
    0,
  );
  result.values.p13_server_defaults = JSON.stringify(found);
  return result;
}

async function currentSettings(ds: DataSource): Promise<Record<string, number>> {
  const found: Record<string, number> = {};
  for (const name of SETTING_NAMES) {
    const [row] = await ds.query<{ v: string | number }[]>(`SELECT @@GLOBAL.${name} AS v`);
    found[name] = Number(row?.v);
  }
  return found;
}

/** Sets the global settings; names come from SETTING_NAMES, values are checked integers. */
async function applySettings(ds: DataSource, settings: Record<string, number>): Promise<void> {
  for (const name of SETTING_NAMES) {
    const value = settings[name];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value)) throw new Error(`P13: ${name} = ${String(value)}`);
    const [row] = await ds.query<{ v: string | number }[]>(`SELECT @@GLOBAL.${name} AS v`);
    if (Number(row?.v) !== value) await ds.query(`SET GLOBAL ${name} = ${value}`);
  }
  // A buffer pool resize runs in the background: wait until it is done.
  for (let i = 0; i < 600; i++) {
    const [row] = await ds.query<{ v: string }[]>(
      `SELECT VARIABLE_VALUE AS v FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_RESIZE_STATUS'`,
    );
    if (row === undefined || row.v === '' || /complete|finished/i.test(row.v)) return;
    await sleep(100);
  }
}
