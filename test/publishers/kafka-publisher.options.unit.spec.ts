import { inspect } from 'node:util';
import {
  CompressionTypes,
  KafkaJSConnectionError,
  KafkaJSNonRetriableError,
  KafkaJSNumberOfRetriesExceeded,
  KafkaJSProtocolError,
  KafkaJSRequestTimeoutError,
  Partitioners,
} from 'kafkajs';
import { OutboxOptionsError, PublisherUnavailableError, type OutboxRecord } from '../../lib';
import {
  classifyKafkaError,
  KafkaPublisher,
  resolveKafkaPublisherOptions,
  type KafkaPublisherOptions,
} from '../../lib/publishers/kafka';

const brokers = ['127.0.0.1:9092'];

function errorOf(options: unknown): OutboxOptionsError {
  try {
    resolveKafkaPublisherOptions(options as KafkaPublisherOptions);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

// The shape kafkajs builds protocol errors from (lib/protocol/error.js).
const protocolError = (type: string, code: number, retriable: boolean) =>
  new KafkaJSProtocolError({
    type,
    code,
    retriable,
    message: `${type} from the broker`,
  } as unknown as Error);
// What kafkajs' retrier throws for a non-retriable error (lib/retry/index.js).
const nonRetriable = (cause: Error) =>
  new (KafkaJSNonRetriableError as unknown as new (e: Error, o: { cause: Error }) => Error)(cause, {
    cause,
  });
const retriesExceeded = (cause: Error) =>
  new (
    KafkaJSNumberOfRetriesExceeded as unknown as new (
      e: Error,
      o: { retryCount: number; retryTime: number },
    ) => Error
  )(cause, { retryCount: 3, retryTime: 400 });

describe('resolveKafkaPublisherOptions', () => {
  it('applies the documented defaults: idempotent, one request in flight, murmur2 partitioner, short retries', () => {
    const resolved = resolveKafkaPublisherOptions({ brokers });
    expect(resolved).toMatchObject({
      clientId: 'nestjs-outbox',
      ssl: false,
      connectionTimeout: 3_000,
      requestTimeout: 5_000,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
      compression: CompressionTypes.None,
      producer: { idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: true },
    });
    expect(resolved.producer.createPartitioner).toBe(Partitioners.DefaultPartitioner);
    const record = { topic: 'orders' } as OutboxRecord;
    expect(resolved.topic(record)).toBe('orders');
  });

  it('accepts up to 5 requests in flight with idempotence, and a broker function', () => {
    expect(
      resolveKafkaPublisherOptions({ brokers: () => brokers, producer: { maxInFlightRequests: 5 } })
        .producer.maxInFlightRequests,
    ).toBe(5);
  });

  it.each<[string, unknown, string]>([
    ['no brokers', { brokers: [] }, 'brokers'],
    ['a broker without port', { brokers: ['kafka'] }, 'brokers'],
    ['acks 1', { brokers, acks: 1 }, 'acks'],
    ['acks 0', { brokers, acks: 0 }, 'acks'],
    [
      'several requests in flight without idempotence',
      { brokers, producer: { idempotent: false, maxInFlightRequests: 2 } },
      'producer.maxInFlightRequests',
    ],
    [
      'more than 5 requests in flight',
      { brokers, producer: { maxInFlightRequests: 6 } },
      'producer.maxInFlightRequests',
    ],
    [
      'a transactional id',
      { brokers, producer: { transactionalId: 'tx' } },
      'producer.transactionalId',
    ],
    ['an unknown producer setting', { brokers, producer: { retries: 3 } }, 'producer.retries'],
    ['zero retries', { brokers, retry: { retries: 0 } }, 'retry.retries'],
    ['an unknown SASL mechanism', { brokers, sasl: { mechanism: 'kerberos' } }, 'sasl.mechanism'],
    [
      'SASL plain without password',
      { brokers, sasl: { mechanism: 'plain', username: 'u' } },
      'sasl',
    ],
    ['a non-function topic', { brokers, topic: 'orders' }, 'topic'],
    ['a negative timeout', { brokers, requestTimeout: -1 }, 'requestTimeout'],
    ['an unknown compression', { brokers, compression: 9 }, 'compression'],
  ])('rejects %s', (_name, options, option) => {
    const error = errorOf(options);
    expect(error.option).toBe(option);
    expect(error.message).toMatch(
      new RegExp(`^Invalid KafkaPublisher option "${option.replace('.', '\\.')}": .+\\. .+`),
    );
  });

  it('never echoes the SASL password in a validation error', () => {
    const error = errorOf({
      brokers,
      sasl: { mechanism: 'scram-sha-999', username: 'u', password: 'hunter2' },
    });
    expect(error.message).not.toContain('hunter2');
  });
});

describe('classifyKafkaError', () => {
  it.each<[string, unknown, string]>([
    [
      'a refused connection after retries',
      retriesExceeded(
        new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:9092'),
      ),
      'outage',
    ],
    [
      'a request timeout',
      new KafkaJSRequestTimeoutError('Request Produce(key: 0, version: 7) timed out'),
      'outage',
    ],
    // Never by message text: the publisher knows itself when it disconnected a producer.
    [
      'an untyped error that mentions a disconnect',
      new Error('The producer is disconnected'),
      'other',
    ],
    [
      'no leader after retries',
      retriesExceeded(protocolError('LEADER_NOT_AVAILABLE', 5, true)),
      'unavailable',
    ],
    ['not enough replicas', protocolError('NOT_ENOUGH_REPLICAS', 19, true), 'unavailable'],
    ['an oversize record batch', protocolError('MESSAGE_TOO_LARGE', 10, false), 'message'],
    [
      'an invalid topic, wrapped',
      nonRetriable(protocolError('INVALID_TOPIC_EXCEPTION', 17, false)),
      'topic',
    ],
    [
      'an unknown topic after retries',
      retriesExceeded(protocolError('UNKNOWN_TOPIC_OR_PARTITION', 3, true)),
      'topic',
    ],
    [
      'an out-of-order sequence',
      protocolError('OUT_OF_ORDER_SEQUENCE_NUMBER', 45, false),
      'producer',
    ],
    ['anything else', new Error('boom'), 'other'],
  ])('classifies %s', (_name, error, kind) => {
    expect(classifyKafkaError(error)).toBe(kind);
  });
});

describe('KafkaPublisher credentials', () => {
  it('keeps the SASL password out of inspection, serialisation and connection errors', async () => {
    const publisher = new KafkaPublisher({
      brokers: ['127.0.0.1:1'],
      sasl: { mechanism: 'plain', username: 'outbox', password: 'hunter2' },
      connectionTimeout: 200,
      retry: { retries: 1, initialRetryTime: 50, maxRetryTime: 50 },
    });
    expect(inspect(publisher, { depth: 10, showHidden: true })).not.toContain('hunter2');
    expect(JSON.stringify(publisher)).not.toContain('hunter2');
    const record: OutboxRecord = {
      id: '1',
      messageId: 'm',
      topic: 't',
      key: null,
      type: 't',
      payload: '{}',
      headers: {},
      attempts: 0,
      createdAt: new Date(),
    };
    const failure = await publisher
      .publish([record], new AbortController().signal)
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PublisherUnavailableError);
    expect(String((failure as Error).message)).not.toContain('hunter2');
    await publisher.close();
  });
});
