/**
 * P24-SQS: what sending messages as CloudEvents costs on SQS (docs/publishers.md, "CloudEvents"),
 * beside the same work without it, on PostgreSQL → a FIFO queue on ElasticMQ. Each run, in turn:
 * plain outbox messages, CloudEvents in binary mode, in structured mode. Per variant, a backlog of
 * keyed, numbered (`ordering.sequence`) messages is enqueued through an app whose publisher is
 * the variant's `SqsPublisher` (so its size check at enqueue runs, which encodes the event with
 * `cloudEvents`), then drained by it; every message counted in the queue. In process: the body
 * and attributes of one message (`awsMessageParts` vs encode + `awsCloudEventParts`). A figure
 * to choose by, not a target.
 */
import { randomUUID } from 'node:crypto';
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import type { EntityManager } from 'typeorm';
import type { OutboxRecord } from '../../lib';
import { cloudEvents, type EncodedCloudEvent } from '../../lib/integrations/cloudevents';
import { awsCloudEventParts } from '../../lib/publishers/aws/aws-cloud-event';
import { awsMessageParts } from '../../lib/publishers/aws/aws-message-attributes';
import { SqsPublisher } from '../../lib/publishers/sqs';
import { named } from '../support/config';
import { dropOutboxTable, keyOf, resetOutboxTable } from '../support/databases';
import { drainAll, startOutboxApp } from '../support/outbox-app';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';
import { clientConfig, ensureElasticMq } from './p1-drain-sqs';

const TABLE = named('bench_p24_sqs');
const SOURCE = 'urn:example:bench';
const VARIANTS = ['off', 'binary', 'structured'] as const;
type Variant = (typeof VARIANTS)[number];

export async function p24Sqs(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P24-SQS',
    'CloudEvents on SQS: enqueue and drain to a FIFO queue (ElasticMQ) as plain messages vs CloudEvents (binary, structured); body and attributes per message',
  );
  partsCost(ctx, result);
  const stop = await ensureElasticMq(ctx.log);
  if (stop === undefined) {
    result.skipped.push(
      'ElasticMQ is not reachable and could not be started: start it with `npm run elasticmq:start`',
    );
    return result;
  }
  const sqs = new SQSClient(clientConfig);
  try {
    await deliveryCost(ctx, result, sqs);
  } finally {
    sqs.destroy();
    stop();
  }
  return result;
}

function sampleRecord(i: number): OutboxRecord {
  return {
    id: String(i),
    messageId: `0190a1b2-c3d4-7e5f-8a9b-${String(i).padStart(12, '0')}`,
    topic: 'bench.p24',
    key: keyOf(i),
    type: 'bench.report',
    payload: `{"seq":${i},"pad":"${'x'.repeat(200)}"}`,
    headers: { 'x-outbox-sequence': String(i) },
    attempts: 1,
    createdAt: new Date(),
  };
}

/** The body and attributes of a message, as the publisher builds them, per variant. */
function partsCost(ctx: BenchContext, result: ScenarioResult): void {
  const n = 20_000;
  const records = Array.from({ length: n }, (_, i) => sampleRecord(i + 1));
  const encoders = {
    binary: cloudEvents({ source: SOURCE }),
    structured: cloudEvents({ source: SOURCE, mode: 'structured' }),
  };
  const event = (mode: 'binary' | 'structured', r: OutboxRecord): EncodedCloudEvent => {
    const encoded = encoders[mode].encode(r);
    if (encoded === undefined) throw new Error(`P24-SQS: no ${mode} event`);
    return encoded;
  };
  const build: Record<Variant, (r: OutboxRecord) => unknown> = {
    off: (r) => awsMessageParts(r),
    binary: (r) => awsCloudEventParts(r, event('binary', r)),
    structured: (r) => awsCloudEventParts(r, event('structured', r)),
  };
  const us: Record<Variant, number[]> = { off: [], binary: [], structured: [] };
  let sink = 0;
  const time = (fn: (r: OutboxRecord) => unknown): number => {
    const t = performance.now();
    for (const r of records) if (fn(r) !== undefined) sink++;
    return ((performance.now() - t) * 1000) / n;
  };
  for (const variant of VARIANTS) time(build[variant]); // warm-up
  for (let run = 1; run <= ctx.runs; run++) {
    for (const variant of VARIANTS) us[variant].push(time(build[variant]));
    ctx.log(
      `P24-SQS parts run ${run}: plain ${us.off.at(-1)?.toFixed(2)} µs, binary ${us.binary.at(-1)?.toFixed(2)} µs, structured ${us.structured.at(-1)?.toFixed(2)} µs per message`,
    );
  }
  if (sink === 0) throw new Error('P24-SQS: nothing built');
  for (const variant of VARIANTS) {
    addMetric(
      result,
      `parts_${variant}_us`,
      `body and attributes, ${variant === 'off' ? 'plain' : `CloudEvent ${variant}`}: µs per message`,
      'µs',
      us[variant],
      n,
    );
  }
  result.values.p24sqs_parts_binary_us_added = round(
    summarise(us.binary).median - summarise(us.off).median,
    2,
  );
  result.values.p24sqs_parts_structured_us_added = round(
    summarise(us.structured).median - summarise(us.off).median,
    2,
  );
}

