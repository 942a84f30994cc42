import type { RedisOptions } from 'ioredis';
import type { KnownOptionKeys, OptionFailure } from '../../options/option-checks';
import {
  PublisherOptionChecks,
  RECONNECT_OPTION_KEYS,
  type PublisherReconnectOption,
} from '../kit/publisher-options-check';
import type { ReconnectDelays } from '../kit/reconnect-backoff';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';

/**
 * How each stream is trimmed as entries are added (`XADD … MAXLEN|MINID [~|=] threshold`). One
 * of `maxLen` (keep about that many entries), `maxAgeMs` (drop entries older than that: `MINID`
 * of now minus the age, on this process's clock) or `minId` (drop entries below that id).
 */
export type RedisStreamsTrim =
  | {
      /** Entries a stream keeps: its oldest go as new ones are added. */
      readonly maxLen: number;
      /** `true`: exactly (`=`, slower); `false`: about (`~`, whole macro nodes). @default false */
      readonly exact?: boolean;
    }
  | {
      /** Entries older than this many ms go (stream ids are the Redis server's ms clock). */
      readonly maxAgeMs: number;
      /** @default false */
      readonly exact?: boolean;
    }
  | {
      /** Entries whose id is below this one go: a stream id, or a function called per batch. */
      readonly minId: string | (() => string);
      /** @default false */
      readonly exact?: boolean;
    };

/** Options of {@link RedisStreamsPublisher}. */
export interface RedisStreamsPublisherOptions {
  /**
   * `redis://user:pass@host:6379/0` (`rediss://` for TLS), or ioredis options (`host`, `port`,
   * `username`, `password`, `db`, `tls`, `sentinels` and `name` …). Never logged with its
   * password. The publisher opens a connection of its own with these.
   */
  connection: string | RedisOptions;
  /** Put before a message's topic to make its stream key (`'events:'` → `events:orders`). @default '' */
  streamPrefix?: string;
  /** The stream key of a message, instead of `streamPrefix` + topic. @default none */
  stream?: (record: OutboxRecord) => string;
  /** Trim streams as entries are added. @default none (streams grow until trimmed elsewhere) */
  trim?: RedisStreamsTrim;
  /**
   * `false` adds `NOMKSTREAM`: an entry for a stream that does not exist yet is not added, and
   * the message fails (retried, then dead-lettered) instead of creating a stream nobody reads.
   * @default true
   */
  createStreams?: boolean;
  /**
   * Count a batch as published only once this many replicas have its entries: `WAIT replicas
   * timeoutMs` after the batch's XADDs, in the same round trip. A batch that falls short is
   * handed back as an outage (see docs/publishers.md: it is published again, a duplicate).
   * @default none (acknowledged by the primary)
   */
  waitForReplicas?: {
    /** Replicas that must acknowledge, at least 1. */
    readonly replicas: number;
    /** How long Redis may wait for them, in ms (WAIT's timeout; 0, forever, is refused). */
    readonly timeoutMs: number;
  };
  /**
   * How long a batch's pipeline may wait for Redis's answer; its unanswered entries then fail
   * (retried: Redis may have them) and the connection is opened anew. Keep it below the
   * dispatcher's `publishTimeoutMs`. @default 5000
   */
  publishTimeoutMs?: number;
  /** Time allowed to connect (TCP, TLS, AUTH and the ready check), in ms. @default 5000 */
  connectionTimeoutMs?: number;
  /** Waits between reconnection attempts: doubled after each failure, up to the maximum. */
  reconnect?: PublisherReconnectOption;
  /** `CLIENT SETNAME` of the connection, shown by `CLIENT LIST`. @default 'nestjs-outbox' */
  connectionName?: string;
  /**
   * Sends messages as CloudEvents: `cloudEvents({ source })` from `nestjs-outbox/cloudevents`.
   * CloudEvents defines no Redis binding: in binary mode every attribute is a `ce_<name>` field
   * (`ce_datacontenttype` too) and the payload the `payload` field; in structured mode a
   * `content-type` field says `application/cloudevents+json` and `payload` is the event.
   * @default none (plain outbox messages)
   */
  cloudEvents?: OutboxCloudEvents;
}

/** The trim of every entry, as its XADD arguments; undefined when streams are not trimmed. */
export interface ResolvedRedisStreamsTrim {
  readonly kind: 'MAXLEN' | 'MINID';
  readonly exact: boolean;
  /** The threshold of a batch (MINID thresholds move with the clock). */
  readonly threshold: () => string;
}

/** Options with defaults applied and values checked. */
export interface ResolvedRedisStreamsPublisherOptions {
  readonly connection: string | RedisOptions;
  readonly stream: (record: OutboxRecord) => string;
  readonly trim: ResolvedRedisStreamsTrim | undefined;
  readonly createStreams: boolean;
  readonly waitForReplicas: { readonly replicas: number; readonly timeoutMs: number } | undefined;
  readonly publishTimeoutMs: number;
  readonly connectionTimeoutMs: number;
  readonly reconnect: ReconnectDelays;
  readonly connectionName: string;
  readonly cloudEvents: OutboxCloudEvents | undefined;
}

