import {
  ClientKafka,
  ClientMqtt,
  ClientNats,
  ClientRMQ,
  MqttRecordBuilder,
  NatsRecordBuilder,
  RmqRecord,
  RmqRecordBuilder,
  type ClientProxy,
} from '@nestjs/microservices';
import type { Observable, Subscription } from 'rxjs';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { describeError } from '../../internal/describe-error';
import { OptionChecks } from '../../options/option-checks';
import { raceAbort } from '../../internal/race-abort';
import { classifyKafkaError } from '../kafka-error.classifier';
import { errorChain } from '../kit/error-chain';
import { CONNECTION_LOST_CODES, UNREACHED_CODES } from '../kit/socket-error-codes';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import { loadNatsHeaders } from './nats-headers';

/** The envelope sent on transports without message headers (TCP, Redis) and on NATS and MQTT (which also get headers). */
export interface OutboxEnvelope<TPayload = unknown> {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The JSON payload; for a binary message, its bytes as base64 text (the transports that carry
   * an envelope JSON-encode it, and JSON has no bytes).
   */
  readonly payload: TPayload;
  /** A binary message's content type; absent for JSON. */
  readonly contentType?: string;
  /** `'base64'` when `payload` is a binary message's bytes as base64 text; absent for JSON. */
  readonly encoding?: 'base64';
}

/**
 * Any `@nestjs/microservices` client: `ClientProxy` of any transport (`ClientTCP`, `ClientKafka`,
 * ... are `ClientProxy<TheirEvents, TheirStatus>`, which a plain `ClientProxy` parameter would reject).
 */
interface NatsFlushable {
  flush(): Promise<void>;
}

export type OutboxClientProxy = Pick<ClientProxy, 'connect' | 'close' | 'emit' | 'send'> & {
  /** Nest 11+: the transport's own client (NATS needs it to flush). Absent on Nest 10. */
  // Written out, not ClientProxy['unwrap']: Nest 10's ClientProxy has no such member, and the
  // declaration would not compile there.
  unwrap?: <T>() => T;
};

export interface ClientProxyPublisherOptions {
  /** How long connecting, and then one `emit`/`send`, may wait for the transport's answer. @default 5000 */
  timeoutMs?: number;
  /** The event pattern a message is emitted under. @default the message's topic */
  pattern?: (record: OutboxRecord) => string;
  /**
   * Builds the emitted data; overrides the per-transport default. A throw fails only that message
   * (it is retried, then dead-lettered). On `ClientRMQ` the result is still sent persistent: plain
   * data is wrapped in an `RmqRecord` with the default properties, and an `RmqRecord` whose options
   * do not say `persistent` gets `persistent: true`.
   */
  toData?: (record: OutboxRecord) => unknown;
  /**
   * `'emit'` (default): fire an event; "published" means what the transport's `emit` confirms (see
   * the table on {@link ClientProxyPublisher}). `'send'`: request-response; "published" means the
   * consumer's `@MessagePattern` handler answered, an end-to-end acknowledgement on any transport,
   * at the cost of one round trip to the consumer per message (still pipelined).
   */
  mode?: 'emit' | 'send';
  /** Also close the client when the module shuts down. @default false (the client is yours) */
  closeClient?: boolean;
  /**
   * Not supported: refused with `OutboxOptionsError`. Nest's clients send their own packet
   * (`{ pattern, data }`) as the body on RMQ, NATS, Redis, MQTT and TCP, which no CloudEvents
   * binding reads as an event; send CloudEvents with the broker's own publisher
   * (`KafkaPublisher`, `RabbitMqPublisher`, `JetStreamPublisher`, `RedisStreamsPublisher`,
   * `SqsPublisher`, `SnsPublisher`).
   */
  cloudEvents?: never;
}

const CLIENT_PROXY_PUBLISHER_OPTION_KEYS = {
  timeoutMs: true,
  pattern: true,
  toData: true,
  mode: true,
  closeClient: true,
  cloudEvents: true,
} satisfies Record<keyof ClientProxyPublisherOptions, true>;

// Error codes of a client that cannot reach its broker: Node socket and DNS errors (TCP, Redis,
// MQTT, RabbitMQ) and the nats.js connection error codes.
const CONNECTION_CODES = new Set([
  ...UNREACHED_CODES,
  ...CONNECTION_LOST_CODES,
  'ERR_STREAM_DESTROYED',
  'ERR_STREAM_WRITE_AFTER_END',
  'ERR_SOCKET_CLOSED',
  'CONNECTION_REFUSED',
  'CONNECTION_CLOSED',
  'CONNECTION_TIMEOUT',
  'CONNECTION_DRAINING',
  'DISCONNECT',
]);

