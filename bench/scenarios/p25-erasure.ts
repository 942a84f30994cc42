/**
 * P25: what per-subject erasure costs (docs/erasure.md), beside the same work without it. At
 * enqueue, on PostgreSQL and on MariaDB (whose key is read, then locked by its id: one statement
 * more than PostgreSQL's, so that two first messages of a subject do not deadlock): an order row and one keyed event with two personal fields per
 * transaction, the module with `erasure` (the fields sealed under the subject's data key, read
 * share-locked from `<table>_subject_keys`, the use recorded) against the same module without
 * (the same payload in clear), in paired blocks; once for subjects that have a key already (a
 * pool of 100) and once for a new subject each time (its key made and wrapped). At delivery: a
 * backlog of those messages drained from PostgreSQL to RabbitMQ by `RabbitMqPublisher`, sealed vs in clear (the
 * dispatcher does no crypto: only the larger payload differs), every message counted in the
 * queue; and the consumer's `PersonalDataReader.open` (one key lookup and the fields opened) per
 * message against a plain `JSON.parse`. A figure to choose by, not a target.
 */
import { randomBytes } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { PersonalDataReader, subjectKeys } from '../../lib/erasure';
import type { OutboxRecord, OutboxPublisher, PublishOutcome } from '../../lib';
import { named } from '../support/config';
import {
  BenchOrder,
  closeDataSource,
  dropOutboxTable,
  keyOf,
  openMaria,
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

const TABLE = named('bench_p25');
const QUEUE = named('bench.p25', '.');
const BLOCK = 20;
const PAD = 'y'.repeat(512);
const SUBJECTS = 100;

type Variant = 'clear' | 'sealed';

function payloadOf(seq: number, subject: string): Record<string, unknown> {
  return {
    seq,
    userId: subject,
    email: `${subject}@example.org`,
    name: `Name ${subject}`,
    pad: PAD,
  };
}

export async function p25(ctx: BenchContext): Promise<ScenarioResult> {
  const result = newResult(
    'P25',
    'Per-subject erasure: enqueue (PostgreSQL, MariaDB) and delivery (PostgreSQL → RabbitMQ) of messages with two personal fields sealed vs in clear',
  );
  const masterKey = randomBytes(32);
  await enqueueCost(ctx, result, ctx.pg, masterKey, '');
  const maria = await openMaria();
  try {
    await enqueueCost(ctx, result, maria, masterKey, 'mariadb_');
  } finally {
    await closeDataSource(maria);
  }
  await deliveryCost(ctx, result, ctx.pg, masterKey);
  return result;
}

async function enqueueCost(
  ctx: BenchContext,
  result: ScenarioResult,
  db: DataSource,
  masterKey: Buffer,
  /** Before each metric's name: '' for PostgreSQL (the names recorded first), 'mariadb_'. */
  prefix: '' | 'mariadb_',
): Promise<void> {
  const where = prefix === '' ? 'PostgreSQL' : 'MariaDB';
  await resetOutboxTable(db, TABLE);
  const on = await startOutboxApp({
    dataSource: db,
    tableName: TABLE,
    workers: false,
    erasure: { masterKey },
  });
  const off = await startOutboxApp({ dataSource: db, tableName: TABLE, workers: false });
  let seq = 0;
  const one =
    (app: OutboxApp, sealed: boolean, subjectOf: (s: number) => string) =>
    async (): Promise<void> => {
      await db.transaction(async (m: EntityManager) => {
        const s = ++seq;
        const subject = subjectOf(s);
        await m.save(BenchOrder, m.create(BenchOrder, { customer: `c${s % 97}`, total: s }));
        await app.outbox.enqueue(
          {
            topic: 'bench.p25',
            key: keyOf(s),
            type: 'bench.user',
            payload: payloadOf(s, subject),
            ...(sealed ? { personal: { subject, fields: ['email', 'name'] } } : {}),
          },
          m,
        );
      });
    };
  const known = (s: number): string => `u${s % SUBJECTS}`;
  const fresh = (s: number): string => `n${s}-${ctx.runs}`;
  const n = Math.max(BLOCK * 2, Math.round(ctx.profile.p5Transactions / 4));
  const existing = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  const newSubject = { on: [] as number[], off: [] as number[], ratio: [] as number[] };
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      await truncateOutbox(db, TABLE);
      const a = await pairedBlocks(one(on, true, known), one(off, false, known), n, BLOCK);
      existing.on.push(a.first * 1000);
      existing.off.push(a.second * 1000);
      existing.ratio.push(a.ratio);
      await truncateOutbox(db, TABLE);
      const b = await pairedBlocks(one(on, true, fresh), one(off, false, fresh), n, BLOCK);
      newSubject.on.push(b.first * 1000);
      newSubject.off.push(b.second * 1000);
      newSubject.ratio.push(b.ratio);
      ctx.log(
        `P25 enqueue ${where} run ${run}: known subject ${(a.first * 1000).toFixed(0)} vs ${(a.second * 1000).toFixed(0)} µs (×${a.ratio.toFixed(3)}); new subject ${(b.first * 1000).toFixed(0)} vs ${(b.second * 1000).toFixed(0)} µs (×${b.ratio.toFixed(3)})`,
      );
    }
  } finally {
    await on.close();
    await off.close();
    await dropOutboxTable(db, TABLE);
  }
  const metric = (id: string, what: string, values: number[]): void => {
    addMetric(result, `${prefix}${id}`, `${where}: ${what}`, 'µs', values, n);
  };
  metric(
    'enqueue_known_sealed_us',
    'order + event, subject with a key, sealed: µs per transaction',
    existing.on,
  );
  metric(
    'enqueue_known_clear_us',
    'order + event, the same payload in clear: µs per transaction',
    existing.off,
  );
  metric(
    'enqueue_new_sealed_us',
    'order + event, a new subject (key made), sealed: µs per transaction',
    newSubject.on,
  );
  metric(
    'enqueue_new_clear_us',
    'order + event, the same payload in clear: µs per transaction',
    newSubject.off,
  );
  result.values[`p25_${prefix}enqueue_known_sealed_vs_clear`] = round(
    summarise(existing.ratio).median,
    3,
  );
  result.values[`p25_${prefix}enqueue_new_sealed_vs_clear`] = round(
    summarise(newSubject.ratio).median,
    3,
  );
}

