/**
 * P5's concurrent pair on PostgreSQL (issue 61): `CLIENTS` business transactions at once, each an
 * order row and one keyed event, against the same transactions writing the event by hand. The
 * module is timed with its wake-up on (the default, `dispatcher.listen`) and off: the wake-up's
 * cost shows under concurrency, where one client alone barely sees it (PostgreSQL serialises the
 * commits of transactions that sent a NOTIFY, WAL flush included).
 */
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { BenchOrder, keyOf, PAD, quoteTable, truncateOutbox } from '../support/databases';
import { OrderPlaced } from '../support/order-placed.event';
import { startOutboxApp } from '../support/outbox-app';
import { addMetric, addTarget, type BenchContext, type ScenarioResult } from '../support/report';
import { pairedBlocks } from '../support/paired-blocks';
import { round, summarise } from '../support/stats';

/** Concurrent clients: the outside benchmark ran 8. */
const CLIENTS = Number(process.env.BENCH_P5_CLIENTS ?? 8);
const BLOCK = 10;

/** Adds `p5_clients_*` to `result`: the module with and without its wake-up ÷ the hand INSERT. */
export async function measureConcurrent(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  table: string,
): Promise<void> {
  const withWake = await startOutboxApp({ dataSource: db, tableName: table, workers: false });
  const without = await startOutboxApp({
    dataSource: db,
    tableName: table,
    workers: false,
    dispatcher: { listen: false },
  });
  const insertOne = `INSERT INTO ${quoteTable(db, table)} (message_id, topic, message_key, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`;
  let seq = 0;
  const order = (m: EntityManager): Promise<BenchOrder> =>
    m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
  const module = (app: typeof withWake) => (): Promise<void> =>
    db.transaction(async (m) => {
      const s = ++seq;
      await order(m);
      await app.outbox.enqueue(new OrderPlaced(s, keyOf(s), PAD), m);
    });
  const hand = (): Promise<void> =>
    db.transaction(async (m) => {
      const s = ++seq;
      await order(m);
      const e = new OrderPlaced(s, keyOf(s), PAD);
      await m.query(insertOne, [
        randomUUID(),
        'orders',
        e.key,
        'order.created',
        JSON.stringify(e),
        '{}',
      ]);
    });
  // One call: CLIENTS transactions at once, each on a connection of the pool.
  const together = (one: () => Promise<void>) => async (): Promise<void> => {
    await Promise.all(Array.from({ length: CLIENTS }, one));
  };
  const rounds = Math.max(BLOCK, Math.round(ctx.profile.p5Transactions / CLIENTS));
  const on = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  const off = { module: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, table);
      const a = await pairedBlocks(together(module(withWake)), together(hand), rounds, BLOCK);
      await truncateOutbox(db, table);
      const b = await pairedBlocks(together(module(without)), together(hand), rounds, BLOCK);
      on.module.push((a.first * 1000) / CLIENTS);
      on.hand.push((a.second * 1000) / CLIENTS);
      on.ratio.push(a.ratio);
      off.module.push((b.first * 1000) / CLIENTS);
      off.ratio.push(b.ratio);
      ctx.log(
        `P5 postgres ${CLIENTS} clients run ${run}: wake-up on ×${a.ratio.toFixed(3)} (${((a.first * 1000) / CLIENTS).toFixed(0)} vs hand ${((a.second * 1000) / CLIENTS).toFixed(0)} µs per transaction), off ×${b.ratio.toFixed(3)}`,
      );
    }
  } finally {
    await withWake.close();
    await without.close();
  }
  const count = rounds * CLIENTS;
  addMetric(
    result,
    'clients_module_us',
    `postgres, ${CLIENTS} clients: order + enqueue(event), wake-up on: µs per transaction (wall ÷ clients)`,
    'µs',
    on.module,
    count,
  );
  addMetric(
    result,
    'clients_module_quiet_us',
    `postgres, ${CLIENTS} clients: order + enqueue(event), listen off: µs per transaction (wall ÷ clients)`,
    'µs',
    off.module,
    count,
  );
  addMetric(
    result,
    'clients_hand_us',
    `postgres, ${CLIENTS} clients: order + hand-written INSERT: µs per transaction (wall ÷ clients)`,
    'µs',
    on.hand,
    count,
  );
  // Reported: the module without its wake-up, what the wake-up's cost is measured against.
  result.values.p5_clients_quiet_vs_hand = round(summarise(off.ratio).median, 3);
  addTarget(
    result,
    'p5_clients_one_vs_hand',
    `postgres, ${CLIENTS} clients: time: order+enqueue (wake-up on) ÷ order+hand INSERT (median of paired blocks)`,
    summarise(on.ratio).median,
    '<=',
    // Issue 61: 1.05 × a hand INSERT's time with the wake-up on.
    1.05,
  );
}
