/**
 * P24: what sending messages as CloudEvents costs (docs/publishers.md, "CloudEvents"), beside the
 * same work without it, on PostgreSQL → RabbitMQ. At delivery: a backlog of keyed, numbered
 * (`ordering.sequence`) messages drained by `RabbitMqPublisher` as plain outbox messages, as
 * CloudEvents in binary mode and in structured mode, in turn within each run; every message
 * counted in the queue. In process: what `cloudEvents().encode()` costs per message (the SDK's
 * `CloudEvent`, validated against its schema) beside building the same attributes by hand, the
 * figure that decides whether the SDK stays. A figure to choose by, not a target.
 */
import { CloudEvent } from 'cloudevents';
import type { EntityManager } from 'typeorm';
import { cloudEvents } from '../../lib/integrations/cloudevents';
import type { OutboxRecord } from '../../lib';
import { named } from '../support/config';
import { dropOutboxTable, keyOf, resetOutboxTable } from '../support/databases';
import { connectPublisher, drainAll, rabbitPublisher, startOutboxApp } from '../support/outbox-app';
import { purgeQueue, queueDepth, resetQueue } from '../support/rabbit';
import { addMetric, newResult, type BenchContext, type ScenarioResult } from '../support/report';
import { round, summarise } from '../support/stats';

const TABLE = named('bench_p24');
const QUEUE = named('bench.p24', '.');
const SOURCE = 'urn:example:bench';
const VARIANTS = ['off', 'binary', 'structured'] as const;
type Variant = (typeof VARIANTS)[number];

export async function p24(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P24',
    'CloudEvents: drain to RabbitMQ as plain messages vs CloudEvents (binary, structured); encode cost with the SDK vs by hand',
  );
  encodeCost(ctx, result);
  await deliveryCost(ctx, result);
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

/** The same attributes the SDK is given, made by hand: what writing the envelope ourselves would cost. */
function byHand(record: OutboxRecord): Record<string, string> {
  const attributes: Record<string, string> = {
    specversion: '1.0',
    id: record.messageId,
    source: SOURCE,
    type: record.type,
    time: record.createdAt.toISOString(),
    datacontenttype: 'application/json',
  };
  if (record.key !== null) {
    attributes.subject = record.key;
    attributes.partitionkey = record.key;
  }
  const sequence = record.headers['x-outbox-sequence'];
  if (sequence !== undefined) attributes.sequence = sequence.padStart(16, '0');
  return attributes;
}

function encodeCost(ctx: BenchContext, result: ScenarioResult): void {
  const n = 20_000;
  const records = Array.from({ length: n }, (_, i) => sampleRecord(i + 1));
  const binary = cloudEvents({ source: SOURCE });
  const structured = cloudEvents({ source: SOURCE, mode: 'structured' });
  const us = {
    sdkBinary: [] as number[],
    sdkStructured: [] as number[],
    sdkValidated: [] as number[],
    hand: [] as number[],
  };
  // The SDK's CloudEvent with its schema check per message (what encode() did at first).
  const validated = (r: OutboxRecord): CloudEvent<never> => new CloudEvent<never>(byHand(r));
  let sink = 0;
  const time = (fn: (r: OutboxRecord) => unknown): number => {
    const t = performance.now();
    for (const r of records) if (fn(r) !== undefined) sink++;
    return ((performance.now() - t) * 1000) / n;
  };
  // A warm-up pass each, so that the figures are of optimised code.
  time((r) => binary.encode(r));
  time((r) => structured.encode(r));
  time(byHand);
  time(validated);
  for (let run = 1; run <= ctx.runs; run++) {
    us.sdkBinary.push(time((r) => binary.encode(r)));
    us.sdkStructured.push(time((r) => structured.encode(r)));
    us.sdkValidated.push(time(validated));
    us.hand.push(time(byHand));
    ctx.log(
      `P24 encode run ${run}: SDK binary ${us.sdkBinary.at(-1)?.toFixed(2)} µs, structured ${us.sdkStructured.at(-1)?.toFixed(2)} µs, SDK validating each ${us.sdkValidated.at(-1)?.toFixed(2)} µs, by hand ${us.hand.at(-1)?.toFixed(2)} µs per message`,
    );
  }
  if (sink === 0) throw new Error('P24: nothing encoded');
  addMetric(
    result,
    'encode_sdk_binary_us',
    'encode, SDK, binary mode: µs per message',
    'µs',
    us.sdkBinary,
    n,
  );
  addMetric(
    result,
    'encode_sdk_structured_us',
    'encode, SDK, structured mode: µs per message',
    'µs',
    us.sdkStructured,
    n,
  );
  addMetric(
    result,
    'encode_by_hand_us',
    'the same attributes by hand: µs per message',
    'µs',
    us.hand,
    n,
  );
  result.values.p24_encode_sdk_binary_us = round(summarise(us.sdkBinary).median, 2);
  result.values.p24_encode_sdk_validated_us = round(summarise(us.sdkValidated).median, 2);
  result.values.p24_encode_by_hand_us = round(summarise(us.hand).median, 2);
}