// Every other key is refused: a misspelt option would silently keep its default.
const OPTION_KEYS = {
  '': {
    connection: true,
    streamPrefix: true,
    stream: true,
    trim: true,
    createStreams: true,
    waitForReplicas: true,
    publishTimeoutMs: true,
    connectionTimeoutMs: true,
    reconnect: true,
    connectionName: true,
    cloudEvents: true,
  } satisfies Record<keyof RedisStreamsPublisherOptions, true>,
  reconnect: RECONNECT_OPTION_KEYS,
  waitForReplicas: { replicas: true, timeoutMs: true } satisfies Record<
    keyof NonNullable<RedisStreamsPublisherOptions['waitForReplicas']>,
    true
  >,
  trim: { maxLen: true, maxAgeMs: true, minId: true, exact: true },
} satisfies KnownOptionKeys;

/**
 * ioredis settings the publisher sets itself, with the reason: each would make a message count
 * as published (or as failed) on another basis than Redis's answer to its XADD.
 */
const OWN_CONNECTION_SETTINGS: Readonly<Record<string, string>> = {
  enableOfflineQueue:
    'commands would wait in memory while Redis is unreachable and go out later, after the outbox had counted them failed (a duplicate at best)',
  retryStrategy:
    'the publisher reconnects itself (see reconnect), so that an outage is reported at once and a health check can reconnect now',
  reconnectOnError: 'a refused XADD is the outcome of its message, not a reason to reconnect',
  autoResendUnfulfilledCommands:
    'entries sent before a connection was lost would be sent again on the next one, after their batch was handed back',
  maxRetriesPerRequest: 'commands are never retried by the client: the outbox is the retry loop',
  lazyConnect: 'the publisher connects on the first publish (or ping)',
  enableAutoPipelining: 'each batch is one pipeline already',
  commandTimeout: 'use publishTimeoutMs, which also closes a connection that stopped answering',
  connectTimeout: 'use connectionTimeoutMs, which also bounds the ready check',
  keyPrefix: 'use streamPrefix, which also names the streams in logs and errors',
  readOnly: 'entries can only be added on the primary',
  connectionName: 'use the connectionName option of the publisher',
};

const MIN_STREAM_ID = /^\d{1,20}(-\d{1,20})?$/;

const checks: PublisherOptionChecks = new PublisherOptionChecks('RedisStreamsPublisher');
const fail: OptionFailure = checks.fail;
const { show, integer } = checks;

function checkConnection(connection: RedisStreamsPublisherOptions['connection']): void {
  if (typeof connection === 'string') {
    if (!/^rediss?:\/\/[^\s]*$/i.test(connection))
      fail(
        'connection',
        'it is not a redis:// or rediss:// URL',
        'Pass e.g. redis://user:pass@redis:6379/0, or ioredis options ({ host, port, password }).',
      );
    return;
  }
  if (connection === null || typeof connection !== 'object' || Array.isArray(connection)) {
    fail(
      'connection',
      'it is missing',
      'Pass a redis:// URL or ioredis options ({ host, port, username, password, db, tls }).',
    );
  }
  // A connected client (it has commands) rather than options: the publisher needs settings of
  // its own, which a shared client's other users would not expect.
  if (typeof (connection as { xadd?: unknown }).xadd === 'function') {
    fail(
      'connection',
      'it is a Redis client, not its options',
      'Pass the options you built it with (or a URL): the publisher opens a connection of its own.',
    );
  }
  for (const [key, why] of Object.entries(OWN_CONNECTION_SETTINGS)) {
    if ((connection as Record<string, unknown>)[key] !== undefined) {
      fail(`connection.${key}`, `the publisher sets it itself: ${why}`, `Remove ${key}.`);
    }
  }
}

function resolveStream(options: RedisStreamsPublisherOptions): (record: OutboxRecord) => string {
  const prefix = options.streamPrefix ?? '';
  if (typeof prefix !== 'string')
    fail('streamPrefix', `${show(prefix)} is not a string`, "Pass e.g. 'events:' or leave it out.");
  checks.optionalFunction(
    options.stream,
    'stream',
    'Pass (record) => streamKey, or leave it out for streamPrefix + topic.',
  );
  if (options.stream !== undefined) {
    if (prefix !== '')
      fail(
        'streamPrefix',
        'it is given with stream, which names the whole key',
        'Put the prefix in what stream returns, or leave stream out.',
      );
    return options.stream;
  }
  return prefix === '' ? (record) => record.topic : (record) => `${prefix}${record.topic}`;
}

