import type { ConnectionOptions } from 'node:tls';
import {
  CompressionTypes,
  logLevel,
  Partitioners,
  type BrokersFunction,
  type ICustomPartitioner,
  type RetryOptions,
  type SASLOptions,
} from 'kafkajs';
import type { KnownOptionKeys, OptionFailure } from '../../options/option-checks';
import { PublisherOptionChecks } from '../kit/publisher-options-check';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';
import type { OutboxRecord } from '../../message/outbox-record.interface';

/** Producer settings a `KafkaPublisher` lets you change; the rest is fixed for correctness. */
export interface KafkaPublisherProducerOptions {
  /**
   * Partitioner. Named explicitly because kafkajs 2 changed its default: `DefaultPartitioner`
   * hashes keys with murmur2 exactly like the Java client, so a key lands in the same partition
   * whichever client wrote it. @default Partitioners.DefaultPartitioner
   */
  createPartitioner?: ICustomPartitioner;
  /** Idempotent producer: the broker drops duplicates of a retried request. @default true */
  idempotent?: boolean;
  /** Produce requests in flight per broker connection; at most 5 with idempotence, 1 without. @default 1 */
  maxInFlightRequests?: number;
  /** Let the broker create unknown topics (if it allows it). @default true */
  allowAutoTopicCreation?: boolean;
  /** Refresh topic metadata at least this often, in ms. @default 300000 */
  metadataMaxAge?: number;
}

/** Options of {@link KafkaPublisher}. */
export interface KafkaPublisherOptions {
  /** Bootstrap brokers as `host:port`, or a function resolving to them. */
  brokers: string[] | BrokersFunction;
  /** Client id shown in broker logs and quotas. @default 'nestjs-outbox' */
  clientId?: string;
  /** TLS: true for the system CAs, or Node TLS options. @default false */
  ssl?: boolean | ConnectionOptions;
  /** SASL credentials (plain, scram-sha-256/512, aws, oauthbearer); never logged. @default none */
  sasl?: SASLOptions;
  /** The Kafka topic of a message. @default the message's `topic` */
  topic?: (record: OutboxRecord) => string;
  /** Time allowed to open a broker connection, in ms. @default 3000 */
  connectionTimeout?: number;
  /** Time allowed for one broker request (and for the in-sync replicas' acks), in ms. @default 5000 */
  requestTimeout?: number;
  /**
   * kafkajs' own retries of one send. Kept short on purpose: the outbox table is the retry loop,
   * and a send must end well inside the dispatcher's `publishTimeoutMs`.
   * @default { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 }
   */
  retry?: RetryOptions;
  /** Required acknowledgements; only -1 (every in-sync replica) is accepted. @default -1 */
  acks?: -1;
  /** Compression of record batches. @default CompressionTypes.None */
  compression?: CompressionTypes;
  /**
   * kafkajs' own log level; entries go to the Nest logger with credentials redacted. Off by
   * default: failures already reach the outbox (outage warnings, `last_error`, dead-letter logs),
   * and kafkajs logs every reconnection attempt of an outage as an error.
   * @default logLevel.NOTHING
   */
  logLevel?: logLevel;
  /** Producer overrides. */
  producer?: KafkaPublisherProducerOptions;
  /**
   * Sends messages as CloudEvents (Kafka protocol binding): `cloudEvents({ source })` from
   * `nestjs-outbox/cloudevents`. Binary mode puts the attributes in `ce_*` headers and the
   * content type in `content-type`; structured mode sends the event as a JSON value. The key is
   * the message key either way. @default none (plain outbox messages)
   */
  cloudEvents?: OutboxCloudEvents;
}

/** Options with defaults applied and values checked. */
export interface ResolvedKafkaPublisherOptions {
  readonly brokers: string[] | BrokersFunction;
  readonly clientId: string;
  readonly ssl: boolean | ConnectionOptions;
  readonly sasl: SASLOptions | undefined;
  readonly topic: (record: OutboxRecord) => string;
  readonly connectionTimeout: number;
  readonly requestTimeout: number;
  readonly retry: RetryOptions;
  readonly compression: CompressionTypes;
  readonly logLevel: logLevel;
  readonly producer: {
    readonly createPartitioner: ICustomPartitioner;
    readonly idempotent: boolean;
    readonly maxInFlightRequests: number;
    readonly allowAutoTopicCreation: boolean;
    readonly metadataMaxAge: number | undefined;
  };
  readonly cloudEvents: OutboxCloudEvents | undefined;
}

const SASL_MECHANISMS = ['plain', 'scram-sha-256', 'scram-sha-512', 'aws', 'oauthbearer'];
const PRODUCER_KEYS = new Set([
  'createPartitioner',
  'idempotent',
  'maxInFlightRequests',
  'allowAutoTopicCreation',
  'metadataMaxAge',
]);

