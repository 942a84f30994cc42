import { Redis } from 'ioredis';
import { SERVICES } from '../services';
import { Collector } from './collector';

// Reading what RedisStreamsPublisher wrote: entries as Redis keeps them, field by field, in
// bytes (a text round trip would hide what a binary payload became).

export const REDIS_URL = `redis://${SERVICES.redis.host}:${SERVICES.redis.port}`;

/** One stream entry: its id and its fields in the order they were written. */
export interface StreamEntry {
  readonly id: string;
  /** [name, value] pairs, values as bytes. */
  readonly pairs: readonly (readonly [string, Buffer])[];
  /** The fields as an object, values as text (a repeated name keeps its last value). */
  readonly fields: Readonly<Record<string, string>>;
}

type RawEntry = [Buffer, Buffer[]];

export function toEntry([id, flat]: RawEntry): StreamEntry {
  const pairs: [string, Buffer][] = [];
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const name = (flat[i] as Buffer).toString('utf8');
    const value = flat[i + 1] as Buffer;
    pairs.push([name, value]);
    fields[name] = value.toString('utf8');
  }
  return { id: id.toString('utf8'), pairs, fields };
}

/** A Redis connection for a test's own reads and writes (not the publisher's). */
export function redisClient(url = REDIS_URL): Redis {
  return new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });
}

/** Every entry of `stream`, oldest first. */
export async function readStream(redis: Redis, stream: string): Promise<StreamEntry[]> {
  const raw = (await redis.xrangeBuffer(stream, '-', '+')) as unknown as RawEntry[];
  return raw.map(toEntry);
}

export interface StreamConsumer {
  readonly received: Collector<StreamEntry>;
  /** Stops reading and deletes the stream. */
  close(): Promise<void>;
}

/**
 * Reads `stream` from its start with `XREAD BLOCK` on a connection of its own, into a
 * collector; `close()` stops the loop and deletes the stream.
 */
export async function consumeRedisStream(stream: string, url = REDIS_URL): Promise<StreamConsumer> {
  const received = new Collector<StreamEntry>();
  const reader = redisClient(url);
  await reader.ping();
  let stopped = false;
  let last = '0-0';
  const loop = (async () => {
    while (!stopped) {
      const answer: [Buffer, RawEntry[]][] | null = await reader
        .xreadBuffer('COUNT', 500, 'BLOCK', 100, 'STREAMS', stream, last)
        .catch(() => null);
      for (const [, entries] of answer ?? []) {
        for (const raw of entries) {
          const entry = toEntry(raw);
          last = entry.id;
          received.push(entry);
        }
      }
    }
  })();
  return {
    received,
    close: async () => {
      stopped = true;
      await loop;
      await reader.del(stream);
      await reader.quit();
    },
  };
}
