import { retryDelay } from '../../lib/dispatch/pipeline/retry-backoff';
import { describeError, redactSecrets } from '../../lib/internal/describe-error';

describe('retryDelay', () => {
  const policy = { initialDelayMs: 100, maxDelayMs: 1_000, factor: 2, jitter: 0 };

  it('grows exponentially and is capped', () => {
    expect([1, 2, 3, 4, 5, 6].map((a) => retryDelay(a, policy))).toEqual([
      100, 200, 400, 800, 1_000, 1_000,
    ]);
  });

  it('stays a number after as many attempts as unlimited retries reach', () => {
    expect(retryDelay(5_000, policy)).toBe(1_000);
    expect(retryDelay(5_000, { ...policy, initialDelayMs: 0, maxDelayMs: 0 })).toBe(0);
    expect(retryDelay(5_000, { ...policy, initialDelayMs: 0, factor: 100 })).toBe(0);
  });

  it('jitters downwards by at most the jitter fraction', () => {
    expect(retryDelay(3, { ...policy, jitter: 0.5 }, () => 1)).toBe(200);
    expect(retryDelay(3, { ...policy, jitter: 0.5 }, () => 0)).toBe(400);
  });
});

describe('describeError', () => {
  it('redacts credentials from URLs and key=value pairs', () => {
    expect(redactSecrets('connect amqp://app:s3cret@rabbit:5672/vh failed')).toBe(
      'connect amqp://app:***@rabbit:5672/vh failed',
    );
    expect(redactSecrets('password=hunter2 user=bob')).toBe('password=*** user=bob');
    expect(describeError(new Error('postgres://u:p@db/x refused'))).toBe(
      'Error: postgres://u:***@db/x refused',
    );
  });

  it('truncates long errors', () => {
    expect(describeError('x'.repeat(5_000)).length).toBeLessThanOrEqual(2_000);
  });
});
