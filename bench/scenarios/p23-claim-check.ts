/**
 * P23: what the claim check costs (docs/claim-check.md), beside the same work without it, on
 * PostgreSQL. At enqueue: an order row and one keyed event per transaction, the module with
 * `claimCheck` against the same module without, in paired blocks, for a 64 KiB payload (over the
 * 32 KiB threshold: marked at enqueue) and a 1 KiB one (under it: only its size is compared). At
 * delivery: a backlog of 64 KiB messages drained to RabbitMQ by `RabbitMqPublisher` without the
 * claim check, with the table store (the payload written to `<table>_claim_checks` at publish)
 * and with the S3 store (s3rver, an S3-compatible server from npm, on this machine); every message
 * counted in the queue, and each message id's confirmed publishes counted (a copy is a duplicate).
 * At the consumer: `claimCheckPayload` per message as the broker got it (the reference read back
 * from the store), against the same call on the messages sent whole (their body only parsed).
 * A figure to choose by, not a target.
 */
import { S3Client } from '@aws-sdk/client-s3';
import type { DataSource, EntityManager } from 'typeorm';
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';
import { tableClaimCheckStore } from '../../lib/claim-check';
import { claimCheckPayload } from '../../lib/inbox';
import { s3ClaimCheckStore } from '../../lib/integrations/s3';
import type { OutboxClaimCheckOptions } from '../../lib/claim-check';
import { createBucket, startS3rver } from '../../test/support/transports/s3';
import { named } from '../support/config';
import {
  BenchOrder,
  dropOutboxTable,
  keyOf,
  resetOutboxTable,
  truncateOutbox,
} from '../support/databases';
import {
  connectPublisher,
  drainAll,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from '../support/outbox-app';
import { pairedBlocks } from '../support/paired-blocks';
import { purgeQueue, queueDepth, resetQueue } from '../support/rabbit';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';

const TABLE = named('bench_p23');
const QUEUE = named('bench.p23', '.');
const BLOCK = 20;
const THRESHOLD = 32 * 1024;
const LARGE = 'y'.repeat(64 * 1024);
const SMALL = 'y'.repeat(1024);

type Variant = 'off' | 'table' | 's3';

export async function p23(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P23',
    'Claim check: enqueue and delivery of 64 KiB payloads with it (table store, S3) vs without, PostgreSQL → RabbitMQ',
  );
  const s3 = await startS3rver();
  const client = new S3Client(s3.config());
  try {
    const bucket = await createBucket(client);
    const stores: Record<Exclude<Variant, 'off'>, OutboxClaimCheckOptions> = {
      table: { store: tableClaimCheckStore(), thresholdBytes: THRESHOLD },
      s3: { store: s3ClaimCheckStore({ client, bucket }), thresholdBytes: THRESHOLD },
    };
    await enqueueCost(ctx, result, ctx.pg, stores.table);
    await deliveryCost(ctx, result, ctx.pg, stores);
  } finally {
    client.destroy();
    await s3.stop();
  }
  return result;
}

