/**
 * P5: what enqueue() costs inside a business transaction, against the same transaction writing
 * the event with hand-written SQL, on PostgreSQL, MariaDB and SQLite. (a) one order row + one
 * event per transaction; (b) 100 events in one call against a hand-written multi-row INSERT.
 * Sequential transactions on one connection at a time, the variants interleaved in blocks so
 * drift hits both alike. The PostgreSQL figures keep their 0.1 metric names (`p5_…`); the
 * others are `p5_<database>_…`.
 */
import { named } from '../support/config';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { OutboxEvent } from '../../lib';
import { messageIdBytes } from '../../lib/store/message-id-codec';
import {
  BenchOrder,
  PAD,
  closeDataSource,
  dialectOf,
  dropOutboxTable,
  openMaria,
  openSqlite,
  quoteTable,
  keyOf,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import { startOutboxApp } from '../support/outbox-app';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { pairedBlocks } from '../support/paired-blocks';
import { summarise } from '../support/stats';

const TABLE = named('bench_p5');
const BLOCK = 20;

@OutboxEvent({ topic: 'orders', type: 'order.created', key: (e: OrderCreated) => e.key })
class OrderCreated {
  constructor(
    readonly seq: number,
    readonly key: string,
    readonly pad: string,
  ) {}
}

export async function p5(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P5',
    'Enqueue overhead (defaults: ordering on, NOTIFY on), 1 KiB events, on PostgreSQL, MariaDB and SQLite',
  );
  await measureOn(ctx, result, ctx.pg, '');
  for (const open of [openMaria, openSqlite]) {
    const ds = await open();
    try {
      await measureOn(ctx, result, ds, `${dialectOf(ds)}_`);
    } finally {
      await closeDataSource(ds);
    }
  }
  return result;
}

/** P5 on one database; its metric names start with `p5_${prefix}`. */
async function measureOn(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  prefix: string,
): Promise<void> {
  const { profile } = ctx;
  const label = dialectOf(db);
  await resetOutboxTable(db, TABLE);
  const app = await startOutboxApp({ dataSource: db, tableName: TABLE, workers: false });
  const { outbox } = app;
  const mark = (i: number): string => (label === 'postgres' ? `$${i}` : '?');
  const row = (r: number): string =>
    `(${Array.from({ length: 6 }, (_, c) => mark(r * 6 + c + 1)).join(', ')})`;
  const into = `INSERT INTO ${quoteTable(db, TABLE)} (message_id, topic, message_key, event_type, payload, headers) VALUES`;
  const insertOne = `${into} ${row(0)}`;
  const insertMany = `${into} ${Array.from({ length: 100 }, (_, r) => row(r)).join(', ')}`;
  let seq = 0;
  // The id as the table stores it: 16 bytes on MySQL/MariaDB (BINARY(16)), text elsewhere.
  const newId = (): string | Buffer =>
    label === 'mariadb' ? messageIdBytes(randomUUID()) : randomUUID();
  const order = (m: EntityManager): Promise<BenchOrder> =>
    m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
  const variants = {
    oneModule: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        await outbox.enqueue(new OrderCreated(s, keyOf(s), PAD), m);
      });
    },
    oneHand: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        const e = new OrderCreated(s, keyOf(s), PAD);
        await m.query(insertOne, [
          newId(),
          'orders',
          e.key,
          'order.created',
          JSON.stringify(e),
          '{}',
        ]);
      });
    },
    manyModule: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const events = Array.from({ length: 100 }, () => {
          const s = ++seq;
          return new OrderCreated(s, keyOf(s), PAD);
        });
        await outbox.enqueue(events, m);
      });
    },
    manyHand: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const params: unknown[] = [];
        for (let i = 0; i < 100; i++) {
          const s = ++seq;
          const e = new OrderCreated(s, keyOf(s), PAD);
          params.push(newId(), 'orders', e.key, 'order.created', JSON.stringify(e), '{}');
        }
        await m.query(insertMany, params);
      });
    },
  };
  const one = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  const many = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const a = await pairedBlocks(
        variants.oneModule,
        variants.oneHand,
        profile.p5Transactions,
        BLOCK,
      );
      one.module.push(a.first * 1000);
      one.hand.push(a.second * 1000);
      one.ratio.push(a.ratio);
      await truncateOutbox(db, TABLE);
      const b = await pairedBlocks(variants.manyHand, variants.manyModule, profile.p5Batches, 5);
      many.module.push(b.second * 1000);
      many.hand.push(b.first * 1000);
      many.ratio.push(b.ratio);
      ctx.log(
        `P5 ${label} run ${run}: one event ${(a.first * 1000).toFixed(0)} µs vs hand ${(a.second * 1000).toFixed(0)} µs (paired ×${a.ratio.toFixed(3)}); 100 events ${(b.second * 1000).toFixed(0)} µs vs hand ${(b.first * 1000).toFixed(0)} µs (paired throughput ×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await app.close();
    await dropOutboxTable(db, TABLE);
  }
  addMetric(
    result,
    `${prefix}one_module_us`,
    `${label}: order + enqueue(event): µs per transaction`,
    'µs',
    one.module,
    profile.p5Transactions,
  );
  addMetric(
    result,
    `${prefix}one_hand_us`,
    `${label}: order + hand-written INSERT: µs per transaction`,
    'µs',
    one.hand,
    profile.p5Transactions,
  );
  addMetric(
    result,
    `${prefix}many_module_us`,
    `${label}: enqueue(100 events): µs per transaction`,
    'µs',
    many.module,
    profile.p5Batches,
  );
  addMetric(
    result,
    `${prefix}many_hand_us`,
    `${label}: hand-written 100-row INSERT: µs per transaction`,
    'µs',
    many.hand,
    profile.p5Batches,
  );
  addTarget(
    result,
    `p5_${prefix}one_vs_hand`,
    `${label}: time: order+enqueue ÷ order+hand INSERT (median of paired blocks)`,
    summarise(one.ratio).median,
    '<=',
    // Issue 16: an enqueue within 1.10 × a hand-written INSERT of the same row.
    1.1,
  );
  addTarget(
    result,
    `p5_${prefix}batch_vs_hand`,
    `${label}: throughput: enqueue(100) ÷ hand multi-row INSERT (paired blocks)`,
    summarise(many.ratio).median,
    '>=',
    // The same 1.10 × in time, as a throughput ratio (1 / 1.10).
    0.91,
  );
}
