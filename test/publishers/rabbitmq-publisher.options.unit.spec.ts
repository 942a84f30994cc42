import { inspect } from 'node:util';
import { OutboxOptionsError, PublisherUnavailableError, type OutboxRecord } from '../../lib';
import {
  RabbitMqPublisher,
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
} from '../../lib/publishers/rabbitmq';

const url = 'amqp://guest:guest@127.0.0.1:5672';
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
    resolveRabbitMqPublisherOptions(options as RabbitMqPublisherOptions);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('resolveRabbitMqPublisherOptions', () => {
  it('applies the documented defaults: default exchange, topic as routing key (a queue per topic)', () => {
    const resolved = resolveRabbitMqPublisherOptions({ url });
    expect(resolved).toMatchObject({
      maxOutstandingConfirms: 1_000,
      publishTimeoutMs: 5_000,
      heartbeat: 10,
      connectionTimeoutMs: 5_000,
      reconnect: { initialDelayMs: 500, maxDelayMs: 15_000 },
      connectionName: 'nestjs-outbox',
      outboxHeaders: true,
    });
    expect(resolveRabbitMqPublisherOptions({ url, outboxHeaders: false }).outboxHeaders).toBe(
      false,
    );
    expect(resolved.exchange(record)).toBe('');
    expect(resolved.routingKey(record)).toBe('orders');
  });

  it('takes an assertTopology that returns what amqplib answers (the one-liner of docs/publishers.md)', () => {
    // Typed Promise<void> before, this failed to compile (TS2322) in a user's app; `npm run
    // typecheck` (CI) compiles it.
    const options: RabbitMqPublisherOptions = {
      url,
      assertTopology: (ch) => ch.assertQueue('orders', { durable: true }),
    };
    expect(resolveRabbitMqPublisherOptions(options).assertTopology).toBe(options.assertTopology);
  });

  it('takes a fixed exchange or one per message', () => {
    expect(resolveRabbitMqPublisherOptions({ url, exchange: 'events' }).exchange(record)).toBe(
      'events',
    );
    const perType = resolveRabbitMqPublisherOptions({
      url,
      exchange: (r) => r.topic,
      routingKey: (r) => r.type,
    });
    expect([perType.exchange(record), perType.routingKey(record)]).toEqual([
      'orders',
      'order.created',
    ]);
  });

  it.each<[string, unknown, string]>([
    ['no URL', {}, 'url'],
    ['an http URL', { url: 'http://rabbit:5672' }, 'url'],
    ['a numeric exchange', { url, exchange: 1 }, 'exchange'],
    ['a string routing key', { url, routingKey: 'orders' }, 'routingKey'],
    ['zero outstanding confirms', { url, maxOutstandingConfirms: 0 }, 'maxOutstandingConfirms'],
    ['a fractional timeout', { url, publishTimeoutMs: 1.5 }, 'publishTimeoutMs'],
    ['a negative heartbeat', { url, heartbeat: -1 }, 'heartbeat'],
    [
      'a backoff maximum below its start',
      { url, reconnect: { initialDelayMs: 2_000, maxDelayMs: 1_000 } },
      'reconnect.maxDelayMs',
    ],
    ['a non-function topology', { url, assertTopology: {} }, 'assertTopology'],
    ['outboxHeaders as text', { url, outboxHeaders: 'false' }, 'outboxHeaders'],
  ])('rejects %s', (_name, options, option) => {
    const error = errorOf(options);
    expect(error.option).toBe(option);
    expect(error.message).toMatch(/^Invalid RabbitMqPublisher option ".+": .+\. .+/);
  });

  it('never echoes the URL (and its password) in a validation error', () => {
    expect(errorOf({ url: 'amqp://user:hunter2@rabbit:5672 x' }).message).not.toContain('hunter2');
  });
});

describe('RabbitMqPublisher when the broker is unreachable', () => {
  it('reports an outage without the password, then fails fast during the reconnect backoff', async () => {
    const publisher = new RabbitMqPublisher({
      url: 'amqp://outbox:hunter2@127.0.0.1:1/vhost',
      connectionTimeoutMs: 500,
      reconnect: { initialDelayMs: 60_000, maxDelayMs: 60_000 },
    });
    expect(inspect(publisher, { depth: 10, showHidden: true })).not.toContain('hunter2');
    expect(JSON.stringify(publisher)).not.toContain('hunter2');
    const signal = new AbortController().signal;
    const first = await publisher.publish([record], signal).catch((error: unknown) => error);
    expect(first).toBeInstanceOf(PublisherUnavailableError);
    expect((first as Error).message).toMatch(
      /^Could not connect to RabbitMQ at amqp:\/\/127\.0\.0\.1:1\/vhost: /,
    );
    expect((first as Error).message).not.toContain('hunter2');
    const started = Date.now();
    const second = await publisher.publish([record], signal).catch((error: unknown) => error);
    expect(second).toBeInstanceOf(PublisherUnavailableError);
    expect((second as Error).message).toMatch(/next connection attempt in \d+ ms/);
    expect(Date.now() - started).toBeLessThan(100);
    await publisher.close();
  });
});
