import { Logger } from '@nestjs/common';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type JetStreamPublishOptions,
} from '@nats-io/jetstream';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import { natsSubjectProblem } from '../../message/nats-subject';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_SEQUENCE,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import {
  CE_DASH_PREFIX,
  percentEncoded,
  STRUCTURED_CONTENT_TYPE,
} from '../cloud-events/cloud-event-headers';
import type { EncodedCloudEvent } from '../cloud-events/outbox-cloud-events.port';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import {
  abortReason as abortedBy,
  toPermanent,
  toUnavailable,
  unsent,
  untilAborted,
} from '../kit/publish-abort';
import { publishRound, type PublishOutcomes } from '../kit/publish-round';
import { ReconnectingConnection } from '../kit/reconnecting-connection';
import { classifyJetStreamError } from './jetstream-error.classifier';
import {
  resolveJetStreamPublisherOptions,
  type JetStreamPublisherOptions,
  type ResolvedJetStreamPublisherOptions,
} from './jetstream-publisher.options';
import {
  connectNats,
  natsHeaders,
  type NatsConnectionLike,
  type NatsHeaderSet,
} from './nats-client';

/** One message of a batch on its way out, with its position in the batch. */
interface Item {
  readonly index: number;
  readonly record: OutboxRecord;
  readonly subject: string;
  readonly data: string | Uint8Array;
  readonly headers: NatsHeaderSet;
  readonly expectedStream: string | undefined;
  /** Handed to the connection: the stream may have it, whatever the answer. */
  written: boolean;
}

interface ConnectionState {
  readonly nc: NatsConnectionLike;
  readonly js: JetStreamClient;
  /** The API client of `ping()` and the stream lookup, made on first use. */
  jsm: Promise<JetStreamManager> | undefined;
  closed: boolean;
}

/** A publish the stream answered with "no responders": which of the two it means is looked up. */
const NO_RESPONDERS = Symbol('no responders');
type SendResult = PublishOutcome | typeof NO_RESPONDERS;

const OK: PublishOutcome = Object.freeze({ ok: true });
/** Headers JetStream acts on (`Nats-Rollup` purges, `Nats-Msg-Id` replaces the id, …). */
const JETSTREAM_HEADER = /^nats-/i;

/**
 * Publishes outbox messages to NATS JetStream: each message to its subject (the topic, the
 * `subject` option, or the message's `jetstream.subject` attribute) as a JetStream publish that
 * counts only once the stream answered with a `PubAck`. The message id goes as `Nats-Msg-Id`,
 * so a stream with a duplicate window drops the copy a retry sends after an unanswered publish;
 * the id, type and key also go as `x-outbox-message-id`, `x-outbox-type` and `x-outbox-key`
 * headers beside the message's own. A JSON payload is sent as its UTF-8 text, a binary one as
 * its bytes with `x-outbox-content-type`.
 *
 * A batch is pipelined: every message is written at once on one connection and the `PubAck`s
 * are awaited together. Per-key order comes from ordered publishing per key on the topic's
 * subject rather than from a subject per key: the dispatcher has at most one message of a key
 * in flight, one connection delivers its writes in order, and a stream appends in arrival order,
 * so a key's messages are stored in commit order; within one call, a key's next message is
 * written only once the one before it was acknowledged, so a refused message is never overtaken
 * by the next of its key. A subject per key would multiply subjects (and stream subject filters,
 * consumer filters, per-subject limits) with the number of keys, and order nothing more.
 *
 * Failures: a subject no stream captures (no responders, and the stream lookup finds none), a
 * message larger than the stream's `max_msg_size` or the server's `max_payload`, a message that
 * landed in another stream than `expectedStream`, and a header the client cannot encode or
 * that JetStream would act on (`Nats-*`) fail for good (`PermanentPublishError`). A connection
 * that cannot be opened, or is lost under a publish, and a JetStream that answers 503 are an
 * outage (`PublisherUnavailableError`: the batch goes back without counting attempts when
 * nothing went through). A `PubAck` that does not come within `publishTimeoutMs` is a
 * `PublishTimeoutError`: the message is retried, and the stream's duplicate window drops it if
 * the first publish was stored.
 *
 * The client's own reconnection is off: it would hold writes in a buffer and drop it on
 * reconnecting, leaving publishes to time out. A lost connection fails what it carried at once,
 * and the next publish (after a backoff) or `ping()` (at once) connects again.
 */