async function enqueueCost(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  claimCheck: OutboxClaimCheckOptions,
): Promise<void> {
  await resetOutboxTable(db, TABLE);
  const on = await startOutboxApp({ dataSource: db, tableName: TABLE, workers: false, claimCheck });
  const off = await startOutboxApp({ dataSource: db, tableName: TABLE, workers: false });
  let seq = 0;
  const one = (app: OutboxApp, pad: string) => async (): Promise<void> => {
    await db.transaction(async (m: EntityManager) => {
      const s = ++seq;
      await m.save(BenchOrder, m.create(BenchOrder, { customer: `c${s % 97}`, total: s }));
      await app.outbox.enqueue(
        { topic: 'bench.p23', key: keyOf(s), type: 'bench.report', payload: { seq: s, pad } },
        m,
      );
    });
  };
  const n = Math.max(BLOCK * 2, Math.round(ctx.profile.p5Transactions / 4));
  const large = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  const small = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const a = await pairedBlocks(one(on, LARGE), one(off, LARGE), n, BLOCK);
      large.on.push(a.first * 1000);
      large.off.push(a.second * 1000);
      large.ratio.push(a.ratio);
      await truncateOutbox(db, TABLE);
      const b = await pairedBlocks(one(on, SMALL), one(off, SMALL), n, BLOCK);
      small.on.push(b.first * 1000);
      small.off.push(b.second * 1000);
      small.ratio.push(b.ratio);
      ctx.log(
        `P23 enqueue run ${run}: 64 KiB ${(a.first * 1000).toFixed(0)} vs ${(a.second * 1000).toFixed(0)} µs (×${a.ratio.toFixed(3)}); 1 KiB ${(b.first * 1000).toFixed(0)} vs ${(b.second * 1000).toFixed(0)} µs (×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await on.close();
    await off.close();
    await dropOutboxTable(db, TABLE);
  }
  addMetric(
    result,
    'enqueue_large_on_us',
    'order + 64 KiB enqueue, claim check on: µs per transaction',
    'µs',
    large.on,
    n,
  );
  addMetric(
    result,
    'enqueue_large_off_us',
    'order + 64 KiB enqueue, claim check off: µs per transaction',
    'µs',
    large.off,
    n,
  );
  addMetric(
    result,
    'enqueue_small_on_us',
    'order + 1 KiB enqueue (under the threshold), claim check on: µs per transaction',
    'µs',
    small.on,
    n,
  );
  addMetric(
    result,
    'enqueue_small_off_us',
    'order + 1 KiB enqueue, claim check off: µs per transaction',
    'µs',
    small.off,
    n,
  );
  result.values.p23_enqueue_large_on_vs_off = round(summarise(large.ratio).median, 3);
  result.values.p23_enqueue_small_on_vs_off = round(summarise(small.ratio).median, 3);
}

/**
 * The app's publisher under the claim check: it sees each message as the broker gets it (a
 * reference in place of a large payload), keeps it for the consumer's part, and counts each
 * message id's confirmed publishes.
 */
class Keeping implements OutboxPublisher {
  readonly kept: OutboxRecord[] = [];
  readonly confirmed = new Map<string, number>();
  constructor(private readonly inner: OutboxPublisher) {}
  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes = await this.inner.publish(messages, signal);
    messages.forEach((m, i) => {
      if (outcomes[i]?.ok !== true || m.topic !== 'bench.p23') return;
      this.kept.push(m);
      this.confirmed.set(m.messageId, (this.confirmed.get(m.messageId) ?? 0) + 1);
    });
    return outcomes;
  }
  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }
}

async function deliveryCost(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  stores: Record<Exclude<Variant, 'off'>, OutboxClaimCheckOptions>,
): Promise<void> {
  const n = Math.max(300, Math.round(ctx.profile.p1Messages / 40));
  const rates: Record<Variant, number[]> = { off: [], table: [], s3: [] };
  const duplicates: Record<Variant, number[]> = { off: [], table: [], s3: [] };
  const reads: Record<Variant, number[]> = { off: [], table: [], s3: [] };
  // A consumer's table store reads the producer's database (the producer's writes only).
  const consumerTable = tableClaimCheckStore({ dataSource: db, tableName: TABLE });
  await resetQueue(ctx.rabbit, QUEUE);
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      for (const variant of ['off', 'table', 's3'] as const) {
        await resetOutboxTable(db, TABLE);
        await purgeQueue(ctx.rabbit, QUEUE);
        // Enqueued by an app without workers (the same rows whatever the variant, marked when
        // the variant has the claim check), drained by another.
        const claimCheck = variant === 'off' ? {} : { claimCheck: stores[variant] };
        const writer = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          workers: false,
          ...claimCheck,
        });
        for (let from = 0; from < n; from += 100) {
          await db.transaction(async (m: EntityManager) => {
            const batch = Array.from({ length: Math.min(100, n - from) }, (_, i) => ({
              topic: 'bench.p23',
              key: keyOf(from + i + 1),
              type: 'bench.report',
              payload: { seq: from + i + 1, pad: LARGE },
            }));
            await writer.outbox.enqueue(batch, m);
          });
        }
        await writer.close();
        const publisher = new Keeping(rabbitPublisher(QUEUE));
        const app = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          publisher,
          autoStart: false,
          // The store's writes count against each batch's publish time: batches of 100 keep a
          // drain of large payloads well within it, for the three variants alike.
          dispatcher: { batchSize: 100 },
          ...claimCheck,
        });
        try {
          await connectPublisher(publisher);
          const t = performance.now();
          const published = await drainAll(app, db, TABLE);
          const seconds = (performance.now() - t) / 1000;
          const depth = await queueDepth(ctx.rabbit, QUEUE);
          if (published !== n || depth !== n) {
            throw new Error(
              `P23 ${variant}: ${published} published, ${depth} in the queue, ${n} enqueued`,
            );
          }
          rates[variant].push(n / seconds);
          duplicates[variant].push(
            [...publisher.confirmed.values()].filter((count) => count > 1).length,
          );
          // The consumer's side: each message's payload, read back from the store when it went
          // by reference; the store is the variant's (the table store reads the producer's table).
          const store = variant === 's3' ? stores.s3.store : consumerTable;
          const [probe] = publisher.kept;
          const first =
            probe === undefined
              ? undefined
              : (await claimCheckPayload(probe, store)).json<{ pad?: string }>();
          if (first?.pad?.length !== LARGE.length || publisher.kept.length !== n) {
            throw new Error(
              `P23 ${variant}: the consumer did not read a whole 64 KiB payload back`,
            );
          }
          const r = performance.now();
          for (const message of publisher.kept) await claimCheckPayload(message, store);
          reads[variant].push(((performance.now() - r) * 1000) / publisher.kept.length);
          ctx.log(
            `P23 drain run ${run}, ${variant}: ${(n / seconds).toFixed(0)} msgs/s; consumer read ${reads[variant].at(-1)?.toFixed(0)} µs/msg`,
          );
        } finally {
          await app.close();
        }
      }
    }
  } finally {
    await dropOutboxTable(db, TABLE);
    await purgeQueue(ctx.rabbit, QUEUE);
  }
  for (const variant of ['off', 'table', 's3'] as const) {
    addMetric(
      result,
      `drain_${variant}_msgs_per_s`,
      `drain of 64 KiB messages to RabbitMQ, claim check ${variant}: msgs/s`,
      'msg/s',
      rates[variant],
      n,
    );
    addMetric(
      result,
      `read_${variant}_us`,
      `consumer: claimCheckPayload per 64 KiB message, claim check ${variant}: µs`,
      'µs',
      reads[variant],
      n,
    );
  }
  const median = (v: Variant): number => summarise(rates[v]).median;
  const readMedian = (v: Variant): number => summarise(reads[v]).median;
  result.values.p23_read_table_vs_off = round(readMedian('table') / readMedian('off'), 3);
  result.values.p23_read_s3_vs_off = round(readMedian('s3') / readMedian('off'), 3);
  for (const variant of ['off', 'table', 's3'] as const) {
    result.values[`p23_drain_${variant}_duplicates`] = Math.max(0, ...duplicates[variant]);
  }
  result.values.p23_drain_table_vs_off = round(median('table') / median('off'), 3);
  result.values.p23_drain_s3_vs_off = round(median('s3') / median('off'), 3);
  result.values.p23_drain_table_us_per_msg_added = round(
    1e6 / median('table') - 1e6 / median('off'),
    1,
  );
  result.values.p23_drain_s3_us_per_msg_added = round(1e6 / median('s3') - 1e6 / median('off'), 1);
}
