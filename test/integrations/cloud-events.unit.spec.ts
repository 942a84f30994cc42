import { OutboxOptionsError, type OutboxRecord } from '../../lib';
import { cloudEvents, type CloudEventsOptions } from '../../lib/integrations/cloudevents';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';

// The cloudEvents() options and what it makes of a message, without a broker (the brokers'
// bindings are proven end to end in test/publishers/cloud-events.spec.ts).

function record(overrides: Partial<OutboxRecord> = {}): OutboxRecord {
  return {
    id: '1',
    messageId: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
    topic: 'orders',
    key: 'order-7',
    type: 'order.created',
    payload: '{"total":12345678901234567890}',
    headers: {},
    attempts: 1,
    createdAt: new Date('2026-11-28T09:00:00.123Z'),
    ...overrides,
  } as OutboxRecord;
}

const refused = (options: unknown): OutboxOptionsError => {
  try {
    cloudEvents(options as CloudEventsOptions);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('accepted');
};

describe('cloudEvents() options', () => {
  it.each([
    [{}, 'source', 'not a non-empty string'],
    [{ source: '' }, 'source', 'not a non-empty string'],
    [{ source: 'has spaces in it' }, 'source', 'not a URI-reference'],
    [{ source: '/s', mode: 'batch' }, 'mode', 'not a content mode'],
    [{ source: '/s', mode: true }, 'mode', 'not a content mode'],
    [{ source: '/s', types: ['a'] }, 'types', 'not an object'],
    [{ source: '/s', types: { a: 'binari' } }, 'types.a', 'not a content mode'],
    [{ source: '/s', subject: 'key' }, 'subject', 'not a function'],
  ])('refuses %j at bootstrap: %s', (options, option, problem) => {
    const error = refused(options);
    expect(error.option).toBe(option);
    expect(error.message).toContain(problem);
  });

  it('refuses a misspelt option, naming the one meant', () => {
    const error = refused({ source: '/s', modes: 'binary' });
    expect(error.message).toContain('modes');
    expect(error.message).toContain('mode');
  });

  it('a publisher refuses a cloudEvents value that cloudEvents() did not make', () => {
    expect(
      () => new KafkaPublisher({ brokers: ['k:9092'], cloudEvents: { source: '/s' } as never }),
    ).toThrow(OutboxOptionsError);
    expect(
      () => new RabbitMqPublisher({ url: 'amqp://h', cloudEvents: 'binary' as never }),
    ).toThrow(/cloudEvents\(\{ source/);
  });
});

describe('cloudEvents() encode', () => {
  it('binary mode: the attributes as canonical strings, the content type apart', () => {
    const encoded = cloudEvents({ source: 'urn:example:orders' }).encode(
      record({
        headers: {
          'x-outbox-sequence': '42',
          traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        },
      }),
    );
    expect(encoded).toEqual({
      mode: 'binary',
      contentType: 'application/json',
      attributes: {
        specversion: '1.0',
        id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
        source: 'urn:example:orders',
        type: 'order.created',
        time: '2026-11-28T09:00:00.123Z',
        subject: 'order-7',
        partitionkey: 'order-7',
        sequence: '0000000000000042',
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      },
    });
  });

  it('structured mode: the JSON event format with the enqueued JSON text as data, untouched', () => {
    const encoded = cloudEvents({ source: '/orders', mode: 'structured' }).encode(
      record({ key: null }),
    );
    if (encoded?.mode !== 'structured') throw new Error(`got ${JSON.stringify(encoded)}`);
    // A number past 2^53 keeps its digits: the payload is never parsed and written again.
    expect(encoded.body.endsWith(',"data":{"total":12345678901234567890}}')).toBe(true);
    const event = JSON.parse(encoded.body) as Record<string, unknown>;
    expect(event).toMatchObject({
      specversion: '1.0',
      source: '/orders',
      type: 'order.created',
      datacontenttype: 'application/json',
    });
    expect(event).not.toHaveProperty('subject');
    expect(event).not.toHaveProperty('partitionkey');
  });

  it('structured mode: a binary payload as data_base64 with its content type', () => {
    const bytes = Buffer.from([0, 255, 1]);
    const encoded = cloudEvents({ source: '/s', mode: 'structured' }).encode(
      record({ encoding: 'binary', payload: bytes, contentType: 'application/avro' }),
    );
    if (encoded?.mode !== 'structured') throw new Error('not structured');
    const event = JSON.parse(encoded.body) as Record<string, unknown>;
    expect(event.data_base64).toBe(bytes.toString('base64'));
    expect(event.datacontenttype).toBe('application/avro');
    expect(event).not.toHaveProperty('data');
  });

  it('per event type: its own mode, or a plain message (undefined); mode false leaves the rest plain', () => {
    const encoder = cloudEvents({
      source: '/s',
      mode: false,
      types: { 'order.created': 'structured', 'order.noted': false },
    });
    expect(encoder.encode(record())?.mode).toBe('structured');
    expect(encoder.encode(record({ type: 'order.noted' }))).toBeUndefined();
    expect(encoder.encode(record({ type: 'order.paid' }))).toBeUndefined();
  });

  it('a subject of its own, or none', () => {
    const encoded = cloudEvents({ source: '/s', subject: (r) => `orders/${r.key}` }).encode(
      record(),
    );
    expect(encoded?.mode === 'binary' && encoded.attributes.subject).toBe('orders/order-7');
    const none = cloudEvents({ source: '/s', subject: () => undefined }).encode(record());
    expect(none?.mode === 'binary' && 'subject' in none.attributes).toBe(false);
  });
});