// Every other key is refused (a misspelt option would silently keep its default); `producer`
// has its own check below, with the reason some kafkajs settings are not accepted.
const OPTION_KEYS = {
  '': {
    brokers: true,
    clientId: true,
    ssl: true,
    sasl: true,
    topic: true,
    connectionTimeout: true,
    requestTimeout: true,
    retry: true,
    acks: true,
    compression: true,
    logLevel: true,
    producer: true,
    cloudEvents: true,
  } satisfies Record<keyof KafkaPublisherOptions, true>,
  retry: {
    retries: true,
    initialRetryTime: true,
    maxRetryTime: true,
    factor: true,
    multiplier: true,
    restartOnFailure: true,
  } satisfies Record<keyof RetryOptions, true>,
} satisfies KnownOptionKeys;

const checks: PublisherOptionChecks = new PublisherOptionChecks('KafkaPublisher');
const fail: OptionFailure = checks.fail;
const { show, integer } = checks;

type Connection = Pick<ResolvedKafkaPublisherOptions, 'brokers' | 'clientId' | 'ssl' | 'sasl'>;
type Delivery = Pick<ResolvedKafkaPublisherOptions, 'topic' | 'compression' | 'logLevel'>;

function checkBrokers(brokers: KafkaPublisherOptions['brokers']): void {
  if (typeof brokers === 'function') return;
  if (
    !Array.isArray(brokers) ||
    brokers.length === 0 ||
    !brokers.every((b) => typeof b === 'string' && /^[^\s:]+:\d+$/.test(b))
  ) {
    fail(
      'brokers',
      'it is not a non-empty list of "host:port" strings',
      "Pass e.g. ['kafka-1:9092', 'kafka-2:9092'] or a function returning such a list.",
    );
  }
}

function checkSasl(sasl: SASLOptions | undefined): void {
  if (sasl === undefined) return;
  // Never echo the object itself: it holds the password.
  const mechanism = (sasl as { mechanism?: unknown } | null)?.mechanism;
  if (typeof mechanism !== 'string' || !SASL_MECHANISMS.includes(mechanism)) {
    fail('sasl.mechanism', 'it is missing or unknown', `Use one of ${SASL_MECHANISMS.join(', ')}.`);
  }
  if (mechanism === 'plain' || mechanism.startsWith('scram-')) {
    const { username, password } = sasl as { username?: unknown; password?: unknown };
    if (typeof username !== 'string' || username === '' || typeof password !== 'string') {
      fail(
        'sasl',
        `mechanism ${mechanism} needs a username and a password (strings)`,
        'Pass { mechanism, username, password }.',
      );
    }
  }
}

function resolveConnection(options: KafkaPublisherOptions): Connection {
  checkBrokers(options.brokers);
  const clientId = options.clientId ?? 'nestjs-outbox';
  if (typeof clientId !== 'string' || clientId.trim() === '') {
    fail(
      'clientId',
      `${show(clientId)} is not a non-empty string`,
      "Leave it out for 'nestjs-outbox'.",
    );
  }
  const ssl = options.ssl ?? false;
  if (typeof ssl !== 'boolean' && (typeof ssl !== 'object' || ssl === null)) {
    fail(
      'ssl',
      'it is neither a boolean nor TLS options',
      'Pass true, false or tls.ConnectionOptions.',
    );
  }
  checkSasl(options.sasl);
  return { brokers: options.brokers, clientId, ssl, sasl: options.sasl };
}

/** `value` if it is one of the values of the kafkajs enum `values` (`what` names the enum). */
function member<T>(
  value: T,
  values: Readonly<Record<string, T | string>>,
  option: string,
  what: string,
  fix: string,
): T {
  if (!Object.values(values).includes(value)) fail(option, `${show(value)} is not ${what}`, fix);
  return value;
}

// Where and how records are written: topic, acknowledgements, compression, kafkajs logging.
function resolveDelivery(options: KafkaPublisherOptions): Delivery {
  checks.optionalFunction(
    options.topic,
    'topic',
    'Pass (record) => topicName, or leave it out to use the message topic.',
  );
  const acks = (options as { acks?: unknown }).acks;
  if (acks !== undefined && acks !== -1) {
    fail(
      'acks',
      `${show(acks)} would count a message as published before every in-sync replica has it, so a broker failure could lose it`,
      'Leave acks out (it is always -1).',
    );
  }
  const compression = member(
    options.compression ?? CompressionTypes.None,
    CompressionTypes,
    'compression',
    'a CompressionTypes value',
    'Use CompressionTypes.None, GZIP, Snappy, LZ4 or ZSTD (the last three need a codec registered).',
  );
  const level = member(
    options.logLevel ?? logLevel.NOTHING,
    logLevel,
    'logLevel',
    'a kafkajs logLevel',
    'Use logLevel.NOTHING, ERROR, WARN, INFO or DEBUG.',
  );
  return { topic: options.topic ?? ((record) => record.topic), compression, logLevel: level };
}