function resolveTrim(value: RedisStreamsTrim | undefined): ResolvedRedisStreamsTrim | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object')
    fail('trim', 'it is not an object', 'Pass { maxLen }, { maxAgeMs } or { minId }.');
  const given = (['maxLen', 'maxAgeMs', 'minId'] as const).filter(
    (k) => (value as Record<string, unknown>)[k] !== undefined,
  );
  if (given.length !== 1)
    fail(
      'trim',
      given.length === 0 ? 'it names no threshold' : `it names ${given.join(' and ')} together`,
      'Pass exactly one of { maxLen }, { maxAgeMs } or { minId }.',
    );
  const exact = checks.flag(
    value.exact,
    false,
    'trim.exact',
    'Pass true or false, or leave it out.',
  );
  if ('maxLen' in value && value.maxLen !== undefined) {
    const maxLen = integer(value.maxLen, 0, 'trim.maxLen', 1, Number.MAX_SAFE_INTEGER);
    return { kind: 'MAXLEN', exact, threshold: () => String(maxLen) };
  }
  if ('maxAgeMs' in value && value.maxAgeMs !== undefined) {
    const maxAgeMs = integer(value.maxAgeMs, 0, 'trim.maxAgeMs', 1, Number.MAX_SAFE_INTEGER);
    return { kind: 'MINID', exact, threshold: () => String(Math.max(0, Date.now() - maxAgeMs)) };
  }
  const minId = (value as { minId: unknown }).minId;
  if (typeof minId === 'string') {
    if (!MIN_STREAM_ID.test(minId))
      fail(
        'trim.minId',
        `${show(minId)} is not a stream id`,
        "Pass an id such as '1700000000000-0' (or just its milliseconds), or a function returning one.",
      );
    return { kind: 'MINID', exact, threshold: () => minId };
  }
  if (typeof minId !== 'function')
    fail(
      'trim.minId',
      'it is neither a stream id nor a function',
      "Pass an id such as '1700000000000-0', or () => id.",
    );
  const compute = minId as () => unknown;
  return {
    kind: 'MINID',
    exact,
    threshold: () => {
      const id = compute();
      if (typeof id !== 'string' || !MIN_STREAM_ID.test(id)) {
        throw new TypeError(
          `trim.minId returned ${show(id)}, which is not a stream id such as '1700000000000-0'`,
        );
      }
      return id;
    },
  };
}

function resolveWait(
  value: RedisStreamsPublisherOptions['waitForReplicas'],
  publishTimeoutMs: number,
): ResolvedRedisStreamsPublisherOptions['waitForReplicas'] {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object')
    fail(
      'waitForReplicas',
      'it is not an object',
      'Pass { replicas: 1, timeoutMs: 1000 } or leave it out.',
    );
  if (value.replicas === undefined || value.timeoutMs === undefined)
    fail(
      'waitForReplicas',
      'it needs both replicas and timeoutMs',
      'Pass e.g. { replicas: 1, timeoutMs: 1000 }.',
    );
  const replicas = integer(value.replicas, 1, 'waitForReplicas.replicas', 1, 1_000);
  const timeoutMs = integer(
    value.timeoutMs,
    1_000,
    'waitForReplicas.timeoutMs',
    1,
    3_600_000,
    ' (0 would wait forever)',
  );
  if (timeoutMs >= publishTimeoutMs) {
    fail(
      'waitForReplicas.timeoutMs',
      `${timeoutMs} ms leaves no time within publishTimeoutMs (${publishTimeoutMs} ms) for the XADDs and WAIT's answer`,
      'Lower it, or raise publishTimeoutMs.',
    );
  }
  return { replicas, timeoutMs };
}

/**
 * Merges the defaults into `RedisStreamsPublisher` options and rejects invalid ones with a
 * message that says how to fix them. Pure: no I/O. Never puts the connection URL in a message.
 */
export function resolveRedisStreamsPublisherOptions(
  options: RedisStreamsPublisherOptions,
): ResolvedRedisStreamsPublisherOptions {
  checks.optionsObject(options, "{ connection: 'redis://host:6379' }");
  checks.knownKeys(options, OPTION_KEYS);
  checkConnection(options.connection);
  const stream = resolveStream(options);
  const trim = resolveTrim(options.trim);
  const createStreams = checks.flag(
    options.createStreams,
    true,
    'createStreams',
    'Pass false to refuse entries for streams that do not exist, or leave it out.',
  );
  const publishTimeoutMs = checks.publishTimeout(options.publishTimeoutMs);
  const connectionName = options.connectionName ?? 'nestjs-outbox';
  // CLIENT SETNAME refuses spaces and newlines.
  if (typeof connectionName !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(connectionName))
    fail(
      'connectionName',
      `${show(connectionName)} is not a name of 1 to 128 printable characters without spaces`,
      "Leave it out for 'nestjs-outbox'.",
    );
  return {
    connection: options.connection,
    stream,
    trim,
    createStreams,
    waitForReplicas: resolveWait(options.waitForReplicas, publishTimeoutMs),
    publishTimeoutMs,
    connectionTimeoutMs: checks.connectTimeout(options.connectionTimeoutMs, 'connectionTimeoutMs'),
    reconnect: checks.reconnect(options.reconnect),
    connectionName,
    cloudEvents: checks.cloudEvents(options.cloudEvents),
  };
}