/** Keeps what it publishes, for the consumer's part. */
class Keeping implements OutboxPublisher {
  readonly kept: OutboxRecord[] = [];
  constructor(private readonly inner: OutboxPublisher) {}
  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes = await this.inner.publish(messages, signal);
    this.kept.push(...messages);
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
  masterKey: Buffer,
): Promise<void> {
  const n = Math.max(300, Math.round(ctx.profile.p1Messages / 40));
  const rates: Record<Variant, number[]> = { clear: [], sealed: [] };
  const opens = { sealed: [] as number[], clear: [] as number[] };
  const reader = new PersonalDataReader(
    subjectKeys({ dataSource: db, tableName: TABLE, masterKey }),
  );
  await resetQueue(ctx.rabbit, QUEUE);
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      for (const variant of ['clear', 'sealed'] as const) {
        await resetOutboxTable(db, TABLE);
        await purgeQueue(ctx.rabbit, QUEUE);
        const erasure = variant === 'sealed' ? { erasure: { masterKey } } : {};
        const writer = await startOutboxApp({
          dataSource: db,
          tableName: TABLE,
          workers: false,
          ...erasure,
        });
        for (let from = 0; from < n; from += 100) {
          await db.transaction(async (m: EntityManager) => {
            const batch = Array.from({ length: Math.min(100, n - from) }, (_, i) => {
              const s = from + i + 1;
              const subject = `u${s % SUBJECTS}`;
              return {
                topic: 'bench.p25',
                key: keyOf(s),
                type: 'bench.user',
                payload: payloadOf(s, subject),
                ...(variant === 'sealed'
                  ? { personal: { subject, fields: ['email', 'name'] } }
                  : {}),
              };
            });
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
          ...erasure,
        });
        try {
          await connectPublisher(publisher);
          const t = performance.now();
          const published = await drainAll(app, db, TABLE);
          const seconds = (performance.now() - t) / 1000;
          const depth = await queueDepth(ctx.rabbit, QUEUE);
          if (published !== n || depth !== n) {
            throw new Error(
              `P25 ${variant}: ${published} published, ${depth} in the queue, ${n} enqueued`,
            );
          }
          rates[variant].push(n / seconds);
          // The consumer's side: each message opened (a key lookup, the fields decrypted), or
          // only parsed when in clear.
          // The body as the broker carries it: the row's JSON text.
          // (The warm-up message connectPublisher sent is not one of them.)
          const bodies = publisher.kept
            .filter((r) => r.topic === 'bench.p25')
            .map((r) => ({
              headers: r.headers,
              payload: r.encoding === 'binary' ? r.payload : Buffer.from(r.payload, 'utf8'),
            }));
          const [probe] = bodies;
          const opened =
            probe === undefined ? undefined : await reader.open<{ email?: unknown }>(probe);
          if (typeof opened?.email !== 'string' || !opened.email.endsWith('@example.org')) {
            throw new Error(`P25 ${variant}: the consumer did not open the message's email`);
          }
          const o = performance.now();
          for (const body of bodies) await reader.open(body);
          opens[variant].push(((performance.now() - o) * 1000) / bodies.length);
          ctx.log(
            `P25 drain run ${run}, ${variant}: ${(n / seconds).toFixed(0)} msgs/s; open ${opens[variant].at(-1)?.toFixed(0)} µs/msg`,
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
  for (const variant of ['clear', 'sealed'] as const) {
    addMetric(
      result,
      `drain_${variant}_msgs_per_s`,
      `drain of messages with two personal fields to RabbitMQ, ${variant}: msgs/s`,
      'msg/s',
      rates[variant],
      n,
    );
    addMetric(
      result,
      `open_${variant}_us`,
      `consumer: PersonalDataReader.open per message, ${variant}: µs`,
      'µs',
      opens[variant],
      n,
    );
  }
  const median = (values: number[]): number => summarise(values).median;
  result.values.p25_drain_sealed_vs_clear = round(median(rates.sealed) / median(rates.clear), 3);
  result.values.p25_open_sealed_vs_clear = round(median(opens.sealed) / median(opens.clear), 3);
}