export class JetStreamPublisher implements OutboxPublisher {
  private readonly logger = new Logger(JetStreamPublisher.name);
  // Private fields, so that credentials never show up in util.inspect or JSON.stringify.
  readonly #options: ResolvedJetStreamPublisherOptions;
  readonly #where: string;
  readonly #link: ReconnectingConnection<ConnectionState>;

  constructor(options: JetStreamPublisherOptions) {
    this.#options = resolveJetStreamPublisherOptions(options);
    this.#where = this.#options.servers.map(describeServer).join(', ');
    this.#link = new ReconnectingConnection<ConnectionState>({
      what: `NATS at ${this.#where}`,
      reconnect: this.#options.reconnect,
      logger: this.logger,
      open: () => this.open(),
      usable: (state) => !state.closed,
      refusal: (failure, cause) =>
        isAuthFailure(cause)
          ? `${failure.message}. The credentials are refused: nothing is published until this is fixed, and no message loses an attempt.`
          : undefined,
    });
  }

  /**
   * Connects now instead of on the first publish, and checks that JetStream answers. Rejects
   * with `PublisherUnavailableError` (saying why) when it cannot: await it where the publisher is
   * built to stop a misconfigured application at bootstrap.
   */
  async connect(): Promise<void> {
    await this.checkJetStream();
  }

  /**
   * For health checks: resolves when a connection to NATS is open (opening one now if needed)
   * and JetStream answers an account info request; rejects with `PublisherUnavailableError`
   * otherwise.
   */
  async ping(signal: AbortSignal): Promise<void> {
    await raceAbort(this.checkJetStream(), signal);
  }

  publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    return publishRound(records, signal, {
      item: (record, index) => this.item(record, index),
      send: (items, outcomes) => this.send(items, outcomes, signal),
      aborted: ABORTED,
      unanswered: () =>
        new PublisherUnavailableError('The publish was abandoned before JetStream answered'),
    });
  }

  /** Closes the connection; a later publish connects again. */
  async close(): Promise<void> {
    const state = await this.#link.take();
    if (state === undefined || state.closed) return;
    state.closed = true;
    // A server that does not answer the close must not hold the app's shutdown.
    await raceAbort(state.nc.close(), AbortSignal.timeout(this.#options.publishTimeoutMs)).catch(
      (error: unknown) =>
        this.logger.warn(`Closing the NATS connection failed: ${describeError(error)}`),
    );
  }

  private async checkJetStream(): Promise<void> {
    const state = await this.connection(true);
    try {
      await (await this.manager(state)).getAccountInfo();
    } catch (error) {
      throw new PublisherUnavailableError(
        `JetStream at ${this.#where} did not answer: ${describeError(error)}`,
        { cause: error },
      );
    }
  }

  /** The message as it goes out; throws what makes it fail (before anything is sent). */
  private item(record: OutboxRecord, index: number): Item {
    const subject = record.attributes?.jetstream?.subject ?? this.#options.subject(record);
    const problem = natsSubjectProblem(subject);
    if (problem !== undefined) {
      throw new PermanentPublishError(
        `${JSON.stringify(String(subject))} is not a subject JetStream can publish to: ${problem}`,
      );
    }
    let event: EncodedCloudEvent | undefined;
    try {
      event = this.#options.cloudEvents?.encode(record);
    } catch (error) {
      throw toPermanent(error, 'The message is no valid CloudEvent');
    }
    return {
      index,
      record,
      subject,
      // JSON as text (the client encodes it as UTF-8); bytes as a view of their own realm's
      // Uint8Array, which is what the client checks for (a Buffer from another realm is not).
      data:
        event?.mode === 'structured'
          ? event.body
          : record.encoding === 'binary'
            ? new Uint8Array(
                record.payload.buffer,
                record.payload.byteOffset,
                record.payload.length,
              )
            : record.payload,
      headers: this.headersOf(record, event),
      expectedStream: this.#options.expectedStream(record),
      written: false,
    };
  }

  /**
   * The message's headers, and the module's: the `x-outbox-*` ones, or a CloudEvent's (the NATS
   * binding: in binary mode every attribute a `ce-` header, percent-encoded; in structured mode
   * the content type of the JSON event format), with the per-key number as its `sequence`.
   */
  private headersOf(record: OutboxRecord, event: EncodedCloudEvent | undefined): NatsHeaderSet {
    const h = natsHeaders();
    try {
      for (const name of Object.keys(record.headers)) {
        if (JETSTREAM_HEADER.test(name)) {
          throw new PermanentPublishError(
            `its header "${name}" would be read by JetStream (Nats-* headers roll up, purge, expect or deduplicate): rename it`,
          );
        }
        if (event !== undefined && name === OUTBOX_HEADER_SEQUENCE) continue;
        h.set(name, record.headers[name] ?? '');
      }
      if (event?.mode === 'structured') {
        h.set('Content-Type', STRUCTURED_CONTENT_TYPE);
        return h;
      }
      if (event !== undefined) {
        for (const name in event.attributes)
          h.set(`${CE_DASH_PREFIX}${name}`, percentEncoded(event.attributes[name] ?? ''));
        h.set(`${CE_DASH_PREFIX}datacontenttype`, percentEncoded(event.contentType));
        return h;
      }
      h.set(OUTBOX_HEADER_MESSAGE_ID, record.messageId);
      h.set(OUTBOX_HEADER_TYPE, record.type);
      if (record.key !== null) h.set(OUTBOX_HEADER_KEY, record.key);
      if (record.encoding === 'binary') h.set(OUTBOX_HEADER_CONTENT_TYPE, record.contentType);
    } catch (error) {
      if (error instanceof PermanentPublishError) throw error;
      throw toPermanent(error, "NATS cannot carry the message's headers");
    }
    return h;
  }

  private async send(
    items: readonly Item[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    let state: ConnectionState;
    try {
      state = await raceAbort(this.connection(false), signal);
    } catch (error) {
      if (signal.aborted) {
        for (const item of items) outcomes[item.index] = unsent(abortReason(signal));
        return;
      }
      // Nothing was sent: the whole batch goes back.
      throw toUnavailable(error, `Could not connect to NATS at ${this.#where}`);
    }
    // One run per key, in batch order; a message without a key is a run of its own. Every
    // run's first message is written now, so the batch is pipelined; a run's next message
    // waits for the PubAck of the one before it.
    const runs = new Map<string, Item[]>();
    const all: Item[][] = [];
    for (const item of items) {
      const key = item.record.key;
      const run = key === null ? undefined : runs.get(key);
      if (run !== undefined) run.push(item);
      else {
        const fresh = [item];
        if (key !== null) runs.set(key, fresh);
        all.push(fresh);
      }
    }
    const noResponders: Item[] = [];
    const sending = Promise.all(
      all.map((run) => this.sendRun(state, run, outcomes, noResponders, signal)),
    );
    if ((await untilAborted(sending, signal)) === undefined) {
      // Stop waiting. What was written may be in the stream: it counts an attempt (and the
      // duplicate window drops its copy); what was not goes back as it was.
      const reason = abortReason(signal);
      for (const item of items) {
        outcomes[item.index] ??= item.written ? { ok: false, error: reason } : unsent(reason);
      }
      return;
    }
    if (noResponders.length === 0) return;
    const explained = this.explainNoResponders(state, noResponders, outcomes);
    if ((await untilAborted(explained, signal)) === undefined) {
      // Not stored anywhere (nothing answered), but which failure it is stays unknown: an
      // attempt, as for any failure.
      const reason = abortReason(signal);
      for (const item of noResponders) outcomes[item.index] ??= { ok: false, error: reason };
    }
  }

  private async sendRun(
    state: ConnectionState,
    run: readonly Item[],
    outcomes: PublishOutcomes,
    noResponders: Item[],
    signal: AbortSignal,
  ): Promise<void> {
    for (const [place, item] of run.entries()) {
      const result = await this.sendOne(state, item, signal);
      if (result === NO_RESPONDERS) noResponders.push(item);
      else outcomes[item.index] ??= result;
      if (result !== OK) {
        // The rest of the key's run is not written: it must not overtake this message.
        const error = new PublisherUnavailableError(
          `Not sent: message ${item.record.messageId} before it in key "${item.record.key ?? ''}" was not acknowledged`,
        );
        for (const rest of run.slice(place + 1)) outcomes[rest.index] ??= unsent(error);
        return;
      }
    }
  }

  private sendOne(state: ConnectionState, item: Item, signal: AbortSignal): Promise<SendResult> {
    // Read on the clock right before the write: after an await (or a pause of the process) the
    // lease may be gone, and another dispatcher may hold the message.
    if (pastPublishDeadline(signal)) return Promise.resolve(unsent(abortReason(signal)));
    if (state.closed || state.nc.isClosed())
      return Promise.resolve(unsent(this.lost(state, undefined)));
    const options: Partial<JetStreamPublishOptions> = {
      msgID: item.record.messageId,
      // The client's own header set (natsHeaders()), typed by what the publisher writes.
      headers: item.headers as JetStreamPublishOptions['headers'],
      timeout: this.#options.publishTimeoutMs,
    };
    if (item.expectedStream !== undefined) options.expect = { streamName: item.expectedStream };
    item.written = true;
    return state.js.publish(item.subject, item.data, options).then(
      () => OK,
      (error: unknown) => this.failure(error, item, state),
    );
  }

  private failure(error: unknown, item: Item, state: ConnectionState): SendResult {
    const kind = classifyJetStreamError(error, state.closed || state.nc.isClosed());
    switch (kind) {
      case 'no-stream':
        return NO_RESPONDERS;
      case 'timeout':
        return { ok: false, error: new PublishTimeoutError(this.#options.publishTimeoutMs) };
      case 'closed':
        return { ok: false, error: this.lost(state, error) };
      case 'unavailable':
        return {
          ok: false,
          error: toUnavailable(error, `JetStream is not available for subject "${item.subject}"`),
        };
      case 'refused':
        return {
          ok: false,
          error: toPermanent(error, `JetStream refused the message for subject "${item.subject}"`),
        };
      case 'unsendable':
        item.written = false;
        return {
          ok: false,
          error: toPermanent(error, `The NATS client cannot send the message to "${item.subject}"`),
        };
      case 'other':
        return { ok: false, error };
    }
  }

  /**
   * "No responders" means that nothing listens on the subject: no stream captures it, or its
   * stream cannot answer right now. JetStream's stream lookup tells the two apart: only a subject
   * that no stream captures fails for good.
   */
  private async explainNoResponders(
    state: ConnectionState,
    items: readonly Item[],
    outcomes: PublishOutcomes,
  ): Promise<void> {
    const verdicts = new Map<string, Error>();
    await Promise.all(
      [...new Set(items.map((i) => i.subject))].map(async (subject) => {
        try {
          const stream = await (await this.manager(state)).streams.find(subject);
          verdicts.set(
            subject,
            new PublisherUnavailableError(
              `Stream "${stream}" captures subject "${subject}" but did not answer (no responders): it may be starting up or electing a leader`,
            ),
          );
        } catch (error) {
          verdicts.set(
            subject,
            (error as { code?: unknown } | null)?.code === STREAM_NOT_FOUND
              ? new PermanentPublishError(
                  `No JetStream stream captures subject "${subject}": add the subject to a stream (or create one), then retry the message`,
                )
              : new PublisherUnavailableError(
                  `Nothing answered on subject "${subject}", and JetStream could not say which stream captures it: ${describeError(error)}`,
                  { cause: error },
                ),
          );
        }
      }),
    );
    for (const item of items)
      outcomes[item.index] ??= { ok: false, error: verdicts.get(item.subject) };
  }

  private manager(state: ConnectionState): Promise<JetStreamManager> {
    const made = (state.jsm ??= jetstreamManager(state.nc, {
      checkAPI: false,
      timeout: this.#options.publishTimeoutMs,
      ...(this.#options.domain === undefined ? {} : { domain: this.#options.domain }),
    }));
    made.catch(() => {
      if (state.jsm === made) state.jsm = undefined;
    });
    return made;
  }

  private lost(state: ConnectionState, cause: unknown): PublisherUnavailableError {
    return new PublisherUnavailableError(
      `The NATS connection to ${this.#where} was lost before JetStream acknowledged the message${cause === undefined ? '' : `: ${describeError(cause)}`}`,
      { cause },
    );
  }

  /**
   * The open connection, or a new one; fails fast while waiting to reconnect after a failed
   * attempt (unless `now`, for `connect()` and `ping()`).
   */
  private connection(now: boolean): Promise<ConnectionState> {
    return this.#link.get(now);
  }

  /** Opens a connection; rejects with the client's error when it cannot. */
  private async open(): Promise<ConnectionState> {
    const o = this.#options;
    const nc = await connectNats({
      servers: [...o.servers],
      name: o.name,
      user: o.user,
      pass: o.pass,
      token: o.token,
      authenticator: o.authenticator,
      tls: o.tls,
      timeout: o.connectTimeoutMs,
      // See the class comment: a lost connection is an outage the dispatcher handles.
      reconnect: false,
      pingInterval: o.pingIntervalMs,
      maxPingOut: 2,
      // A stack captured per request costs more than the rest of a publish.
      noAsyncTraces: true,
    });
    const state: ConnectionState = {
      nc,
      js: jetstream(nc, {
        timeout: o.publishTimeoutMs,
        ...(o.domain === undefined ? {} : { domain: o.domain }),
      }),
      jsm: undefined,
      closed: false,
    };
    void nc.closed().then((error) => this.closed(state, error));
    return state;
  }

  private closed(state: ConnectionState, error: Error | void): void {
    state.closed = true;
    // Closed by close(), or ended cleanly: no news for the batches that come meanwhile.
    if (error === undefined || error === null) {
      this.#link.forget(state);
      return;
    }
    if (!this.#link.forget(state, this.lost(state, error))) return;
    this.logger.warn(
      `NATS connection to ${this.#where} lost: ${describeError(error)}; connecting again on the next publish`,
    );
  }
}

/** JetStream's err_code for "no stream matches subject". */
const STREAM_NOT_FOUND = 10059;

/** How an aborted publish's unanswered messages say what was cut short. */
const ABORTED = 'before JetStream answered';

function abortReason(signal: AbortSignal): Error {
  return abortedBy(signal, ABORTED);
}

function isAuthFailure(error: unknown): boolean {
  const name = (error as { name?: unknown } | null)?.name;
  return name === 'AuthorizationError' || name === 'UserAuthenticationExpiredError';
}

/** A server as the logs show it: scheme, host and port, never credentials. */
function describeServer(server: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(server) ? server : `nats://${server}`;
  try {
    const url = new URL(withScheme);
    return `${url.protocol}//${url.host}`;
  } catch {
    return 'the configured server';
  }
}