/**
 * Whether a failure is the client's own connection error: an `Error` (or one in its `cause`
 * chain) with a connection error code, or a kafkajs connection error (ClientKafka). Only `Error`
 * instances count: what a consumer answers in `'send'` mode arrives deserialised (plain objects
 * and strings), so a consumer's reply can never pass for the transport's failure, whatever its
 * text or fields say. Message text is never looked at.
 */
function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (classifyKafkaError(error) === 'outage') return true;
  for (const link of errorChain<Error & { code?: unknown }>(error)) {
    if (!(link instanceof Error)) return false;
    if (typeof link.code === 'string' && CONNECTION_CODES.has(link.code)) return true;
  }
  return false;
}

/** A message's outcome, and whether it was handed to the client at all (a throwing `toData` is not). */
interface Attempt {
  readonly outcome: PublishOutcome;
  readonly sent: boolean;
}

function lostConnection(error: unknown, probe?: unknown): PublisherUnavailableError {
  return new PublisherUnavailableError(
    probe === undefined
      ? `The transport lost its connection: ${describeError(error)}`
      : `The transport lost its connection (it cannot reconnect: ${describeError(probe)})`,
    { cause: error },
  );
}

/** The abort reason as an Error (the dispatcher aborts with a PublishTimeoutError or PublisherUnavailableError). */
function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error
    ? reason
    : new PublisherUnavailableError('The publish was aborted', { cause: reason });
}

interface AbortWatch {
  /** Rejects with the signal's reason once it aborts; never resolves. */
  readonly aborted: Promise<never>;
  dispose(): void;
}

function watchAbort(signal: AbortSignal): AbortWatch {
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(abortReason(signal));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => undefined);
  return {
    aborted,
    dispose: () => onAbort !== undefined && signal.removeEventListener('abort', onAbort),
  };
}

/** Races `work` against the abort signal and a timeout that rejects with `PublishTimeoutError`. */
async function bounded<T>(
  work: Promise<T>,
  timeoutMs: number,
  aborted: Promise<never>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new PublishTimeoutError(timeoutMs)), timeoutMs);
  });
  try {
    return await Promise.race([work, aborted, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Waits for an `emit`/`send` observable to complete. Errors that surface only through the
 * observable (the way Nest reports them) reject; so do the timeout and the abort signal, which
 * also unsubscribe, so nothing is left waiting on a transport that never answers.
 */
function completion(
  source: Observable<unknown>,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) {
      reject(abortReason(signal));
      return;
    }
    const handle: { subscription?: Subscription } = {};
    let done = false;
    const finish = (settle: () => void): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      handle.subscription?.unsubscribe();
      settle();
    };
    const onAbort = (): void => finish(() => reject(abortReason(signal)));
    const timer = setTimeout(
      () => finish(() => reject(new PublishTimeoutError(timeoutMs))),
      timeoutMs,
    );
    signal.addEventListener('abort', onAbort, { once: true });
    handle.subscription = source.subscribe({
      // Nest reports transport errors as whatever the client library threw (not always an Error).
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      error: (error: unknown) => finish(() => reject(error)),
      complete: () => finish(resolve),
    });
    if (done) handle.subscription.unsubscribe();
  });
}

