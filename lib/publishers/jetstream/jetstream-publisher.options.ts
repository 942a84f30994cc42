import type { KnownOptionKeys, OptionFailure } from '../../options/option-checks';
import {
  PublisherOptionChecks,
  RECONNECT_OPTION_KEYS,
  type PublisherReconnectOption,
} from '../kit/publisher-options-check';
import type { ReconnectDelays } from '../kit/reconnect-backoff';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';
import type { NatsAuthenticator, NatsCredentials, NatsTlsOptions } from './nats-client';

/** Options of {@link JetStreamPublisher}. */
export interface JetStreamPublisherOptions {
  /**
   * The NATS servers, `nats://host:4222` or `host:4222` (one or a list: the client tries them in
   * turn). Credentials in a URL are used but never logged.
   */
  servers: string | string[];
  /** Connection name shown in the server's monitoring. @default 'nestjs-outbox' */
  name?: string;
  /** User and password, when the server asks for them; never logged. @default none */
  user?: string;
  pass?: string;
  /** Token authentication; never logged. @default none */
  token?: string;
  /** NKey, JWT or credentials-file authentication (`credsAuthenticator(...)` …). @default none */
  authenticator?: NatsAuthenticator | NatsAuthenticator[];
  /** TLS options (certificates, CA); `tls://` servers turn TLS on too. @default none */
  tls?: NatsTlsOptions;
  /**
   * The subject a message is published to; a JetStream stream must capture it. A message's
   * `jetstream.subject` attribute wins over it. @default the message's `topic`
   */
  subject?: (record: OutboxRecord) => string;
  /**
   * The stream a message must land in (sent as `Nats-Expected-Stream`): a message whose subject
   * another stream captures is refused and dead-lettered instead of stored there. @default none
   */
  expectedStream?: string | ((record: OutboxRecord) => string | undefined);
  /** The JetStream domain (leaf nodes, hubs), for the API calls of `ping()` and the stream lookup. @default none */
  domain?: string;
  /**
   * How long a published message may wait for its `PubAck` before it counts as failed (retried:
   * the stream's duplicate window drops the copy if the first one was stored); keep it below
   * the dispatcher's `publishTimeoutMs`. @default 5000
   */
  publishTimeoutMs?: number;
  /** Time allowed to open the connection, in ms. @default 5000 */
  connectTimeoutMs?: number;
  /**
   * How often the client pings the server, in ms; two unanswered pings close the connection,
   * so a dead link is noticed. @default 10000
   */
  pingIntervalMs?: number;
  /**
   * Waits between connection attempts after a failure, doubled each time up to the maximum.
   * The client's own reconnection is off: a lost connection fails what was in flight at once
   * (an outage) instead of holding it, and the next publish or `ping()` connects again.
   */
  reconnect?: PublisherReconnectOption;
  /**
   * Sends messages as CloudEvents (the CloudEvents NATS binding): `cloudEvents({ source })` from
   * `nestjs-outbox/cloudevents`. Binary mode puts every attribute in a `ce-*` header
   * (percent-encoded, as the binding says); structured mode sends the event as a JSON body with
   * `content-type: application/cloudevents+json`. `Nats-Msg-Id` is the message id either way.
   * @default none (plain outbox messages)
   */
  cloudEvents?: OutboxCloudEvents;
}

/** Options with defaults applied and values checked. */
export interface ResolvedJetStreamPublisherOptions extends NatsCredentials {
  readonly servers: readonly string[];
  readonly name: string;
  readonly subject: (record: OutboxRecord) => string;
  readonly expectedStream: (record: OutboxRecord) => string | undefined;
  readonly domain: string | undefined;
  readonly publishTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly pingIntervalMs: number;
  readonly reconnect: ReconnectDelays;
  readonly cloudEvents: OutboxCloudEvents | undefined;
}

// Every other key is refused: a misspelt option would silently keep its default.
const OPTION_KEYS = {
  '': {
    servers: true,
    name: true,
    user: true,
    pass: true,
    token: true,
    authenticator: true,
    tls: true,
    subject: true,
    expectedStream: true,
    domain: true,
    publishTimeoutMs: true,
    connectTimeoutMs: true,
    pingIntervalMs: true,
    reconnect: true,
    cloudEvents: true,
  } satisfies Record<keyof JetStreamPublisherOptions, true>,
  reconnect: RECONNECT_OPTION_KEYS,
} satisfies KnownOptionKeys;

const checks: PublisherOptionChecks = new PublisherOptionChecks('JetStreamPublisher');
const fail: OptionFailure = checks.fail;
const { show, integer } = checks;

// A stream or domain name: what the server accepts in an API subject token.
// eslint-disable-next-line no-control-regex
const NAME = /^[^\s.*>/\\\u0000-\u001f]{1,255}$/u;

