/**
 * P5: what enqueue() costs inside a business transaction, against the same transaction writing
 * the event with hand-written SQL. (a) one order row + one event per transaction; (b) 100 events
 * in one call against a hand-written multi-row INSERT. Sequential transactions on one connection
 * at a time, the variants interleaved in blocks so drift hits both alike.
 */
import { named } from '../support/config';
import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { OutboxEvent } from '../../lib';
import {
  BenchOrder,
  PAD,
  dropOutboxTable,
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
import { percentile, summarise } from '../support/stats';

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
  const { profile, pg } = ctx;
  const result = newResult(
    'P5',
    'Enqueue overhead on PostgreSQL (defaults: ordering on, NOTIFY on), 1 KiB events',
  );
  await resetOutboxTable(pg, TABLE);
  const app = await startOutboxApp({ dataSource: pg, tableName: TABLE, workers: false });
  const { outbox } = app;
  const insertOne = `INSERT INTO "${TABLE}" (message_id, topic, message_key, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`;
  const insertMany = `INSERT INTO "${TABLE}" (message_id, topic, message_key, event_type, payload, headers) VALUES ${Array.from({ length: 100 }, (_, i) => `($${i * 6 + 1}, $${i * 6 + 2}, $${i * 6 + 3}, $${i * 6 + 4}, $${i * 6 + 5}, $${i * 6 + 6})`).join(', ')}`;
  let seq = 0;
  const order = (m: EntityManager): Promise<BenchOrder> =>
    m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
  const variants = {
    oneModule: async (): Promise<void> => {
      await pg.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        await outbox.enqueue(new OrderCreated(s, keyOf(s), PAD), m);
      });
    },
    oneHand: async (): Promise<void> => {
      await pg.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        const e = new OrderCreated(s, keyOf(s), PAD);
        await m.query(insertOne, [
          randomUUID(),
          'orders',
          e.key,
          'order.created',
          JSON.stringify(e),
          '{}',
        ]);
      });
    },
    manyModule: async (): Promise<void> => {
      await pg.transaction(async (m) => {
        const events = Array.from({ length: 100 }, () => {
          const s = ++seq;
          return new OrderCreated(s, keyOf(s), PAD);
        });
        await outbox.enqueue(events, m);
      });
    },
    manyHand: async (): Promise<void> => {
      await pg.transaction(async (m) => {
        const params: unknown[] = [];
        for (let i = 0; i < 100; i++) {
          const s = ++seq;
          const e = new OrderCreated(s, keyOf(s), PAD);
          params.push(randomUUID(), 'orders', e.key, 'order.created', JSON.stringify(e), '{}');
        }
        await m.query(insertMany, params);
      });
    },
  };
  type Name = keyof typeof variants;
  /** Mean milliseconds per transaction of each variant, interleaving blocks of BLOCK (or fewer). */
  /**
   * Mean milliseconds per transaction of two variants, run in alternating blocks (ABBA order, so
   * neither always goes first), and the median over blocks of the paired ratio first ÷ second.
   */
  const measure = async (
    [first, second]: [Name, Name],
    total: number,
    block: number,
  ): Promise<{ first: number; second: number; ratio: number }> => {
    for (const name of [first, second])
      for (let i = 0; i < Math.min(block, 20); i++) await variants[name](); // warm-up
    const timeBlock = async (name: Name): Promise<number> => {
      const t = performance.now();
      for (let i = 0; i < block; i++) await variants[name]();
      return performance.now() - t;
    };
    let a = 0;
    let b = 0;
    const ratios: number[] = [];
    for (let done = 0, k = 0; done < total; done += block, k++) {
      let ta: number;
      let tb: number;
      if (k % 2 === 0) {
        ta = await timeBlock(first);
        tb = await timeBlock(second);
      } else {
        tb = await timeBlock(second);
        ta = await timeBlock(first);
      }
      a += ta;
      b += tb;
      ratios.push(ta / tb);
    }
    const count = Math.ceil(total / block) * block;
    return {
      first: a / count,
      second: b / count,
      ratio: percentile(
        [...ratios].sort((x, y) => x - y),
        50,
      ),
    };
  };

  const one = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  const many = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(pg, TABLE);
      const a = await measure(['oneModule', 'oneHand'], profile.p5Transactions, BLOCK);
      one.module.push(a.first * 1000);
      one.hand.push(a.second * 1000);
      one.ratio.push(a.ratio);
      await truncateOutbox(pg, TABLE);
      const b = await measure(['manyHand', 'manyModule'], profile.p5Batches, 5);
      many.module.push(b.second * 1000);
      many.hand.push(b.first * 1000);
      many.ratio.push(b.ratio);
      ctx.log(
        `P5 run ${run}: one event ${(a.first * 1000).toFixed(0)} µs vs hand ${(a.second * 1000).toFixed(0)} µs (paired ×${a.ratio.toFixed(3)}); 100 events ${(b.second * 1000).toFixed(0)} µs vs hand ${(b.first * 1000).toFixed(0)} µs (paired throughput ×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await app.close();
    await dropOutboxTable(pg, TABLE);
  }
  addMetric(
    result,
    'one_module_us',
    'order + enqueue(event): µs per transaction',
    'µs',
    one.module,
    profile.p5Transactions,
  );
  addMetric(
    result,
    'one_hand_us',
    'order + hand-written INSERT: µs per transaction',
    'µs',
    one.hand,
    profile.p5Transactions,
  );
  addMetric(
    result,
    'many_module_us',
    'enqueue(100 events): µs per transaction',
    'µs',
    many.module,
    profile.p5Batches,
  );
  addMetric(
    result,
    'many_hand_us',
    'hand-written 100-row INSERT: µs per transaction',
    'µs',
    many.hand,
    profile.p5Batches,
  );
  addTarget(
    result,
    'p5_one_vs_hand',
    'time: order+enqueue ÷ order+hand INSERT (median of paired blocks)',
    summarise(one.ratio).median,
    '<=',
    1.15,
  );
  addTarget(
    result,
    'p5_batch_vs_hand',
    'throughput: enqueue(100) ÷ hand multi-row INSERT (paired blocks)',
    summarise(many.ratio).median,
    '>=',
    0.8,
  );
  return result;
}