/**
 * Publishes through any `@nestjs/microservices` client, awaiting each `emit()` (or `send()`)
 * observable under a timeout so that an error or a silent transport is never taken for success.
 * Every message of a batch is in flight at once. Kafka gets a record (key, value = the payload's
 * JSON, headers), RabbitMQ a persistent message (messageId, type, headers, JSON payload), NATS
 * and MQTT an {@link OutboxEnvelope} plus headers (NATS headers; MQTT 5 user properties, QoS 1),
 * TCP and Redis an {@link OutboxEnvelope}. Headers always include `x-outbox-message-id` and
 * `x-outbox-type`. A binary message is the Kafka value as it is; every other transport
 * JSON-encodes its packets, so there the bytes go as base64 (docs/binary-payloads.md).
 *
 * What "published" (`ok`) means in `'emit'` mode, per transport (Nest 11 clients):
 *
 * | Transport | `ok` means | Not covered |
 * |---|---|---|
 * | RMQ (`ClientRMQ`) | The broker confirmed the message: `ClientRMQ` publishes through an amqp-connection-manager `ChannelWrapper`, which opens a confirm channel by default (Nest passes no `confirm` option), and `emit` resolves in the `sendToQueue`/`publish` confirm callback; a nack rejects. Persistent (`deliveryMode` 2) because this publisher says so (Nest's default is transient). | No `mandatory` flag and no `basic.return` handling: a message the broker cannot route (queue deleted, `noAssert`, an exchange without a matching binding in `wildcards`/`fanout` mode) is confirmed and dropped. While disconnected the wrapper buffers publishes in memory (no `publishTimeout`): the emit times out here and the message is retried, and the buffered copy may still go out on reconnect (a duplicate). |
 * | Kafka (`ClientKafka`) | `producer.send()` resolved: the write was acknowledged as the producer's `acks` say (kafkajs default `-1`, all in-sync replicas). | Use `producerOnlyMode: true`; set `producer.idempotent: true` (or `maxInFlightRequests: 1`) and an explicit `createPartitioner` so retries cannot reorder and keys map to partitions stably. |
 * | NATS core (`ClientNats`) | The server has the message: `publish()` only appends to the client's buffer, so after each batch this publisher calls `flush()` (PING/PONG) and fails the batch as an outage if that does not answer. | No subscriber acknowledgement: a message with no subscriber is dropped. JetStream is not used. |
 * | Redis (`ClientRedis`) | The server answered `PUBLISH`. | Pub/sub: a message published while no subscriber listens is dropped (the receiver count is not checked). ioredis queues commands while disconnected; a timed-out publish may still be sent later (a duplicate). |
 * | MQTT (`ClientMqtt`) | QoS 1: the broker's `PUBACK`. User properties need `protocolVersion: 5` on the client (otherwise they are left out and the envelope still carries id, type and headers). | A broker with no subscriber (and no retained/persistent session) drops it. |
 * | TCP (`ClientTCP`) | Handed to the client's socket buffer: no acknowledgement of any kind. | A message emitted just as the peer goes away is lost without an error; use `mode: 'send'` for an application-level answer. |
 *
 * With `mode: 'send'` every transport gets an end-to-end answer from the consumer's handler; an
 * error the handler answers with is an ordinary failure of that message, whatever it says.
 *
 * Outages are recognised without reading error text: a client that cannot `connect()` fails the
 * whole batch with `PublisherUnavailableError`; a message whose failure carries a connection
 * error code (socket, DNS, nats.js codes, kafkajs connection errors) is reported as
 * `PublisherUnavailableError`; and when other failures come back, the client is asked to
 * `connect()` once more: if it cannot (the Nest clients reject while their connection is down),
 * those failures are the outage, otherwise they are the messages' own.
 */
export class ClientProxyPublisher implements OutboxPublisher {
  private readonly timeoutMs: number;
  private readonly toData: (record: OutboxRecord) => unknown;
  private readonly pattern: (record: OutboxRecord) => string;
  private readonly mode: 'emit' | 'send';
  private readonly isRmq: boolean;
  private readonly flushesNats: boolean;

