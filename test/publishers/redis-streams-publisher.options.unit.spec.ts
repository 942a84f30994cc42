import { inspect } from 'node:util';
import { Redis } from 'ioredis';
import { OutboxOptionsError, PublisherUnavailableError, type OutboxRecord } from '../../lib';
import {
  RedisStreamsPublisher,
  resolveRedisStreamsPublisherOptions,
  type RedisStreamsPublisherOptions,
} from '../../lib/publishers/redis-streams';

const connection = 'redis://127.0.0.1:6379';
const record: OutboxRecord = {
  id: '1',
  messageId: 'm-1',
  topic: 'orders',
  key: 'k',
  type: 'order.created',
  payload: '{}',
  headers: {},
  attempts: 0,
  createdAt: new Date(),
};

function errorOf(options: unknown): OutboxOptionsError {
  try {
    resolveRedisStreamsPublisherOptions(options as RedisStreamsPublisherOptions);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('resolveRedisStreamsPublisherOptions', () => {
  it('applies the documented defaults: a stream per topic, no trimming, no WAIT', () => {
    const resolved = resolveRedisStreamsPublisherOptions({ connection });
    expect(resolved).toMatchObject({
      trim: undefined,
      createStreams: true,
      waitForReplicas: undefined,
      publishTimeoutMs: 5_000,
      connectionTimeoutMs: 5_000,
      reconnect: { initialDelayMs: 500, maxDelayMs: 15_000 },
      connectionName: 'nestjs-outbox',
    });
    expect(resolved.stream(record)).toBe('orders');
    expect(
      resolveRedisStreamsPublisherOptions({ connection, streamPrefix: 'ev:' }).stream(record),
    ).toBe('ev:orders');
    const own = resolveRedisStreamsPublisherOptions({ connection, stream: (r) => `${r.type}` });
    expect(own.stream(record)).toBe('order.created');
  });

  it('takes ioredis options (host, sentinels, TLS …) as well as a URL', () => {
    const options = { host: 'redis', port: 6380, password: 'p', tls: {} };
    expect(resolveRedisStreamsPublisherOptions({ connection: options }).connection).toBe(options);
  });

  it('turns each trim into its XADD arguments: MAXLEN or MINID, approximate unless exact', () => {
    const trim = (t: RedisStreamsPublisherOptions['trim']) => {
      const resolved = resolveRedisStreamsPublisherOptions({ connection, trim: t }).trim;
      return resolved && [resolved.kind, resolved.exact, resolved.threshold()];
    };
    expect(trim({ maxLen: 1_000 })).toEqual(['MAXLEN', false, '1000']);
    expect(trim({ maxLen: 10, exact: true })).toEqual(['MAXLEN', true, '10']);
    expect(trim({ minId: '1700000000000-5' })).toEqual(['MINID', false, '1700000000000-5']);
    expect(trim({ minId: () => '42' })).toEqual(['MINID', false, '42']);
    const before = Date.now();
    const [, , threshold] = trim({ maxAgeMs: 60_000 }) as [string, boolean, string];
    expect(Number(threshold)).toBeGreaterThanOrEqual(before - 60_000);
    expect(Number(threshold)).toBeLessThanOrEqual(Date.now() - 60_000);
    const bad = resolveRedisStreamsPublisherOptions({ connection, trim: { minId: () => 'soon' } });
    expect(() => bad.trim?.threshold()).toThrow(
      /trim\.minId returned "soon", which is not a stream id/,
    );
  });

  it.each<[string, unknown, string]>([
    ['no connection', {}, 'connection'],
    ['an http URL', { connection: 'http://redis:6379' }, 'connection'],
    ['a connected client', { connection: new Redis({ lazyConnect: true }) }, 'connection'],
    [
      'an offline queue',
      { connection: { host: 'redis', enableOfflineQueue: true } },
      'connection.enableOfflineQueue',
    ],
    [
      'a retry strategy',
      { connection: { host: 'redis', retryStrategy: () => 100 } },
      'connection.retryStrategy',
    ],
    ['a key prefix', { connection: { keyPrefix: 'app:' } }, 'connection.keyPrefix'],
    ['a numeric prefix', { connection, streamPrefix: 1 }, 'streamPrefix'],
    ['a string stream', { connection, stream: 'orders' }, 'stream'],
    [
      'a prefix with a stream function',
      { connection, streamPrefix: 'a:', stream: () => 'b' },
      'streamPrefix',
    ],
    ['two trims', { connection, trim: { maxLen: 10, maxAgeMs: 10 } }, 'trim'],
    ['no trim threshold', { connection, trim: { exact: true } }, 'trim'],
    ['a zero maxLen', { connection, trim: { maxLen: 0 } }, 'trim.maxLen'],
    ['a bad minId', { connection, trim: { minId: 'yesterday' } }, 'trim.minId'],
    ['createStreams as text', { connection, createStreams: 'false' }, 'createStreams'],
    ['WAIT without a timeout', { connection, waitForReplicas: { replicas: 1 } }, 'waitForReplicas'],
    [
      'WAIT forever',
      { connection, waitForReplicas: { replicas: 1, timeoutMs: 0 } },
      'waitForReplicas.timeoutMs',
    ],
    [
      'a WAIT as long as the publish timeout',
      { connection, publishTimeoutMs: 1_000, waitForReplicas: { replicas: 1, timeoutMs: 1_000 } },
      'waitForReplicas.timeoutMs',
    ],
    [
      'zero replicas',
      { connection, waitForReplicas: { replicas: 0, timeoutMs: 10 } },
      'waitForReplicas.replicas',
    ],
    ['a fractional timeout', { connection, publishTimeoutMs: 1.5 }, 'publishTimeoutMs'],
    [
      'a backoff maximum below its start',
      { connection, reconnect: { initialDelayMs: 2_000, maxDelayMs: 1_000 } },
      'reconnect.maxDelayMs',
    ],
    ['a connection name with a space', { connection, connectionName: 'my app' }, 'connectionName'],
  ])('rejects %s', (_name, options, option) => {
    const error = errorOf(options);
    expect(error.option).toBe(option);
    expect(error.message).toMatch(/^Invalid RedisStreamsPublisher option ".+": .+\. .+/);
  });

  it('names a misspelt option and the one it likely meant', () => {
    expect(errorOf({ connection, streamPrefx: 'a' }).message).toMatch(
      /streamPrefx is not an option; did you mean streamPrefix\?/,
    );
    expect(errorOf({ connection, trim: { maxlen: 10 } }).message).toMatch(
      /trim\.maxlen is not an option; did you mean trim\.maxLen\?/,
    );
  });

  it('never echoes the URL (and its password) in a validation error', () => {
    expect(errorOf({ connection: 'redis://user:hunter2@redis:6379 x' }).message).not.toContain(
      'hunter2',
    );
  });
});

describe('RedisStreamsPublisher when Redis is unreachable', () => {
  it('reports an outage without the password, then fails fast during the reconnect backoff', async () => {
    const publisher = new RedisStreamsPublisher({
      connection: 'redis://outbox:hunter2@127.0.0.1:1/2',
      connectionTimeoutMs: 500,
      reconnect: { initialDelayMs: 60_000, maxDelayMs: 60_000 },
    });
    expect(inspect(publisher, { depth: 10, showHidden: true })).not.toContain('hunter2');
    expect(JSON.stringify(publisher)).not.toContain('hunter2');
    const signal = new AbortController().signal;
    const first = await publisher.publish([record], signal).catch((error: unknown) => error);
    expect(first).toBeInstanceOf(PublisherUnavailableError);
    expect((first as Error).message).toMatch(
      /^Could not connect to Redis at redis:\/\/127\.0\.0\.1:1\/2: .*ECONNREFUSED/,
    );
    expect((first as Error).message).not.toContain('hunter2');
    const started = Date.now();
    const second = await publisher.publish([record], signal).catch((error: unknown) => error);
    expect(second).toBeInstanceOf(PublisherUnavailableError);
    expect((second as Error).message).toMatch(/next connection attempt in \d+ ms/);
    expect(Date.now() - started).toBeLessThan(100);
    // A health check connects now, backoff or not.
    await expect(publisher.ping(AbortSignal.timeout(5_000))).rejects.toThrow(
      /^Could not connect to Redis at redis:\/\/127\.0\.0\.1:1\/2: /,
    );
    await publisher.close();
  });

  it('fails a message whose stream function answers no key, and sends nothing for an aborted batch', async () => {
    const publisher = new RedisStreamsPublisher({
      connection: 'redis://127.0.0.1:1',
      stream: (r) => (r.key === 'none' ? '' : r.topic),
    });
    const aborted = new AbortController();
    aborted.abort(new PublisherUnavailableError('shutting down'));
    const outcomes = await publisher.publish([{ ...record, key: 'none' }, record], aborted.signal);
    expect(outcomes[0]).toMatchObject({ ok: false, error: { name: 'PermanentPublishError' } });
    expect(outcomes[1]).toEqual({ ok: false, error: aborted.signal.reason, sent: false });
    await publisher.close();
  });
});
