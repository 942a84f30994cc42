import type { Channel, Options } from 'amqplib';
import type { KnownOptionKeys, OptionFailure } from '../../options/option-checks';
import {
  PublisherOptionChecks,
  RECONNECT_OPTION_KEYS,
  type PublisherReconnectOption,
} from '../kit/publisher-options-check';
import type { ReconnectDelays } from '../kit/reconnect-backoff';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';

/** Options of {@link RabbitMqPublisher}. */
export interface RabbitMqPublisherOptions {
  /** `amqp://user:pass@host:5672/vhost` (or `amqps://`), or amqplib connect options. Never logged with its password. */
  url: string | Options.Connect;
  /** Socket and TLS options handed to `amqplib.connect` (certificates, `servername` …). @default none */
  socketOptions?: Record<string, unknown>;
  /**
   * The exchange a message is published to. The default exchange `''` routes a message to the
   * queue named by its routing key, so by default each topic is a queue.
   * @default ''
   */
  exchange?: string | ((record: OutboxRecord) => string);
  /** The routing key of a message. @default the message's `topic` */
  routingKey?: (record: OutboxRecord) => string;
  /**
   * Declares exchanges, queues and bindings; run on a channel of its own after every
   * (re)connection, before anything is published. A failure counts as a failed connection.
   * @default none (the topology is managed elsewhere)
   */
  assertTopology?: (channel: Channel) => Promise<unknown>;
  /** Most publishes awaiting a broker confirm at once; more wait for a slot. @default 1000 */
  maxOutstandingConfirms?: number;
  /**
   * How long a published message may wait for its confirm before it counts as failed (retried);
   * keep it below the dispatcher's `publishTimeoutMs`. @default 5000
   */
  publishTimeoutMs?: number;
  /** AMQP heartbeat in seconds, so a dead broker is noticed; 0 turns heartbeats off. @default 10 */
  heartbeat?: number;
  /** Time allowed to open the connection, in ms. @default 5000 */
  connectionTimeoutMs?: number;
  /** Waits between reconnection attempts: doubled after each failure, up to the maximum. */
  reconnect?: PublisherReconnectOption;
  /** Connection name shown in the management UI. @default 'nestjs-outbox' */
  connectionName?: string;
  /** The `app-id` property of every message. @default none */
  appId?: string;
  /**
   * Whether each message carries the `x-outbox-message-id`, `x-outbox-type`, `x-outbox-key` and
   * `x-outbox-publish-id` headers. With `false` a message carries only the headers of its own
   * (none, mostly): its id and type are in the `messageId` and `type` properties only, its
   * publish id is in `correlationId` (`x-outbox-publish:<id>`), and its key is not sent.
   * RabbitMQ and amqplib then handle far less per message (bench P1); consumers must read the
   * properties, not the headers. Every promise holds either way.
   * @default true
   */
  outboxHeaders?: boolean;
  /**
   * Sends messages as CloudEvents (the CloudEvents AMQP binding): `cloudEvents({ source })` from
   * `nestjs-outbox/cloudevents`. Binary mode puts the attributes in `cloudEvents_*` headers and
   * the content type in the `content-type` property; structured mode sends the event as a JSON
   * body. Such a message has no `x-outbox-*` headers (`outboxHeaders` applies to the others).
   * @default none (plain outbox messages)
   */
  cloudEvents?: OutboxCloudEvents;
}

/** Options with defaults applied and values checked. */
export interface ResolvedRabbitMqPublisherOptions {
  readonly url: string | Options.Connect;
  readonly socketOptions: Record<string, unknown>;
  readonly exchange: (record: OutboxRecord) => string;
  readonly routingKey: (record: OutboxRecord) => string;
  readonly assertTopology: ((channel: Channel) => Promise<unknown>) | undefined;
  readonly maxOutstandingConfirms: number;
  readonly publishTimeoutMs: number;
  readonly heartbeat: number;
  readonly connectionTimeoutMs: number;
  readonly reconnect: ReconnectDelays;
  readonly connectionName: string;
  readonly appId: string | undefined;
  readonly outboxHeaders: boolean;
  readonly cloudEvents: OutboxCloudEvents | undefined;
}