function resolveRetry(value: RetryOptions | undefined): RetryOptions {
  const retry = value ?? {};
  if (typeof retry !== 'object' || retry === null)
    fail('retry', 'it is not an object', 'Pass kafkajs RetryOptions or leave it out.');
  return {
    ...retry,
    retries: integer(retry.retries, 3, 'retry.retries', 1, 100),
    initialRetryTime: integer(retry.initialRetryTime, 100, 'retry.initialRetryTime', 1, 60_000),
    maxRetryTime: integer(retry.maxRetryTime, 1_000, 'retry.maxRetryTime', 1, 600_000),
  };
}

// Refuses the producer settings the publisher does not take, saying why.
function checkProducerKeys(producer: object): void {
  for (const key of Object.keys(producer)) {
    if (key === 'transactionalId' || key === 'transactionTimeout') {
      fail(
        `producer.${key}`,
        'transactions are not used by the outbox (the database transaction already makes the write atomic)',
        `Remove producer.${key}.`,
      );
    }
    if (!PRODUCER_KEYS.has(key)) {
      fail(
        `producer.${key}`,
        'it is not a producer setting the publisher supports',
        `Use one of ${[...PRODUCER_KEYS].join(', ')}; retries go in the top-level retry option.`,
      );
    }
  }
}

// Idempotence and requests in flight, which together decide whether a retry can reorder a key.
function resolveProducerOrdering(
  producer: KafkaPublisherProducerOptions,
): Pick<ResolvedKafkaPublisherOptions['producer'], 'idempotent' | 'maxInFlightRequests'> {
  const idempotent = checks.flag(
    producer.idempotent,
    true,
    'producer.idempotent',
    'Use true (recommended) or false.',
  );
  const maxInFlightRequests = integer(
    producer.maxInFlightRequests,
    1,
    'producer.maxInFlightRequests',
    1,
    5,
  );
  if (!idempotent && maxInFlightRequests > 1) {
    fail(
      'producer.maxInFlightRequests',
      `${maxInFlightRequests} requests in flight without idempotence can reorder a key's messages when a request is retried`,
      'Keep maxInFlightRequests at 1, or leave producer.idempotent on.',
    );
  }
  return { idempotent, maxInFlightRequests };
}

function resolveProducer(
  value: KafkaPublisherProducerOptions | undefined,
): ResolvedKafkaPublisherOptions['producer'] {
  const producer = value ?? {};
  if (typeof producer !== 'object' || producer === null)
    fail('producer', 'it is not an object', 'Pass producer overrides or leave it out.');
  checkProducerKeys(producer);
  const { idempotent, maxInFlightRequests } = resolveProducerOrdering(producer);
  const createPartitioner = producer.createPartitioner ?? Partitioners.DefaultPartitioner;
  if (typeof createPartitioner !== 'function') {
    fail(
      'producer.createPartitioner',
      'it is not a partitioner factory',
      'Pass Partitioners.DefaultPartitioner (murmur2, like the Java client) or your own factory.',
    );
  }
  const allowAutoTopicCreation = checks.flag(
    producer.allowAutoTopicCreation,
    true,
    'producer.allowAutoTopicCreation',
    'Use true or false.',
  );
  return {
    createPartitioner,
    idempotent,
    maxInFlightRequests,
    allowAutoTopicCreation,
    metadataMaxAge:
      producer.metadataMaxAge === undefined
        ? undefined
        : integer(producer.metadataMaxAge, 300_000, 'producer.metadataMaxAge', 1_000, 86_400_000),
  };
}

/**
 * Merges the defaults into `KafkaPublisher` options and rejects settings that would lose or
 * reorder messages, with a message that says how to fix them. Pure: no I/O.
 */
export function resolveKafkaPublisherOptions(
  options: KafkaPublisherOptions,
): ResolvedKafkaPublisherOptions {
  checks.optionsObject(options, "{ brokers: ['host:9092'] }");
  checks.knownKeys(options, OPTION_KEYS);
  const { brokers, clientId, ssl, sasl } = resolveConnection(options);
  const { topic, compression, logLevel: level } = resolveDelivery(options);
  const retry = resolveRetry(options.retry);
  const producer = resolveProducer(options.producer);
  return {
    brokers,
    clientId,
    ssl,
    sasl,
    topic,
    connectionTimeout: integer(options.connectionTimeout, 3_000, 'connectionTimeout', 100, 600_000),
    requestTimeout: integer(options.requestTimeout, 5_000, 'requestTimeout', 100, 600_000),
    retry,
    compression,
    logLevel: level,
    producer,
    cloudEvents: checks.cloudEvents(options.cloudEvents),
  };
}
