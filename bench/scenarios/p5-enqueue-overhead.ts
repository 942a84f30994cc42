/**
 * P5: what enqueue() costs inside a business transaction, against the same transaction writing
 * the event with hand-written SQL, on PostgreSQL, MariaDB and SQLite. (a) one order row + one
 * event per transaction; (b) 100 events in one call against a hand-written multi-row INSERT.
 * Sequential transactions on one connection at a time, the variants interleaved in blocks so
 * drift hits both alike. The PostgreSQL figures keep their 0.1 metric names (`p5_…`); the
 * others are `p5_<database>_…`. On MariaDB, where the key lock is a statement of its own for a
 * call with several keys, the module is also paired with the hand-written SQL under the same key
 * locks (`…_vs_hand_locked`, reported): what the order promise costs the database, apart from
 * what the module adds to it.
 */
import { named } from '../support/config';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { OutboxEvent } from '../../lib';
import { messageIdBytes } from '../../lib/store/rows/message-id-codec';
import { sortedKeyLocks } from '../../lib/store/rows/outbox-row.mapper';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
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
import { measureConcurrent } from './p5-concurrent-enqueue';
import { round, summarise } from '../support/stats';

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
  await resetOutboxTable(ctx.pg, TABLE);
  try {
    await measureConcurrent(ctx, result, ctx.pg, TABLE);
  } finally {
    await dropOutboxTable(ctx.pg, TABLE);
  }
  // BENCH_P5_DATABASES=postgres: PostgreSQL's pairs only.
  const others = (process.env.BENCH_P5_DATABASES ?? 'postgres,mariadb,sqlite').split(',');
  for (const open of [openMaria, openSqlite].filter((_, i) =>
    others.includes(['mariadb', 'sqlite'][i] ?? ''),
  )) {
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
  // MariaDB's key lock as the module takes it, written by hand: one event's row comes out of the
  // locking read of its key's bucket (one statement); 100 events lock their buckets, sorted, in
  // one statement before the multi-row INSERT.
  const lockTable = quoteTable(db, `${TABLE}_key_lock`);
  const insertOneLocked = `INSERT INTO ${quoteTable(db, TABLE)} (message_id, topic, message_key, event_type, payload, headers)
SELECT ?, ?, ?, ?, ?, ? FROM ${lockTable} WHERE bucket = ? FOR UPDATE`;
  const lockBuckets = (keys: readonly string[]): [string, number[]] => {
    const buckets = sortedKeyLocks(keys, MYSQL_KEY_LOCK_BUCKETS);
    return [
      `SELECT COUNT(*) AS locked FROM ${lockTable} WHERE bucket IN (${buckets.map(() => '?').join(', ')}) FOR UPDATE`,
      buckets,
    ];
  };
  let seq = 0;
  // The id as the table stores it: 16 bytes on MySQL/MariaDB (BINARY(16)), text elsewhere.
  const newId = (): string | Buffer =>
    label === 'mariadb' ? messageIdBytes(randomUUID()) : randomUUID();
  const order = (m: EntityManager): Promise<BenchOrder> =>
    m.save(BenchOrder, m.create(BenchOrder, { customer: `c${seq % 97}`, total: seq }));
  // A hand-written row's values, as the module writes them, appended to `params`; 100 of them
  // with their keys (pushed straight into one array, as a hand-written batch would be).
  const pushRow = (params: unknown[], e: OrderCreated): void => {
    params.push(newId(), 'orders', e.key, 'order.created', JSON.stringify(e), '{}');
  };
  const handRow = (e: OrderCreated): unknown[] => {
    const params: unknown[] = [];
    pushRow(params, e);
    return params;
  };
  const handBatch = (): { params: unknown[]; keys: string[] } => {
    const params: unknown[] = [];
    const keys: string[] = [];
    for (let i = 0; i < 100; i++) {
      const s = ++seq;
      const e = new OrderCreated(s, keyOf(s), PAD);
      keys.push(e.key);
      pushRow(params, e);
    }
    return { params, keys };
  };
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
        await m.query(insertOne, handRow(new OrderCreated(s, keyOf(s), PAD)));
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
        await m.query(insertMany, handBatch().params);
      });
    },
    oneHandLocked: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const s = ++seq;
        await order(m);
        const e = new OrderCreated(s, keyOf(s), PAD);
        const [bucket] = sortedKeyLocks([e.key], MYSQL_KEY_LOCK_BUCKETS);
        const result: unknown = await m.query(insertOneLocked, [...handRow(e), bucket]);
        if ((result as { affectedRows?: number }).affectedRows !== 1)
          throw new Error('P5: the hand-written locked insert wrote no row');
      });
    },
    manyHandLocked: async (): Promise<void> => {
      await db.transaction(async (m) => {
        const { params, keys } = handBatch();
        const [lock, buckets] = lockBuckets(keys);
        await m.query(lock, buckets);
        await m.query(insertMany, params);
      });
    },
  };
  const locked = label === 'mariadb';
  // One event: the module first, its time ÷ the hand-written one's. 100 events: the hand-written
  // call first, its time ÷ the module's (a throughput ratio).
  const pairOne = (hand: () => Promise<void>) =>
    pairedBlocks(variants.oneModule, hand, profile.p5Transactions, BLOCK);
  const pairMany = (hand: () => Promise<void>) =>
    pairedBlocks(hand, variants.manyModule, profile.p5Batches, 5);
  const one = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  const many = { module: [] as number[], hand: [] as number[], ratio: [] as number[] };
  const oneLocked = { hand: [] as number[], ratio: [] as number[] };
  const manyLocked = { hand: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const a = await pairOne(variants.oneHand);
      one.module.push(a.first * 1000);
      one.hand.push(a.second * 1000);
      one.ratio.push(a.ratio);
      await truncateOutbox(db, TABLE);
      const b = await pairMany(variants.manyHand);
      many.module.push(b.second * 1000);
      many.hand.push(b.first * 1000);
      many.ratio.push(b.ratio);
      if (locked) {
        await truncateOutbox(db, TABLE);
        const c = await pairOne(variants.oneHandLocked);
        oneLocked.hand.push(c.second * 1000);
        oneLocked.ratio.push(c.ratio);
        await truncateOutbox(db, TABLE);
        const d = await pairMany(variants.manyHandLocked);
        manyLocked.hand.push(d.first * 1000);
        manyLocked.ratio.push(d.ratio);
        ctx.log(
          `P5 ${label} run ${run}, under the same key locks: one event paired ×${c.ratio.toFixed(3)} (hand ${(c.second * 1000).toFixed(0)} µs); 100 events paired throughput ×${d.ratio.toFixed(3)} (hand ${(d.first * 1000).toFixed(0)} µs)`,
        );
      }
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
  if (locked) {
    addMetric(
      result,
      `${prefix}one_hand_locked_us`,
      `${label}: order + hand-written INSERT under the key's lock: µs per transaction`,
      'µs',
      oneLocked.hand,
      profile.p5Transactions,
    );
    addMetric(
      result,
      `${prefix}many_hand_locked_us`,
      `${label}: hand-written key locks + 100-row INSERT: µs per transaction`,
      'µs',
      manyLocked.hand,
      profile.p5Batches,
    );
    // Reported, not targets: the targets compare with the INSERT alone.
    result.values[`p5_${prefix}one_vs_hand_locked`] = round(summarise(oneLocked.ratio).median, 3);
    result.values[`p5_${prefix}batch_vs_hand_locked`] = round(
      summarise(manyLocked.ratio).median,
      3,
    );
  }
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