// Every other key is refused: a misspelt option would silently keep its default.
const OPTION_KEYS = {
  '': {
    url: true,
    socketOptions: true,
    exchange: true,
    routingKey: true,
    assertTopology: true,
    maxOutstandingConfirms: true,
    publishTimeoutMs: true,
    heartbeat: true,
    connectionTimeoutMs: true,
    reconnect: true,
    connectionName: true,
    appId: true,
    outboxHeaders: true,
    cloudEvents: true,
  } satisfies Record<keyof RabbitMqPublisherOptions, true>,
  reconnect: RECONNECT_OPTION_KEYS,
} satisfies KnownOptionKeys;

const checks: PublisherOptionChecks = new PublisherOptionChecks('RabbitMqPublisher');
const fail: OptionFailure = checks.fail;
const { show, integer } = checks;

type Routing = Pick<ResolvedRabbitMqPublisherOptions, 'exchange' | 'routingKey' | 'assertTopology'>;

function checkUrl(url: RabbitMqPublisherOptions['url']): void {
  if (typeof url === 'string') {
    if (!/^amqps?:\/\/[^\s]+$/i.test(url))
      fail(
        'url',
        'it is not an amqp:// or amqps:// URL',
        'Pass e.g. amqp://user:pass@rabbit:5672/vhost.',
      );
  } else if (url === null || typeof url !== 'object') {
    fail(
      'url',
      'it is missing',
      'Pass an amqp:// URL or amqplib connect options ({ hostname, port, username, password, vhost }).',
    );
  }
}

// Where a message goes: exchange, routing key, and the topology declared before publishing.
function resolveRouting(options: RabbitMqPublisherOptions): Routing {
  const { exchange } = options;
  if (exchange !== undefined && typeof exchange !== 'string' && typeof exchange !== 'function') {
    fail(
      'exchange',
      `${show(exchange)} is neither a string nor a function`,
      "Pass an exchange name, (record) => name, or leave it out for the default exchange ''.",
    );
  }
  checks.optionalFunction(
    options.routingKey,
    'routingKey',
    'Pass (record) => routingKey, or leave it out to use the topic.',
  );
  checks.optionalFunction(
    options.assertTopology,
    'assertTopology',
    'Pass async (channel) => { await channel.assertExchange(...); ... }.',
  );
  const fixedExchange = typeof exchange === 'string' ? exchange : undefined;
  return {
    exchange: typeof exchange === 'function' ? exchange : () => fixedExchange ?? '',
    routingKey: options.routingKey ?? ((record) => record.topic),
    assertTopology: options.assertTopology,
  };
}

/**
 * Merges the defaults into `RabbitMqPublisher` options and rejects invalid ones with a message
 * that says how to fix them. Pure: no I/O. Never puts the URL in a message.
 */
export function resolveRabbitMqPublisherOptions(
  options: RabbitMqPublisherOptions,
): ResolvedRabbitMqPublisherOptions {
  checks.optionsObject(options, "{ url: 'amqp://user:pass@host:5672' }");
  checks.knownKeys(options, OPTION_KEYS);
  checkUrl(options.url);
  const socketOptions = options.socketOptions ?? {};
  if (typeof socketOptions !== 'object' || socketOptions === null)
    fail('socketOptions', 'it is not an object', 'Pass socket/TLS options or leave it out.');
  const { exchange, routingKey, assertTopology } = resolveRouting(options);
  const reconnect = checks.reconnect(options.reconnect);
  const connectionName = options.connectionName ?? 'nestjs-outbox';
  if (typeof connectionName !== 'string')
    fail(
      'connectionName',
      `${show(connectionName)} is not a string`,
      "Leave it out for 'nestjs-outbox'.",
    );
  if (options.appId !== undefined && typeof options.appId !== 'string')
    fail('appId', `${show(options.appId)} is not a string`, 'Pass a string or leave it out.');
  const outboxHeaders = checks.flag(
    options.outboxHeaders,
    true,
    'outboxHeaders',
    'Pass false to send messages without the x-outbox-* headers, or leave it out.',
  );

  return {
    url: options.url,
    socketOptions,
    exchange,
    routingKey,
    assertTopology,
    maxOutstandingConfirms: integer(
      options.maxOutstandingConfirms,
      1_000,
      'maxOutstandingConfirms',
      1,
      1_000_000,
    ),
    publishTimeoutMs: checks.publishTimeout(options.publishTimeoutMs),
    heartbeat: integer(options.heartbeat, 10, 'heartbeat', 0, 3_600),
    connectionTimeoutMs: checks.connectTimeout(options.connectionTimeoutMs, 'connectionTimeoutMs'),
    reconnect,
    connectionName,
    appId: options.appId,
    outboxHeaders,
    cloudEvents: checks.cloudEvents(options.cloudEvents),
  };
}
