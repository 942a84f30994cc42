import { Logger } from '@nestjs/common';
import { Redis, type RedisOptions } from 'ioredis';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { describeError } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import {
  abortReason as abortedBy,
  answerWithinGrace,
  toPermanent,
  toUnavailable,
} from '../kit/publish-abort';
import {
  headersBesideCloudEvent,
  STRUCTURED_CONTENT_TYPE,
} from '../cloud-events/cloud-event-headers';
import type { EncodedCloudEvent } from '../cloud-events/outbox-cloud-events.port';
import { failUnanswered, publishRound, type PublishOutcomes } from '../kit/publish-round';
import { ReconnectingConnection } from '../kit/reconnecting-connection';
import { classifyRedisError, redisErrorCode } from './redis-reply.classifier';
import { RedisStreamsPublishError } from './redis-streams-publish.error';
import {
  resolveRedisStreamsPublisherOptions,
  type RedisStreamsPublisherOptions,
  type ResolvedRedisStreamsPublisherOptions,
} from './redis-streams-publisher.options';

/** The field of an entry that holds the message's payload: its JSON text, or its bytes. */
export const REDIS_STREAM_PAYLOAD_FIELD = 'payload';

/** The prefix of a CloudEvent's attribute fields in binary mode (the Kafka binding's). */
export const REDIS_CLOUDEVENTS_PREFIX = 'ce_';

/** One message of a batch on its way out: its XADD arguments and its position in the batch. */
interface Entry {
  readonly index: number;
  readonly stream: string;
  readonly args: (string | Buffer)[];
}

/** ioredis' answer to a pipeline: an error or a reply per command, in order. */
type Replies = [error: Error | null, reply: unknown][];

/** How a batch's wait for its pipeline ended. */
type Answer =
  | { readonly kind: 'replies'; readonly replies: Replies }
  | { readonly kind: 'failed'; readonly error: unknown }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'aborted' };

/** Error codes that say the login or the user's ACL is wrong: retrying will not fix them. */
const REFUSED_USER = new Set(['NOAUTH', 'WRONGPASS', 'NOPERM']);

/**
 * Publishes outbox messages to Redis Streams with ioredis: each message is one `XADD` to the
 * stream of its topic (`streamPrefix` + topic, or the `stream` option, or its `redis.stream`
 * attribute), and a batch is one pipeline: one round trip, one reply per entry. An entry's
 * fields are `x-outbox-message-id`, `x-outbox-type`, `x-outbox-key` (when it has a key),
 * `x-outbox-content-type` (binary messages), the message's headers, and last `payload`: the JSON
 * text, or the bytes of a binary message as they are.
 *
 * A message counts as published once Redis answered its XADD with the entry's id: the entry is
 * then in the primary's memory (durable as far as the server's AOF / fsync settings go; see
 * docs/publishers.md). With `waitForReplicas`, a `WAIT` ends the pipeline, and a batch that not
 * enough replicas acknowledged is handed back as an outage.
 *
 * Per-key order: the dispatcher sends a key's next message only after Redis answered the one
 * before it, and the entries of one batch are added in its order, since one pipeline runs in
 * order on one connection (and batches in flight share that connection).
 *
 * Failures are told apart by the error code of Redis's reply, never by its text: `WRONGTYPE`
 * (the key holds another type) fails that message alone, permanently; `OOM`, `READONLY`,
 * `LOADING`, `MISCONF`, `BUSY`, a refused login or ACL and a lost connection are an outage (no
 * attempt counted); any other error reply is retried. A pipeline Redis does not answer within
 * `publishTimeoutMs` fails its entries as timed out (retried: Redis may have them) and the
 * connection is closed, so that later batches do not queue behind a server that stopped
 * answering.
 *
 * The connection is opened on the first publish (or `connect()`, `ping()`), by the publisher
 * itself: no client-side offline queue, retries or resends, and reconnection with backoff after
 * a failed attempt. `close()` quits it.
 */
