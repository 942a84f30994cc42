import { OutboxEvent, OutboxOptionsError } from '../../lib';
import { getOutboxEventClassMetadata } from '../../lib/message/outbox-event.decorator';

// @OutboxEvent() refuses a key of its options it does not read when the class is defined, as
// every options object does: `{ topic, dedupKey }` enqueued every instance without the
// idempotency it asked for, `personal: { subject, field }` sealed the whole payload, and a
// misspelt policy key waited for the bootstrap of an instance listing the class in `events`.

/** The error defining a class throws, or an Error saying it did not throw. */
function refusal(define: () => unknown): OutboxOptionsError {
  try {
    define();
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('not refused');
}

describe('@OutboxEvent() options', () => {
  it('refuses an unknown key when the class is defined, naming the key and the accepted ones', () => {
    const error = refusal(() => {
      @OutboxEvent({ topic: 'orders', dedupKey: 'orderId' } as never)
      class OrderPlaced {
        readonly orderId = 'o-1';
      }
      return OrderPlaced;
    });
    expect(error.option).toBe('dedupKey');
    expect(error.message).toBe(
      'Invalid @OutboxEvent() options: dedupKey is not an option; did you mean dedupeKey? ' +
        'Accepted options: topic, type, key, headers, dedupeKey, tenant, attributes, ' +
        'contentType, encode, validatePayload, policy, personal. Nothing was done.',
    );
  });

  it.each([
    [{ topic: 'users', personal: { subject: 'userId', field: ['email'] } }, 'personal.field'],
    [{ topic: 'orders', policy: { maxAgeMS: 60_000 } }, 'policy.maxAgeMS'],
    [{ topic: 'orders', policy: { retry: { maxAttempt: 3 } } }, 'policy.retry.maxAttempt'],
  ])('refuses an unknown key of personal and of the policy: %j', (options, path) => {
    const error = refusal(() => OutboxEvent(options as never));
    expect(error.option).toBe(path);
    expect(error.message).toMatch(
      new RegExp(`^Invalid @OutboxEvent\\(\\) options: ${path.replace(/\./g, '\\.')} is not`),
    );
  });

  it('points a policy key given at the top level to the policy', () => {
    expect(refusal(() => OutboxEvent({ topic: 'orders', maxAgeMs: 1 } as never)).message).toContain(
      'did you mean policy.maxAgeMs?',
    );
  });

  it('takes every known key, and any header name', () => {
    @OutboxEvent<Everything>({
      topic: 'users',
      type: 'user.renamed',
      key: 'userId',
      headers: { 'x-any-name': 'v' },
      dedupeKey: (e) => e.userId,
      tenant: 'tenant',
      attributes: { kafka: { partition: 1 } },
      validatePayload: false,
      policy: { onDeadLetter: 'skip', maxAgeMs: 60_000, retry: { maxAttempts: 3 } },
      personal: { subject: 'userId', fields: ['email'] },
    })
    class Everything {
      constructor(
        readonly userId: string,
        readonly tenant: string,
        readonly email: string,
      ) {}
    }
    @OutboxEvent<Binary>({
      topic: 'avro',
      contentType: 'application/avro',
      encode: () => Buffer.from(''),
    })
    class Binary {}
    expect(getOutboxEventClassMetadata(Everything)).toMatchObject({
      topic: 'users',
      type: 'user.renamed',
      policy: { retry: { maxAttempts: 3 } },
    });
    expect(getOutboxEventClassMetadata(Binary)).toMatchObject({ type: 'Binary' });
  });
});