type Routing = Pick<ResolvedJetStreamPublisherOptions, 'subject' | 'expectedStream' | 'domain'>;

function resolveServers(value: JetStreamPublisherOptions['servers']): string[] {
  const servers = typeof value === 'string' ? [value] : value;
  // Never echo the values: a URL may hold a password.
  if (
    !Array.isArray(servers) ||
    servers.length === 0 ||
    !servers.every((s) => typeof s === 'string' && s !== '' && !/\s/.test(s))
  ) {
    fail(
      'servers',
      'it is not a server address or a non-empty list of them',
      "Pass e.g. 'nats://127.0.0.1:4222' or ['nats://n1:4222', 'nats://n2:4222'].",
    );
  }
  return [...servers];
}

// Never echo a credential: only say which option is wrong.
function resolveCredentials(options: JetStreamPublisherOptions): NatsCredentials {
  for (const key of ['user', 'pass', 'token'] as const) {
    const value: unknown = options[key];
    if (value !== undefined && typeof value !== 'string')
      fail(key, 'it is not a string', `Pass ${key} as a string or leave it out.`);
  }
  if ((options.user === undefined) !== (options.pass === undefined))
    fail('user', 'user and pass go together', 'Pass both user and pass, or neither.');
  const { authenticator } = options;
  const authenticators: unknown[] = Array.isArray(authenticator) ? authenticator : [authenticator];
  if (authenticator !== undefined && !authenticators.every((a) => typeof a === 'function'))
    fail(
      'authenticator',
      'it is not an authenticator function (or a list of them)',
      'Pass e.g. credsAuthenticator(bytes) or nkeyAuthenticator(seed) from @nats-io/transport-node.',
    );
  if (options.tls !== undefined && (typeof options.tls !== 'object' || options.tls === null))
    fail('tls', 'it is not an object', 'Pass TLS options ({ caFile, certFile, keyFile … }).');
  return {
    user: options.user,
    pass: options.pass,
    token: options.token,
    authenticator,
    tls: options.tls,
  };
}

function resolveRouting(options: JetStreamPublisherOptions): Routing {
  checks.optionalFunction(
    options.subject,
    'subject',
    'Pass (record) => subject, or leave it out to publish to the topic.',
  );
  const { expectedStream, domain } = options;
  if (typeof expectedStream === 'string' && !NAME.test(expectedStream)) {
    fail(
      'expectedStream',
      `${show(expectedStream)} is not a stream name (no whitespace, ".", "*", ">", "/" or "\\")`,
      'Pass the name of the stream the messages must land in.',
    );
  } else if (
    expectedStream !== undefined &&
    typeof expectedStream !== 'string' &&
    typeof expectedStream !== 'function'
  ) {
    fail(
      'expectedStream',
      `${show(expectedStream)} is neither a stream name nor a function`,
      'Pass a stream name, (record) => name, or leave it out.',
    );
  }
  if (domain !== undefined && (typeof domain !== 'string' || !NAME.test(domain))) {
    fail(
      'domain',
      `${show(domain)} is not a JetStream domain name`,
      'Pass the domain or leave it out.',
    );
  }
  return {
    subject: options.subject ?? ((record) => record.topic),
    expectedStream:
      typeof expectedStream === 'function' ? expectedStream : () => expectedStream ?? undefined,
    domain,
  };
}

/**
 * Merges the defaults into `JetStreamPublisher` options and rejects invalid ones with a message
 * that says how to fix them. Pure: no I/O. Never puts a server URL or a credential in a message.
 */
export function resolveJetStreamPublisherOptions(
  options: JetStreamPublisherOptions,
): ResolvedJetStreamPublisherOptions {
  checks.optionsObject(options, "{ servers: 'nats://host:4222' }");
  checks.knownKeys(options, OPTION_KEYS);
  const servers = resolveServers(options.servers);
  const credentials = resolveCredentials(options);
  const routing = resolveRouting(options);
  const name = options.name ?? 'nestjs-outbox';
  if (typeof name !== 'string' || name.trim() === '')
    fail('name', `${show(name)} is not a non-empty string`, "Leave it out for 'nestjs-outbox'.");
  return {
    servers,
    name,
    ...credentials,
    ...routing,
    publishTimeoutMs: checks.publishTimeout(options.publishTimeoutMs),
    connectTimeoutMs: checks.connectTimeout(options.connectTimeoutMs, 'connectTimeoutMs'),
    pingIntervalMs: integer(options.pingIntervalMs, 10_000, 'pingIntervalMs', 1_000, 3_600_000),
    reconnect: checks.reconnect(options.reconnect),
    cloudEvents: checks.cloudEvents(options.cloudEvents),
  };
}