export class RedisStreamsPublisher implements OutboxPublisher {
  private readonly logger = new Logger(RedisStreamsPublisher.name);
  // Private fields, so that the URL's password never shows up in util.inspect or JSON.stringify.
  readonly #options: ResolvedRedisStreamsPublisherOptions;
  readonly #where: string;
  readonly #link: ReconnectingConnection<Redis>;
  /** Clients this publisher closed or dropped itself: their end is no news. */
  readonly #ended = new WeakSet<Redis>();

  constructor(options: RedisStreamsPublisherOptions) {
    this.#options = resolveRedisStreamsPublisherOptions(options);
    this.#where = describeEndpoint(this.#options.connection);
    this.#link = new ReconnectingConnection<Redis>({
      what: `Redis at ${this.#where}`,
      reconnect: this.#options.reconnect,
      logger: this.logger,
      open: () => this.open(),
      usable: (client) => client.status === 'ready',
      refusal: (failure, cause) => {
        const code = redisErrorCode(cause);
        return code !== undefined && REFUSED_USER.has(code)
          ? `${failure.message}: the username or password is wrong.`
          : undefined;
      },
    });
  }

  /**
   * Connects now instead of on the first publish (and now, even while waiting to reconnect).
   * Rejects with `PublisherUnavailableError` when Redis cannot be reached or refuses the login.
   */
  async connect(): Promise<void> {
    await this.connection(true);
  }

  /**
   * For health checks: resolves when Redis answers `PING` on the publisher's connection (opened
   * now if needed) and, with `waitForReplicas`, `WAIT` finds that many replicas; rejects with
   * `PublisherUnavailableError` otherwise.
   */
  async ping(signal: AbortSignal): Promise<void> {
    try {
      const client = await raceAbort(this.connection(true), signal);
      await raceAbort(client.ping(), signal);
      const wait = this.#options.waitForReplicas;
      if (wait !== undefined) {
        const acknowledged = Number(
          await raceAbort(
            client.call('WAIT', String(wait.replicas), String(wait.timeoutMs)),
            signal,
          ),
        );
        if (acknowledged < wait.replicas) throw this.replicasShort(acknowledged);
      }
    } catch (error) {
      throw toUnavailable(error, `Redis at ${this.#where} did not answer`);
    }
  }

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    let trim: string[] | undefined;
    try {
      const t = this.#options.trim;
      trim = t === undefined ? undefined : [t.kind, t.exact ? '=' : '~', t.threshold()];
    } catch (error) {
      // The trim.minId function threw: no entry can be written as configured.
      return records.map(() => ({ ok: false, error }));
    }
    return publishRound(records, signal, {
      item: (record, index) => this.entry(record, index, trim),
      send: (entries, outcomes) => this.send(entries, outcomes, signal),
      aborted: ABORTED,
      unanswered: () => new PublisherUnavailableError('The publish ended before Redis answered'),
    });
  }

  /** Quits the connection (after the answers to what was sent on it); a later publish connects again. */
  async close(): Promise<void> {
    const client = await this.#link.take();
    if (client === undefined) return;
    this.#ended.add(client);
    // A server that does not answer the QUIT must not hold the app's shutdown.
    await within(client.quit(), this.#options.publishTimeoutMs).catch(() => undefined);
    disconnect(client);
  }

  /** The XADD of each message; a message whose stream cannot be named fails here. */
  /** The entry of one message, or why it has none (its stream key is not one). */
  private entry(
    record: OutboxRecord,
    index: number,
    trim: string[] | undefined,
  ): Entry | PublishOutcome {
    const stream: unknown = record.attributes?.redis?.stream ?? this.#options.stream(record);
    if (typeof stream !== 'string' || stream === '') {
      return {
        ok: false,
        error: new PermanentPublishError(
          `${describeValue(stream)} is not a stream key: the stream option must return a non-empty string`,
        ),
      };
    }
    let event: EncodedCloudEvent | undefined;
    try {
      event = this.#options.cloudEvents?.encode(record);
    } catch (error) {
      return { ok: false, error: toPermanent(error, 'The message is no valid CloudEvent') };
    }
    return { index, stream, args: this.xadd(record, stream, trim, event) };
  }

  /** `XADD`'s arguments for one message (the command name aside). */
  private xadd(
    record: OutboxRecord,
    stream: string,
    trim: string[] | undefined,
    event?: EncodedCloudEvent,
  ): (string | Buffer)[] {
    const args: (string | Buffer)[] = [stream];
    if (!this.#options.createStreams) args.push('NOMKSTREAM');
    const maxLen = record.attributes?.redis?.maxLen;
    if (maxLen !== undefined) {
      args.push('MAXLEN', this.#options.trim?.exact === true ? '=' : '~', String(maxLen));
    } else if (trim !== undefined) args.push(...trim);
    if (event !== undefined) return this.cloudEventFields(args, record, event);
    args.push('*', OUTBOX_HEADER_MESSAGE_ID, record.messageId, OUTBOX_HEADER_TYPE, record.type);
    if (record.key !== null) args.push(OUTBOX_HEADER_KEY, record.key);
    if (record.encoding === 'binary') args.push(OUTBOX_HEADER_CONTENT_TYPE, record.contentType);
    const headers = record.headers;
    for (const name in headers) args.push(name, headers[name] as string);
    // Last, so that a consumer reading the entry into an object gets the payload even when a
    // header has the same name.
    args.push(REDIS_STREAM_PAYLOAD_FIELD, record.payload);
    return args;
  }

  /**
   * The fields of a message sent as a CloudEvent (CloudEvents has no Redis binding; these follow
   * the Kafka binding's names): in binary mode each attribute a `ce_` field, `ce_datacontenttype`
   * included, and the payload as it is; in structured mode a `content-type` field and the event
   * as the payload. The message's own headers, but its per-key number (the `sequence`
   * attribute), come before, the payload last, as for a plain message.
   */
  private cloudEventFields(
    args: (string | Buffer)[],
    record: OutboxRecord,
    event: EncodedCloudEvent,
  ): (string | Buffer)[] {
    args.push('*');
    const headers = headersBesideCloudEvent(record.headers);
    for (const name in headers) args.push(name, headers[name] as string);
    if (event.mode === 'structured') {
      args.push('content-type', STRUCTURED_CONTENT_TYPE, REDIS_STREAM_PAYLOAD_FIELD, event.body);
      return args;
    }
    for (const name in event.attributes)
      args.push(`${REDIS_CLOUDEVENTS_PREFIX}${name}`, event.attributes[name] as string);
    args.push(`${REDIS_CLOUDEVENTS_PREFIX}datacontenttype`, event.contentType);
    args.push(REDIS_STREAM_PAYLOAD_FIELD, record.payload);
    return args;
  }

  /** Sends the batch as one pipeline and reads an outcome per entry from its replies. */
  private async send(
    entries: readonly Entry[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    let client: Redis;
    try {
      client = await this.connection(false);
    } catch (error) {
      // Nothing was sent: the whole batch is handed back.
      throw toUnavailable(error, 'Could not connect to Redis');
    }
    // The connection may have dropped while this batch waited for it: ioredis would refuse
    // every command unsent (no offline queue), which says nothing more than this.
    if (pastPublishDeadline(signal) || client.status !== 'ready') {
      const error = signal.aborted
        ? abortReason(signal)
        : new PublisherUnavailableError(`The connection to Redis at ${this.#where} was lost`);
      failUnanswered(entries, outcomes, error, false);
      return;
    }
    const pipeline = client.pipeline();
    for (const entry of entries) pipeline.call('XADD', ...entry.args);
    const wait = this.#options.waitForReplicas;
    if (wait !== undefined) pipeline.call('WAIT', String(wait.replicas), String(wait.timeoutMs));
    const answer = await this.answer(client, pipeline.exec(), signal);
    switch (answer.kind) {
      case 'aborted':
        return; // unanswered: reported with the abort reason
      case 'timeout':
        failUnanswered(entries, outcomes, new PublishTimeoutError(this.#options.publishTimeoutMs));
        return;
      case 'failed':
        failUnanswered(entries, outcomes, toUnavailable(answer.error, 'Redis did not answer'));
        return;
      case 'replies':
        this.read(entries, answer.replies, outcomes);
    }
  }

  /**
   * Waits for the pipeline's replies, at most `publishTimeoutMs` and until `signal` aborts. On
   * the timeout the connection is dropped: commands queued behind on it would wait as long.
   */
  private async answer(
    client: Redis,
    exec: Promise<Replies | null>,
    signal: AbortSignal,
  ): Promise<Answer> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stopped = new Promise<Answer>((resolve) => {
      timer = setTimeout(() => resolve({ kind: 'timeout' }), this.#options.publishTimeoutMs);
      onAbort = () => resolve({ kind: 'aborted' });
      signal.addEventListener('abort', onAbort, { once: true });
    });
    const replied = exec.then(
      (replies): Answer => ({ kind: 'replies', replies: replies ?? [] }),
      (error: unknown): Answer => ({ kind: 'failed', error }),
    );
    try {
      let answer = await Promise.race([replied, stopped]);
      // The hold lost or the app stopping (not the deadline): what was sent is answered if
      // Redis does so within the grace, so that its entries count as added, not sent again.
      if (answer.kind === 'aborted') {
        answer = (await answerWithinGrace(replied, signal))?.value ?? answer;
      }
      if (answer.kind === 'timeout') {
        this.drop(
          client,
          `Redis at ${this.#where} did not answer a batch within ${this.#options.publishTimeoutMs} ms`,
        );
      }
      return answer;
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
    }
  }

  /** The outcome of each entry from its reply; with `waitForReplicas`, WAIT's reply last. */
  private read(entries: readonly Entry[], replies: Replies, outcomes: PublishOutcomes): void {
    const refused = new Set<string>();
    entries.forEach((entry, k) => {
      const [error, id] = replies[k] ?? [new Error('Redis sent no reply for the entry'), null];
      if (error === null) {
        outcomes[entry.index] =
          id === null
            ? {
                ok: false,
                error: new RedisStreamsPublishError(
                  `Stream "${entry.stream}" does not exist, and the publisher does not create streams (createStreams: false): the entry was not added`,
                  'no-stream',
                  entry.stream,
                ),
              }
            : { ok: true };
        return;
      }
      const code = redisErrorCode(error);
      if (code !== undefined && REFUSED_USER.has(code)) refused.add(code);
      outcomes[entry.index] = { ok: false, error: this.entryFailure(error, entry) };
    });
    if (refused.size > 0) {
      this.logger.error(
        `Redis at ${this.#where} refused the publisher's user (${[...refused].join(', ')}): the login or the user's ACL does not allow XADD on these streams. Nothing is published until this is fixed, and no message loses an attempt.`,
      );
    }
    const wait = this.#options.waitForReplicas;
    if (wait === undefined) return;
    const [error, acknowledged] = replies[entries.length] ?? [new Error('no reply to WAIT'), 0];
    if (error === null && Number(acknowledged) >= wait.replicas) return;
    const short =
      error === null
        ? this.replicasShort(Number(acknowledged))
        : toUnavailable(error, 'Redis did not confirm the batch on its replicas (WAIT)');
    // The entries are on the primary, but not known to be on enough replicas: the batch goes
    // back (an outage, so no attempt is burnt while replicas are down) and is added again.
    for (const entry of entries) {
      if (outcomes[entry.index]?.ok === true) outcomes[entry.index] = { ok: false, error: short };
    }
  }

  private entryFailure(error: Error, entry: Entry): Error {
    const what = `Redis refused the entry for stream "${entry.stream}": ${describeError(error)}`;
    switch (classifyRedisError(error)) {
      case 'permanent':
        return new PermanentPublishError(what, { cause: error });
      case 'outage':
        return redisErrorCode(error) === undefined
          ? toUnavailable(
              error,
              `The connection to Redis at ${this.#where} was lost before it answered`,
            )
          : new PublisherUnavailableError(what, { cause: error });
      case 'retry':
        return error;
    }
  }

  private replicasShort(acknowledged: number): PublisherUnavailableError {
    const wait = this.#options.waitForReplicas;
    return new PublisherUnavailableError(
      `Only ${acknowledged} of ${wait?.replicas ?? 0} Redis replica(s) acknowledged the batch within ${wait?.timeoutMs ?? 0} ms (WAIT): it is handed back and added again`,
    );
  }

  /**
   * The open connection, or a new one; fails fast while waiting to reconnect after a failed
   * attempt (unless `now`, for `connect()` and `ping()`).
   */
  private connection(now: boolean): Promise<Redis> {
    const current = this.#link.current;
    // Not ready: closing, or reconnecting on its own; it is replaced and closed for good.
    if (current !== undefined && current.status !== 'ready') this.drop(current, undefined);
    return this.#link.get(now);
  }

  /** Opens a client; rejects with why it could not, having closed it. */
  private async open(): Promise<Redis> {
    const client = this.createClient();
    let seen: unknown;
    // ioredis reports the socket's error here, and then rejects connect() with its own
    // "Connection is closed.": the first says why.
    client.on('error', (error: unknown) => {
      seen ??= error;
    });
    client.once('end', () => this.lost(client));
    try {
      await within(client.connect(), this.#options.connectionTimeoutMs);
    } catch (error) {
      this.#ended.add(client);
      disconnect(client);
      throw redisErrorCode(error) !== undefined ? error : (seen ?? error);
    }
    return client;
  }

  private createClient(): Redis {
    const o = this.#options;
    const own: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      retryStrategy: () => null,
      reconnectOnError: null,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      enableAutoPipelining: false,
      connectTimeout: o.connectionTimeoutMs,
      connectionName: o.connectionName,
    };
    const { connection } = o;
    if (typeof connection === 'string') return new Redis(connection, { keepAlive: 10_000, ...own });
    return new Redis({ keepAlive: 10_000, ...connection, ...own });
  }

  /** The connection ended (closed by Redis or the network): the next publish opens another. */
  private lost(client: Redis): void {
    // Not the connection in use: one that never connected, or one already closed or replaced.
    if (this.#link.current !== client) return;
    if (this.#ended.has(client)) {
      this.#link.forget(client);
      return;
    }
    this.#ended.add(client);
    this.#link.forget(
      client,
      new PublisherUnavailableError(`The connection to Redis at ${this.#where} was lost`),
    );
    this.logger.warn(
      `Connection to Redis at ${this.#where} lost; reconnecting on the next publish`,
    );
  }

  /** Closes a connection that can no longer be trusted; what waits on it fails as unanswered. */
  private drop(client: Redis, why: string | undefined): void {
    this.#link.forget(client);
    if (!this.#ended.has(client) && why !== undefined) {
      this.logger.warn(`${why}; closing the connection, the next batch opens another`);
    }
    this.#ended.add(client);
    disconnect(client);
  }
}

/**
 * Closes the client's socket unless it is closed already: ioredis would otherwise keep a 2 s
 * timer for a socket that will never report its close again.
 */
function disconnect(client: Redis): void {
  if (client.status !== 'end') client.disconnect();
}

/** How an aborted publish's unanswered messages say what was cut short. */
const ABORTED = 'before Redis answered';

function abortReason(signal: AbortSignal): Error {
  return abortedBy(signal, ABORTED);
}

/** Settles with `work`, or rejects once `ms` have passed (the work is left to finish). */
async function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } catch (error) {
    work.catch(() => undefined);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

function describeValue(value: unknown): string {
  return typeof value === 'string'
    ? JSON.stringify(value)
    : `a ${value === null ? 'null' : typeof value}`;
}

/** Where we connect, without credentials: safe to log. */
function describeEndpoint(connection: string | RedisOptions): string {
  if (typeof connection === 'string') {
    try {
      const url = new URL(connection);
      return `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
    } catch {
      return 'the configured URL';
    }
  }
  if (connection.sentinels !== undefined) {
    const sentinels = connection.sentinels.map(
      (s) => `${s.host ?? 'localhost'}:${s.port ?? 26379}`,
    );
    return `the primary "${connection.name ?? 'mymaster'}" of sentinels ${sentinels.join(',')}`;
  }
  if (connection.path !== undefined) return `unix:${connection.path}`;
  const scheme = connection.tls === undefined ? 'redis' : 'rediss';
  const db = connection.db === undefined || connection.db === 0 ? '' : `/${connection.db}`;
  return `${scheme}://${connection.host ?? 'localhost'}:${connection.port ?? 6379}${db}`;
}