  constructor(
    private readonly client: OutboxClientProxy,
    private readonly options: ClientProxyPublisherOptions = {},
  ) {
    // A misspelt option (`timeout` for `timeoutMs`) would otherwise leave its default in place.
    const checks = new OptionChecks('ClientProxyPublisher');
    checks.knownKeys(options, { '': CLIENT_PROXY_PUBLISHER_OPTION_KEYS });
    if (options.cloudEvents !== undefined) {
      checks.fail(
        'cloudEvents',
        "ClientProxyPublisher does not send CloudEvents: Nest's clients put their own packet ({ pattern, data }) in the body on RMQ, NATS, Redis, MQTT and TCP, which no CloudEvents binding reads as an event",
        'Send CloudEvents with the broker\'s own publisher and its cloudEvents option (KafkaPublisher, RabbitMqPublisher, JetStreamPublisher, RedisStreamsPublisher, SqsPublisher, SnsPublisher; docs/publishers.md, "CloudEvents"), or leave the option out.',
      );
    }
    this.timeoutMs = checks.integer(
      options.timeoutMs,
      5_000,
      'timeoutMs',
      1,
      24 * 3_600_000,
      ' ms',
    );
    if (options.mode !== undefined && options.mode !== 'emit' && options.mode !== 'send') {
      checks.fail('mode', `${checks.show(options.mode)} is not a mode`, "Use 'emit' or 'send'.");
    }
    this.pattern = options.pattern ?? ((record) => record.topic);
    this.mode = options.mode ?? 'emit';
    this.isRmq = client instanceof ClientRMQ;
    this.flushesNats = client instanceof ClientNats && this.mode === 'emit';
    this.toData = options.toData ?? this.defaultData(client);
  }

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (records.length === 0) return [];
    const watch = watchAbort(signal);
    try {
      try {
        await bounded(
          Promise.resolve().then(() => this.client.connect()),
          this.timeoutMs,
          watch.aborted,
        );
      } catch (error) {
        throw new PublisherUnavailableError('The microservices client could not connect', {
          cause: error,
        });
      }
      const attempts = await Promise.all(records.map((record) => this.publishOne(record, signal)));
      const outcomes = await this.classify(attempts, signal, watch.aborted);
      return this.flushesNats ? await this.flushNats(outcomes, watch.aborted) : outcomes;
    } finally {
      watch.dispose();
    }
  }

  /**
   * Closes the client when `closeClient` is set, waiting at most `timeoutMs`: some clients wait
   * for acknowledgements that may never come (ClientMqtt's close waits for every QoS 1 PUBACK).
   */
  async close(): Promise<void> {
    if (this.options.closeClient !== true) return;
    await bounded(
      Promise.resolve().then(async (): Promise<void> => {
        await (this.client.close() as unknown);
      }),
      this.timeoutMs,
      new Promise<never>(() => undefined),
    );
  }

  private async publishOne(record: OutboxRecord, signal: AbortSignal): Promise<Attempt> {
    // After the connect's await (or a pause through it), past the deadline: never sent.
    if (pastPublishDeadline(signal)) {
      const error = abortReason(signal);
      return { outcome: { ok: false, error, sent: false }, sent: false };
    }
    let source: Observable<unknown>;
    try {
      const pattern = this.pattern(record);
      const data = this.prepare(record);
      source =
        this.mode === 'send' ? this.client.send(pattern, data) : this.client.emit(pattern, data);
    } catch (error) {
      // This message cannot be built (a throwing toData, say): its own failure, retried with backoff.
      return { outcome: { ok: false, error }, sent: false };
    }
    try {
      await completion(source, this.timeoutMs, signal);
      return { outcome: { ok: true }, sent: true };
    } catch (error) {
      return { outcome: { ok: false, error }, sent: true };
    }
  }

  /**
   * Decides which failures are an outage. Timeouts and aborts are already typed. A connection
   * error is one by its code. For the rest, the client tells: Nest's clients reject `connect()`
   * while their connection is down (TCP opens a new socket, Redis, NATS, MQTT and RMQ hold a
   * rejected promise until they reconnect), so a `connect()` that fails right after means these
   * failures were the connection's; one that succeeds means they were the messages' own (a
   * consumer's error answer in `'send'` mode, a nack, ...).
   */
  private async classify(
    attempts: readonly Attempt[],
    signal: AbortSignal,
    aborted: Promise<never>,
  ): Promise<PublishOutcome[]> {
    const unexplained: number[] = [];
    const classified = attempts.map(({ outcome, sent }, i): PublishOutcome => {
      if (outcome.ok || !sent) return outcome;
      const { error } = outcome;
      if (error instanceof PublishTimeoutError || error instanceof PublisherUnavailableError)
        return outcome;
      if (isConnectionError(error)) return { ok: false, error: lostConnection(error) };
      unexplained.push(i);
      return outcome;
    });
    if (unexplained.length === 0) return classified;
    try {
      await bounded(
        Promise.resolve().then(() => this.client.connect()),
        this.timeoutMs,
        aborted,
      );
      return classified;
    } catch (probe) {
      // Aborted while asking: the dispatcher has moved on, and no verdict is better than a guess.
      if (signal.aborted) return classified;
      for (const i of unexplained) {
        const outcome = classified[i];
        if (outcome !== undefined && !outcome.ok)
          classified[i] = { ok: false, error: lostConnection(outcome.error, probe) };
      }
      return classified;
    }
  }

  /** NATS core `publish()` only buffers; a PONG after a flush means the server has every message before it. */
  /**
   * For health checks: resolves when the client is connected (Nest clients reject `connect()`
   * while their transport is down); rejects with `PublisherUnavailableError` otherwise.
   */
  async ping(signal: AbortSignal): Promise<void> {
    await raceAbort(
      Promise.resolve()
        .then(() => this.client.connect())
        .catch((cause: unknown) => {
          throw new PublisherUnavailableError('The microservices client could not connect', {
            cause,
          });
        }),
      signal,
    );
  }

  private async flushNats(
    outcomes: PublishOutcome[],
    aborted: Promise<never>,
  ): Promise<PublishOutcome[]> {
    if (!outcomes.some((o) => o.ok)) return outcomes;
    try {
      // Nest 10's ClientNats has no unwrap(); its connection is the natsClient field.
      const connection =
        typeof this.client.unwrap === 'function'
          ? this.client.unwrap<NatsFlushable>()
          : (this.client as { natsClient?: NatsFlushable }).natsClient;
      if (connection === undefined) throw new Error('the NATS connection is not open');
      await bounded(connection.flush(), this.timeoutMs, aborted);
      return outcomes;
    } catch (cause) {
      const error = new PublisherUnavailableError(
        'The NATS server did not confirm the batch (flush failed)',
        { cause },
      );
      return outcomes.map((o) => (o.ok ? { ok: false, error } : o));
    }
  }

  private prepare(record: OutboxRecord): unknown {
    const data = this.toData(record);
    if (!this.isRmq) return data;
    // ClientRMQ sends transient messages unless told otherwise; a broker restart would lose them.
    if (data instanceof RmqRecord) {
      return data.options?.persistent === undefined
        ? new RmqRecord(data.data, { ...(data.options ?? {}), persistent: true })
        : data;
    }
    return new RmqRecord(data, this.rmqProperties(record));
  }

  private defaultData(client: OutboxClientProxy): (record: OutboxRecord) => unknown {
    if (client instanceof ClientKafka) {
      // A kafka.partition attribute is not applied: kafkajs drops a message sent to a partition
      // the topic lacks and reports success, and ClientKafka gives no metadata to check it
      // against (KafkaPublisher checks it).
      return (r) => ({
        key: r.key,
        // The JSON text as is: Nest's Kafka deserializer parses it on the consumer side. Nest's
        // Kafka serializer passes a Buffer through untouched, so bytes are the value as they are.
        value: r.payload,
        headers: this.headers(r),
      });
    }
    if (client instanceof ClientRMQ) {
      // ClientRMQ JSON-encodes { pattern, data } as the AMQP body: bytes go as base64 text, their
      // content type in a header (the body itself stays JSON).
      return (r) =>
        new RmqRecordBuilder(
          r.encoding === 'binary'
            ? r.payload.toString('base64')
            : (JSON.parse(r.payload) as unknown),
        )
          .setOptions(this.rmqProperties(r))
          .build();
    }
    if (client instanceof ClientMqtt) {
      const v5 =
        (client as unknown as { options?: { protocolVersion?: number } }).options
          ?.protocolVersion === 5;
      return (r) => {
        const own = r.attributes?.mqtt;
        let builder = new MqttRecordBuilder(this.envelope(r)).setQoS(own?.qos ?? 1);
        if (own?.retain !== undefined) builder = builder.setRetain(own.retain);
        // MQTT 3.1.1 has no user properties; the envelope carries id, type and headers either way.
        return (v5 ? builder.setProperties({ userProperties: this.headers(r) }) : builder).build();
      };
    }
    if (client instanceof ClientNats) {
      const natsHeaders = loadNatsHeaders();
      return (r) => {
        const headers = natsHeaders();
        for (const [name, value] of Object.entries(this.headers(r))) headers.set(name, value);
        return new NatsRecordBuilder(this.envelope(r)).setHeaders(headers).build();
      };
    }
    return (r) => this.envelope(r);
  }

  private rmqProperties(r: OutboxRecord): NonNullable<RmqRecord['options']> {
    // ClientRMQ picks the exchange and queue from its own options: a message's exchange and
    // routing key attributes cannot apply here, its priority and expiration can.
    const own = r.attributes?.rabbitmq;
    return {
      persistent: true,
      messageId: r.messageId,
      type: r.type,
      contentType: 'application/json',
      // AMQP timestamps are seconds since the epoch.
      timestamp: Math.floor(r.createdAt.getTime() / 1_000),
      headers: this.headers(r),
      ...(own?.priority === undefined ? {} : { priority: own.priority }),
      ...(own?.expiration === undefined ? {} : { expiration: String(own.expiration) }),
    };
  }

  private headers(r: OutboxRecord): Record<string, string> {
    return {
      ...r.headers,
      [OUTBOX_HEADER_MESSAGE_ID]: r.messageId,
      [OUTBOX_HEADER_TYPE]: r.type,
      ...(r.encoding === 'binary' ? { [OUTBOX_HEADER_CONTENT_TYPE]: r.contentType } : {}),
    };
  }

  private envelope(r: OutboxRecord): OutboxEnvelope {
    // Literals, not a common part spread into each: on Node 20 a spread with properties after
    // it is many times slower than a literal (see toClaimedRecord).
    const { messageId, type, key, headers } = r;
    return r.encoding === 'binary'
      ? {
          messageId,
          type,
          key,
          headers,
          payload: r.payload.toString('base64'),
          contentType: r.contentType,
          encoding: 'base64',
        }
      : { messageId, type, key, headers, payload: JSON.parse(r.payload) as unknown };
  }
}
