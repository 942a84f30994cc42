/**
 * P18: what a message costs the enqueuing transaction under `delivery: 'external'` (Debezium),
 * for the two ways of keeping the table small: rows kept and deleted later by age (what the module
 * does: the enqueue is unchanged), against the row deleted again in the same transaction (what
 * Debezium's documentation suggests: the log keeps the INSERT, the table stays empty). One order
 * row + one 1 KiB event per transaction, sequential on one connection, the two variants
 * interleaved in paired blocks, on PostgreSQL and MariaDB. A figure to choose by, not a target.
 */
import type { DataSource, EntityManager } from 'typeorm';
import { messageIdBytes } from '../../lib/store/rows/message-id-codec';
import { named } from '../support/config';
import {
  BenchOrder,
  dialectOf,
  dropOutboxTable,
  keyOf,
  onPostgresAndMaria,
  PAD,
  quoteTable,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { OrderPlaced } from '../support/order-placed.event';
import { startOutboxApp } from '../support/outbox-app';
import { pairedBlocks } from '../support/paired-blocks';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';

const TABLE = named('bench_p18');
const BLOCK = 20;

export async function p18(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P18',
    "delivery 'external': enqueue (rows deleted later by age) vs enqueue + DELETE in the same transaction, 1 KiB events",
  );
  await onPostgresAndMaria(ctx.pg, (db) => measureOn(ctx, result, db));
  return result;
}

async function measureOn(ctx: BenchContext, result: ScenarioResult, db: DataSource): Promise<void> {
  const label = dialectOf(db);
  await resetOutboxTable(db, TABLE);
  const app = await startOutboxApp({
    dataSource: db,
    tableName: TABLE,
    workers: false,
    delivery: 'external',
  });
  const { outbox } = app;
  const deleteOne = `DELETE FROM ${quoteTable(db, TABLE)} WHERE message_id = ${label === 'postgres' ? '$1' : '?'}`;
  // The id as the table binds it: 16 bytes on MariaDB (BINARY(16)), the UUID text on PostgreSQL.
  const bound = (id: string): string | Buffer => (label === 'mariadb' ? messageIdBytes(id) : id);
  let seq = 0;
  const enqueue = async (m: EntityManager): Promise<string> => {
    const s = ++seq;
    await m.save(BenchOrder, m.create(BenchOrder, { customer: `c${s % 97}`, total: s }));
    return outbox.enqueue(new OrderPlaced(s, keyOf(s), PAD), m);
  };
  const kept = async (): Promise<void> => {
    await db.transaction(async (m) => {
      await enqueue(m);
    });
  };
  const deleted = async (): Promise<void> => {
    await db.transaction(async (m) => {
      await m.query(deleteOne, [bound(await enqueue(m))]);
    });
  };
  const times = { kept: [] as number[], deleted: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const r = await pairedBlocks(deleted, kept, ctx.profile.p5Transactions, BLOCK);
      times.deleted.push(r.first * 1000);
      times.kept.push(r.second * 1000);
      times.ratio.push(r.ratio);
      ctx.log(
        `P18 ${label} run ${run}: enqueue ${(r.second * 1000).toFixed(0)} µs, enqueue + delete ${(r.first * 1000).toFixed(0)} µs (paired ×${r.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await app.close();
    await dropOutboxTable(db, TABLE);
  }
  const n = ctx.profile.p5Transactions;
  addMetric(
    result,
    `${label}_kept_us`,
    `${label}: order + enqueue: µs per transaction`,
    'µs',
    times.kept,
    n,
  );
  addMetric(
    result,
    `${label}_deleted_us`,
    `${label}: order + enqueue + DELETE of the row: µs per transaction`,
    'µs',
    times.deleted,
    n,
  );
  result.values[`p18_${label}_deleted_vs_kept`] = round(summarise(times.ratio).median, 3);
}