async function deliveryCost(ctx: BenchContext, result: ScenarioResult): Promise<void> {
  const db = ctx.pg;
  const n = Math.max(2_000, Math.round(ctx.profile.p1Messages / 4));
  const rates: Record<Variant, number[]> = { off: [], binary: [], structured: [] };
  await resetQueue(ctx.rabbit, QUEUE);
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      for (const variant of VARIANTS) {
        await resetOutboxTable(db, TABLE);
        await purgeQueue(ctx.rabbit, QUEUE);
        const writer = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          workers: false,
          ordering: { sequence: true },
        });
        for (let from = 0; from < n; from += 500) {
          await db.transaction(async (m: EntityManager) => {
            const batch = Array.from({ length: Math.min(500, n - from) }, (_, i) => ({
              topic: 'bench.p24',
              key: keyOf(from + i + 1),
              type: 'bench.report',
              payload: { seq: from + i + 1, pad: 'x'.repeat(200) },
            }));
            await writer.outbox.enqueue(batch, m);
          });
        }
        await writer.close();
        const publisher = rabbitPublisher(
          QUEUE,
          variant === 'off' ? {} : { cloudEvents: cloudEvents({ source: SOURCE, mode: variant }) },
        );
        const app = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          publisher,
          autoStart: false,
          ordering: { sequence: true },
        });
        try {
          await connectPublisher(publisher);
          const t = performance.now();
          const published = await drainAll(app, db, TABLE);
          const seconds = (performance.now() - t) / 1000;
          const depth = await queueDepth(ctx.rabbit, QUEUE);
          if (published !== n || depth !== n) {
            throw new Error(
              `P24 ${variant}: ${published} published, ${depth} in the queue, ${n} enqueued`,
            );
          }
          rates[variant].push(n / seconds);
          ctx.log(`P24 drain run ${run}, ${variant}: ${(n / seconds).toFixed(0)} msgs/s`);
        } finally {
          await app.close();
        }
      }
    }
  } finally {
    await dropOutboxTable(db, TABLE);
    await purgeQueue(ctx.rabbit, QUEUE);
  }
  for (const variant of VARIANTS) {
    addMetric(
      result,
      `drain_${variant}_msgs_per_s`,
      `drain to RabbitMQ, ${variant === 'off' ? 'plain outbox messages' : `CloudEvents in ${variant} mode`}: msgs/s`,
      'msg/s',
      rates[variant],
      n,
    );
  }
  const median = (v: Variant): number => summarise(rates[v]).median;
  for (const variant of ['binary', 'structured'] as const) {
    result.values[`p24_drain_${variant}_vs_off`] = round(median(variant) / median('off'), 3);
    result.values[`p24_drain_${variant}_us_per_msg_added`] = round(
      1e6 / median(variant) - 1e6 / median('off'),
      1,
    );
  }
}
