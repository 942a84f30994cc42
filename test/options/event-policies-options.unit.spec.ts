import { DataSource } from 'typeorm';
import {
  OutboxEvent,
  OutboxOptionsError,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

const publisher: OutboxPublisher = {
  publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
};
const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });

@OutboxEvent({
  topic: 'payments',
  type: 'payment.captured',
  policy: { onDeadLetter: 'block', retry: { maxAttempts: 20, initialDelayMs: 500 } },
})
class PaymentCaptured {}

@OutboxEvent({
  topic: 'cache',
  type: 'cache.invalidate',
  policy: { onDeadLetter: 'skip', maxAgeMs: 60_000 },
})
class CacheInvalidated {}

@OutboxEvent({ topic: 'orders' })
class OrderPlaced {}

function resolve(extra: Partial<OutboxModuleOptions>) {
  return resolveOutboxOptions({ dataSource, publisher, ...extra });
}

function errorOf(extra: unknown): OutboxOptionsError {
  try {
    resolve(extra as Partial<OutboxModuleOptions>);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('per-event-type policies (events, policies)', () => {
  it('merges each type over the module defaults and names its source', () => {
    const { policies, ordering } = resolve({
      retry: { maxAttempts: 7, initialDelayMs: 100, maxDelayMs: 200 },
      events: [PaymentCaptured, CacheInvalidated, OrderPlaced],
      policies: { 'stock.moved': { deadRetentionMs: 3_600_000 } },
    });
    const payment = policies.policyFor('payment.captured');
    expect(payment.name).toBe('payment.captured');
    expect(payment.retry.maxAttempts).toBe(20);
    // The module's cap is below the type's first delay: the type's cap rises to it.
    expect(payment.retry.maxDelayMs).toBe(500);
    expect(policies.policyFor('cache.invalidate')).toMatchObject({
      onDeadLetter: 'skip',
      maxAgeMs: 60_000,
      retry: { maxAttempts: 7 },
    });
    expect(policies.policyFor('stock.moved').deadRetentionMs).toBe(3_600_000);
    expect(policies.policyFor('OrderPlaced')).toBe(policies.default);
    expect(policies.default).toMatchObject({ name: 'default', maxAgeMs: 0, onDeadLetter: 'block' });
    // Only the type whose dead letters differ from the module's reaches the store's SQL.
    expect(ordering.queue.deadLetterExceptions).toEqual(['cache.invalidate']);
  });

  it('leaves the queue policy as it was when no policy changes onDeadLetter', () => {
    const { ordering } = resolve({ events: [PaymentCaptured] });
    expect(ordering.queue).not.toHaveProperty('deadLetterExceptions');
  });

  it.each<[string, unknown, RegExp]>([
    [
      'a type in both places',
      { events: [PaymentCaptured], policies: { 'payment.captured': {} } },
      /policies\["payment.captured"\]".*also has a policy from events\[0\]/,
    ],
    [
      'an unknown policy key',
      { policies: { a: { onDeadletter: 'skip' } } },
      /policies\["a"\]\.onDeadletter is not an option; did you mean .*onDeadLetter/,
    ],
    [
      'an unknown retry key',
      { policies: { a: { retry: { maxAttempt: 1 } } } },
      /policies\["a"\]\.retry\.maxAttempt is not an option/,
    ],
    ['a bad onDeadLetter', { policies: { a: { onDeadLetter: 'drop' } } }, /"drop" is not a policy/],
    [
      'a bad maxAttempts',
      { policies: { a: { retry: { maxAttempts: 0 } } } },
      /maxAttempts.*not a whole number from 1 to 1000/,
    ],
    [
      'a type name with a quote',
      { policies: { "it's": { onDeadLetter: 'skip' } } },
      /cannot have a policy/,
    ],
    ['a negative expiry', { policies: { a: { maxAgeMs: -1 } } }, /maxAgeMs/],
    [
      'a class without @OutboxEvent',
      { events: [class Plain {}] },
      /events\[0\]".*Plain is not a class decorated/,
    ],
    [
      'retention beside delete-at-settle',
      { cleaner: { deliveredRetentionMs: 0 }, policies: { a: { deliveredRetentionMs: 1000 } } },
      /cleaner.deliveredRetentionMs is 0/,
    ],
    ['policies that is not an object', { policies: [] }, /"policies": \[\] is not an object/],
  ])('refuses %s at bootstrap', (_name, extra, message) => {
    expect(errorOf(extra).message).toMatch(message);
  });
});
