/**
 * P12: what the table partitioned by day (docs/partitioning.md) costs an enqueue, against the
 * plain table, on PostgreSQL and MariaDB: (a) a transaction saving one order row + enqueue(one
 * event); (b) enqueue(100 events) in one transaction. Two apps without workers, one per table,
 * their transactions timed in paired, interleaved blocks as in P5. Generated ids, so the
 * partitioned table's id guard is not written (it is for idempotent enqueues only).
 */
import type { DataSource, EntityManager } from 'typeorm';
import { type OutboxService } from '../../lib';
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
import { startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { pairedBlocks } from '../support/paired-blocks';
import { resetPartitionedTable } from '../support/partitions';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { summarise } from '../support/stats';

const PLAIN = named('bench_p12_plain');
const PARTITIONED = named('bench_p12_part');
const BLOCK = 20;
const BATCH_BLOCK = 5;

export async function p12(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P12',
    'Enqueue into the table partitioned by day vs the plain table (defaults: ordering on, NOTIFY on), 1 KiB events, on PostgreSQL and MariaDB',
  );
  await onPostgresAndMaria(ctx.pg, (db) => measureOn(ctx, result, db));
  return result;
}

/** P12 on one database; its metric names start with the dialect's name. */
async function measureOn(ctx: BenchContext, result: ScenarioResult, db: DataSource): Promise<void> {
  const { profile } = ctx;
  const label = dialectOf(db);
  const apps: OutboxApp[] = [];
  const one = { plain: [] as number[], part: [] as number[], ratio: [] as number[] };
  const many = { plain: [] as number[], part: [] as number[], ratio: [] as number[] };
  try {
    await resetOutboxTable(db, PLAIN);
    await resetPartitionedTable(db, PARTITIONED);
    const plainApp = await startOutboxApp({ dataSource: db, tableName: PLAIN, workers: false });
    apps.push(plainApp);
    const partApp = await startOutboxApp({
      dataSource: db,
      tableName: PARTITIONED,
      workers: false,
      partitioning: { interval: 'day', premake: 1 },
    });
    apps.push(partApp);

    let seq = 0;
    const event = (): OrderPlaced => {
      const s = ++seq;
      return new OrderPlaced(s, keyOf(s), PAD);
    };
    const oneEvent = (outbox: OutboxService) => async (): Promise<void> => {
      await db.transaction(async (m: EntityManager) => {
        await m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
        await outbox.enqueue(event(), m);
      });
    };
    const hundredEvents = (outbox: OutboxService) => async (): Promise<void> => {
      await db.transaction(async (m: EntityManager) => {
        await outbox.enqueue(
          Array.from({ length: 100 }, () => event()),
          m,
        );
      });
    };
    const truncateBoth = async (): Promise<void> => {
      await truncateOutbox(db, PLAIN);
      await truncateOutbox(db, PARTITIONED);
    };

    for (let run = 1; run <= ctx.runs; run++) {
      await truncateBoth();
      const a = await pairedBlocks(
        oneEvent(partApp.outbox),
        oneEvent(plainApp.outbox),
        profile.p12Transactions,
        BLOCK,
      );
      one.part.push(a.first * 1000);
      one.plain.push(a.second * 1000);
      one.ratio.push(a.ratio);
      await truncateBoth();
      const b = await pairedBlocks(
        hundredEvents(partApp.outbox),
        hundredEvents(plainApp.outbox),
        profile.p12Batches,
        BATCH_BLOCK,
      );
      many.part.push(b.first * 1000);
      many.plain.push(b.second * 1000);
      many.ratio.push(b.ratio);
      ctx.log(
        `P12 ${label} run ${run}: one event ${(a.first * 1000).toFixed(0)} µs partitioned vs ${(a.second * 1000).toFixed(0)} µs plain (paired ×${a.ratio.toFixed(3)}); 100 events ${(b.first * 1000).toFixed(0)} µs vs ${(b.second * 1000).toFixed(0)} µs (paired ×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    for (const app of apps) await app.close();
    await dropOutboxTable(db, PLAIN);
    await dropOutboxTable(db, PARTITIONED);
  }
  addMetric(
    result,
    `${label}_one_plain_us`,
    `${label}: order + enqueue(event), plain table`,
    'µs',
    one.plain,
    profile.p12Transactions,
  );
  addMetric(
    result,
    `${label}_one_part_us`,
    `${label}: order + enqueue(event), partitioned`,
    'µs',
    one.part,
    profile.p12Transactions,
  );
  addMetric(
    result,
    `${label}_many_plain_us`,
    `${label}: enqueue(100 events), plain table`,
    'µs',
    many.plain,
    profile.p12Batches,
  );
  addMetric(
    result,
    `${label}_many_part_us`,
    `${label}: enqueue(100 events), partitioned`,
    'µs',
    many.part,
    profile.p12Batches,
  );
  addTarget(
    result,
    `p12_${label}_one_part_vs_plain`,
    `${label}: time: order+enqueue, partitioned ÷ plain (median of paired blocks)`,
    summarise(one.ratio).median,
    '<=',
    1.1,
  );
  addTarget(
    result,
    `p12_${label}_batch_part_vs_plain`,
    `${label}: time: enqueue(100), partitioned ÷ plain (median of paired blocks)`,
    summarise(many.ratio).median,
    '<=',
    1.1,
  );
}