async function freshQueue(sqs: SQSClient, variant: Variant, run: number): Promise<string> {
  const name = `${named(`bench-p24-sqs-${variant}-${run}`, '-')}-${randomUUID().slice(0, 8)}.fifo`;
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { FifoQueue: 'true' } }),
  );
  if (QueueUrl === undefined) throw new Error(`CreateQueue ${name} answered no URL`);
  return QueueUrl;
}

async function depth(sqs: SQSClient, url: string): Promise<number> {
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: ['ApproximateNumberOfMessages'],
    }),
  );
  return Number(Attributes.ApproximateNumberOfMessages ?? 0);
}

async function deliveryCost(
  ctx: BenchContext,
  result: ScenarioResult,
  sqs: SQSClient,
): Promise<void> {
  const db = ctx.pg;
  const n = Math.max(2_000, Math.round(ctx.profile.p1Messages / 4));
  const drain: Record<Variant, number[]> = { off: [], binary: [], structured: [] };
  const enqueue: Record<Variant, number[]> = { off: [], binary: [], structured: [] };
  const queues: string[] = [];
  const publisherOf = (variant: Variant, url: string): SqsPublisher =>
    new SqsPublisher({
      client: clientConfig,
      queue: url,
      ...(variant === 'off' ? {} : { cloudEvents: cloudEvents({ source: SOURCE, mode: variant }) }),
    });
  try {
    for (let run = 0; run <= ctx.runs; run++) {
      // Run 0 warms every path up and is not counted.
      for (const variant of VARIANTS) {
        const count = run === 0 ? 500 : n;
        await resetOutboxTable(db, TABLE);
        const url = await freshQueue(sqs, variant, run);
        queues.push(url);
        const writer = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          workers: false,
          publisher: publisherOf(variant, url),
          ordering: { sequence: true },
        });
        const te = performance.now();
        for (let from = 0; from < count; from += 500) {
          await db.transaction(async (m: EntityManager) => {
            const batch = Array.from({ length: Math.min(500, count - from) }, (_, i) => ({
              topic: 'bench.p24',
              key: keyOf(from + i + 1),
              type: 'bench.report',
              payload: { seq: from + i + 1, pad: 'x'.repeat(200) },
            }));
            await writer.outbox.enqueue(batch, m);
          });
        }
        const enqueueSeconds = (performance.now() - te) / 1000;
        await writer.close();
        const app = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          publisher: publisherOf(variant, url),
          autoStart: false,
          ordering: { sequence: true },
        });
        try {
          const t = performance.now();
          const published = await drainAll(app, db, TABLE);
          const seconds = (performance.now() - t) / 1000;
          const held = await depth(sqs, url);
          if (published !== count || held !== count) {
            throw new Error(
              `P24-SQS ${variant}: ${published} published, ${held} in the queue, ${count} enqueued`,
            );
          }
          if (run === 0) continue;
          drain[variant].push(n / seconds);
          enqueue[variant].push(n / enqueueSeconds);
          ctx.log(
            `P24-SQS run ${run}, ${variant}: enqueue ${(n / enqueueSeconds).toFixed(0)} msgs/s, drain ${(n / seconds).toFixed(0)} msgs/s`,
          );
        } finally {
          await app.close();
        }
      }
    }
  } finally {
    await dropOutboxTable(db, TABLE);
    await Promise.all(
      queues.map((url) =>
        sqs.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => undefined),
      ),
    );
  }
  for (const variant of VARIANTS) {
    const what = variant === 'off' ? 'plain outbox messages' : `CloudEvents in ${variant} mode`;
    addMetric(
      result,
      `drain_${variant}_msgs_per_s`,
      `drain to SQS, ${what}: msgs/s`,
      'msg/s',
      drain[variant],
      n,
    );
    addMetric(
      result,
      `enqueue_${variant}_msgs_per_s`,
      `enqueue (500 a transaction), ${what}: msgs/s`,
      'msg/s',
      enqueue[variant],
      n,
    );
  }
  const median = (rates: Record<Variant, number[]>, v: Variant): number =>
    summarise(rates[v]).median;
  for (const variant of ['binary', 'structured'] as const) {
    result.values[`p24sqs_drain_${variant}_vs_off`] = round(
      median(drain, variant) / median(drain, 'off'),
      3,
    );
    result.values[`p24sqs_enqueue_${variant}_vs_off`] = round(
      median(enqueue, variant) / median(enqueue, 'off'),
      3,
    );
  }
}
