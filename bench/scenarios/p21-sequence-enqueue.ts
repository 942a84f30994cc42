/**
 * P21: what `ordering.sequence` costs the enqueuing transaction: one order row and one keyed
 * 1 KiB event per transaction, the module with the sequence on against the same module with it
 * off, sequential on one connection, the two interleaved in paired blocks on one table, on
 * PostgreSQL and MariaDB; then the same with 8 clients at once on 8 hot keys, where writers of a
 * key wait for each other's commit (the key lock the enqueue takes anyway, and now the counter's
 * row). A figure to choose by, not a target.
 */
import type { DataSource, EntityManager } from 'typeorm';
import { named } from '../support/config';
import {
  BenchOrder,
  dialectOf,
  dropOutboxTable,
  keyOf,
  onPostgresAndMaria,
  PAD,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { OrderPlaced } from '../support/order-placed.event';
import { startOutboxApp } from '../support/outbox-app';
import { pairedBlocks } from '../support/paired-blocks';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';

const TABLE = named('bench_p21');
const BLOCK = 20;
const CLIENTS = 8;
const HOT_KEYS = 8;

export async function p21(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P21',
    'ordering.sequence: enqueue with per-key sequence numbers vs without, 1 KiB keyed events',
  );
  await onPostgresAndMaria(ctx.pg, (db) => measureOn(ctx, result, db));
  return result;
}

async function measureOn(ctx: BenchContext, result: ScenarioResult, db: DataSource): Promise<void> {
  const label = dialectOf(db);
  await resetOutboxTable(db, TABLE);
  const numbered = await startOutboxApp({
    dataSource: db,
    tableName: TABLE,
    workers: false,
    ordering: { sequence: true },
  });
  const plain = await startOutboxApp({ dataSource: db, tableName: TABLE, workers: false });
  let seq = 0;
  const one = (app: typeof plain, key: (s: number) => string) => async (): Promise<void> => {
    await db.transaction(async (m: EntityManager) => {
      const s = ++seq;
      await m.save(BenchOrder, m.create(BenchOrder, { customer: `c${s % 97}`, total: s }));
      await app.outbox.enqueue(new OrderPlaced(s, key(s), PAD), m);
    });
  };
  const together = (call: () => Promise<void>) => async (): Promise<void> => {
    await Promise.all(Array.from({ length: CLIENTS }, call));
  };
  const hot = (s: number): string => `hot-${s % HOT_KEYS}`;
  const solo = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  const busy = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  // A quarter of P5's transactions per variant: the whole scenario stays within about 3 minutes.
  const n = Math.max(BLOCK * 2, Math.round(ctx.profile.p5Transactions / 4));
  const rounds = Math.max(BLOCK, Math.round(n / CLIENTS));
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const a = await pairedBlocks(one(numbered, keyOf), one(plain, keyOf), n, BLOCK);
      solo.on.push(a.first * 1000);
      solo.off.push(a.second * 1000);
      solo.ratio.push(a.ratio);
      await truncateOutbox(db, TABLE);
      const b = await pairedBlocks(
        together(one(numbered, hot)),
        together(one(plain, hot)),
        rounds,
        BLOCK,
      );
      busy.on.push((b.first * 1000) / CLIENTS);
      busy.off.push((b.second * 1000) / CLIENTS);
      busy.ratio.push(b.ratio);
      ctx.log(
        `P21 ${label} run ${run}: one client ${(a.first * 1000).toFixed(0)} vs ${(a.second * 1000).toFixed(0)} µs (×${a.ratio.toFixed(3)}); ${CLIENTS} clients on ${HOT_KEYS} keys ${((b.first * 1000) / CLIENTS).toFixed(0)} vs ${((b.second * 1000) / CLIENTS).toFixed(0)} µs (×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await numbered.close();
    await plain.close();
    await dropOutboxTable(db, TABLE);
  }
  addMetric(
    result,
    `${label}_on_us`,
    `${label}: order + enqueue, sequence on: µs per transaction`,
    'µs',
    solo.on,
    n,
  );
  addMetric(
    result,
    `${label}_off_us`,
    `${label}: order + enqueue, sequence off: µs per transaction`,
    'µs',
    solo.off,
    n,
  );
  result.values[`p21_${label}_on_vs_off`] = round(summarise(solo.ratio).median, 3);
  const count = rounds * CLIENTS;
  addMetric(
    result,
    `${label}_clients_on_us`,
    `${label}, ${CLIENTS} clients on ${HOT_KEYS} keys, sequence on: µs per transaction (wall ÷ clients)`,
    'µs',
    busy.on,
    count,
  );
  addMetric(
    result,
    `${label}_clients_off_us`,
    `${label}, ${CLIENTS} clients on ${HOT_KEYS} keys, sequence off: µs per transaction (wall ÷ clients)`,
    'µs',
    busy.off,
    count,
  );
  result.values[`p21_${label}_clients_on_vs_off`] = round(summarise(busy.ratio).median, 3);
}
