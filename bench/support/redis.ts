/** Redis Streams for the bench: the module's publisher, the bare client and a check of a stream. */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  type OutboxRecord,
} from '../../lib';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import { SERVICES as TEST_SERVICES } from '../../test/support/services';
import { BARE_BATCH_SIZE, bareClaimSql, bareSettleSql, type Row } from '../baselines/bare-relay';
import { keyOf, payloadOf } from './databases';
import type { Pool } from './pg';

export const REDIS_URL = `redis://${TEST_SERVICES.redis.host}:${TEST_SERVICES.redis.port}`;

/** The library's own Redis Streams publisher, adding every message to `stream`. */
export function redisStreamsPublisher(stream: string): RedisStreamsPublisher {
  return new RedisStreamsPublisher({
    connection: REDIS_URL,
    stream: () => stream,
    connectionName: 'outbox-bench',
  });
}

/**
 * An ioredis connection set up as RedisStreamsPublisher sets up its own (no offline queue, no
 * client retries or resends, no auto-pipelining), for the bare client's ceiling.
 */
export async function bareRedis(): Promise<Redis> {
  const redis = new Redis(REDIS_URL, {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    enableAutoPipelining: false,
    keepAlive: 10_000,
    connectionName: 'outbox-bench-bare',
  });
  await redis.connect();
  return redis;
}

/**
 * The bare client's ceiling: `count` messages, with the fields and the 1 KiB JSON payloads the
 * module's entries carry, XADDed to `stream` by pipelines of `batchSize`, `inFlight` of them at a
 * time (the dispatcher's batch size and batches in flight), with no database. Every reply is
 * checked.
 */
export async function bareXadd(
  redis: Redis,
  stream: string,
  count: number,
  batchSize: number,
  inFlight: number,
): Promise<void> {
  let next = 1;
  const lane = async (): Promise<void> => {
    while (next <= count) {
      const from = next;
      const to = Math.min(count, from + batchSize - 1);
      next = to + 1;
      const pipeline = redis.pipeline();
      for (let seq = from; seq <= to; seq++) {
        const key = keyOf(seq);
        pipeline.call(
          'XADD',
          stream,
          '*',
          OUTBOX_HEADER_MESSAGE_ID,
          randomUUID(),
          OUTBOX_HEADER_TYPE,
          'order.created',
          OUTBOX_HEADER_KEY,
          key,
          'payload',
          payloadOf(seq, key),
        );
      }
      const replies = (await pipeline.exec()) ?? [];
      const failed = replies.find(([error]) => error !== null);
      if (failed !== undefined) throw failed[0] as Error;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
}

/** What a stream holds after a drain of `expected` messages (seq 1…expected, 1 000 keys). */
export interface StreamCheck {
  readonly count: number;
  readonly duplicates: number;
  readonly missing: number;
  /** Keys whose entries are not in ascending seq order. */
  readonly reordered: number;
}

/** Reads the whole stream and checks it: every seq once, each key's seqs in order. */
export async function checkStream(
  redis: Redis,
  stream: string,
  expected: number,
): Promise<StreamCheck> {
  const seen = new Set<number>();
  const lastOfKey = new Map<string, number>();
  let count = 0;
  let duplicates = 0;
  const reorderedKeys = new Set<string>();
  let from = '-';
  for (;;) {
    const entries = (await redis.xrange(stream, from, '+', 'COUNT', 5_000)) as [string, string[]][];
    for (const [, fields] of entries) {
      count++;
      const payload = fields[fields.length - 1] ?? '{}';
      const { seq, key } = JSON.parse(payload) as { seq: number; key: string };
      if (seen.has(seq)) duplicates++;
      seen.add(seq);
      if ((lastOfKey.get(key) ?? 0) > seq) reorderedKeys.add(key);
      lastOfKey.set(key, seq);
    }
    const last = entries.at(-1);
    if (last === undefined || entries.length < 5_000) break;
    from = `(${last[0]}`;
  }
  let missing = 0;
  for (let seq = 1; seq <= expected; seq++) if (!seen.has(seq)) missing++;
  return { count, duplicates, missing, reordered: reorderedKeys.size };
}

/**
 * The bare pipelined relay (bench/baselines/bare-relay.ts: claim 500 rows in one statement,
 * publish, settle in one, two lanes, no leases or order) with the same ioredis client: each
 * claimed batch one pipeline of XADDs with the module's fields. The ceiling of a relay on this
 * table, where the bare client's is the ceiling of Redis and the client alone.
 */
export async function bareRedisRelay(
  pool: Pool,
  table: string,
  redis: Redis,
  stream: string,
): Promise<number> {
  let published = 0;
  const lane = async (): Promise<void> => {
    const client = await pool.connect();
    try {
      for (;;) {
        const { rows } = await client.query<Row>({
          name: `bare-claim-${table}`,
          text: bareClaimSql(table),
          values: [BARE_BATCH_SIZE],
        });
        if (rows.length === 0) return;
        const pipeline = redis.pipeline();
        for (const r of rows) {
          const args = [OUTBOX_HEADER_MESSAGE_ID, r.message_id, OUTBOX_HEADER_TYPE, r.event_type];
          if (r.message_key !== null) args.push(OUTBOX_HEADER_KEY, r.message_key);
          pipeline.call('XADD', stream, '*', ...args, 'payload', r.payload);
        }
        const failed = ((await pipeline.exec()) ?? []).find(([error]) => error !== null);
        if (failed !== undefined) throw failed[0] as Error;
        await client.query({
          name: `bare-settle-mark-${table}`,
          text: bareSettleSql(table),
          values: [rows.map((r) => r.id)],
        });
        published += rows.length;
      }
    } finally {
      client.release();
    }
  };
  await Promise.all([lane(), lane()]);
  return published;
}

/**
 * The module's publisher driven directly, with no database and no dispatcher: `count` records
 * like the seeded ones (1 KiB JSON, 1 000 keys) handed to `publish()` in batches of `batchSize`,
 * `inFlight` at a time. Against the bare client, what RedisStreamsPublisher itself costs.
 */
export async function publishDirect(
  publisher: RedisStreamsPublisher,
  count: number,
  batchSize: number,
  inFlight: number,
): Promise<void> {
  let next = 1;
  // One date for all: the publisher never reads it, and the bare client makes none.
  const createdAt = new Date();
  const lane = async (): Promise<void> => {
    while (next <= count) {
      const from = next;
      const to = Math.min(count, from + batchSize - 1);
      next = to + 1;
      const records: OutboxRecord[] = [];
      for (let seq = from; seq <= to; seq++) {
        const key = keyOf(seq);
        records.push({
          id: String(seq),
          messageId: randomUUID(),
          topic: 'bench',
          key,
          type: 'order.created',
          payload: payloadOf(seq, key),
          headers: {},
          attempts: 1,
          createdAt,
        });
      }
      const outcomes = await publisher.publish(records, new AbortController().signal);
      const failed = outcomes.find((o) => !o.ok);
      if (failed !== undefined && !failed.ok) throw failed.error as Error;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
}
