import { Logger } from '@nestjs/common';
import {
  connect,
  type ChannelModel,
  type ConfirmChannel,
  type Message,
  type Options,
} from 'amqplib';
import { PublishTimeoutError } from '../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../interfaces/outbox-publisher.interface';
import type { OutboxRecord } from '../interfaces/outbox-record.interface';
import { describeError } from '../internal/describe-error';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../outbox.constants';
import { RabbitMqPublishError } from './rabbitmq-publish.error';
import {
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
  type ResolvedRabbitMqPublisherOptions,
} from './rabbitmq-publisher.options';

/** A message with its destination, and its position in the batch. */
interface Item {
  readonly index: number;
  readonly record: OutboxRecord;
  readonly exchange: string;
  readonly routingKey: string;
}

/**
 * The outcome of one publish on one channel. `bystander`: the channel was closed by another
 * message's error before this one was confirmed; it is published again on a fresh channel.
 */
type RoundResult = PublishOutcome | { readonly ok: 'bystander' };

/** A published message waiting for its confirm. */
interface Entry {
  readonly item: Item;
  /** Set by `basic.return`, which RabbitMQ sends before the confirm of the same message. */
  returned: { replyCode?: number; replyText?: string } | undefined;
  result: RoundResult | undefined;
  readonly listeners: ((result: RoundResult) => void)[];
  settle(result: RoundResult): void;
}

interface ChannelState {
  readonly channel: ConfirmChannel;
  /** The server's reason when it closed the channel (404 no exchange, 403, 406 …). */
  closeError: (Error & { code?: number }) | undefined;
  closed: boolean;
  /** Publishes whose confirm has not arrived, including abandoned ones. */
  outstanding: number;
  /** `publish()` returned false: wait for 'drain' before writing more. */
  needsDrain: boolean;
  /** Unconfirmed entries by message id, for `basic.return`. */
  readonly inflight: Map<string, Entry>;
  readonly waiters: Set<() => void>;
}

interface ConnectionState {
  readonly model: ChannelModel;
  blocked: string | undefined;
  closed: boolean;
  channel: ChannelState | undefined;
  opening: Promise<ChannelState> | undefined;
}

const RESERVED_HEADERS = new Set(['cc', 'bcc']);
const EXCHANGE_IN_ERROR = /exchange '([^']*)'/;

/**
 * Publishes outbox messages to RabbitMQ with amqplib on a confirm channel: persistent, mandatory
 * messages with `messageId`, `type`, `timestamp`, `contentType: application/json` and the
 * user's headers plus `x-outbox-message-id`, `x-outbox-type` and `x-outbox-key`. A message counts
 * as published only when the broker confirmed it and did not return it as unroutable.
 *
 * By default messages go to the default exchange with the topic as routing key, i.e. to the
 * queue named like the topic; set `exchange` and `routingKey` for anything else.
 *
 * Failures: an unroutable (returned) or nacked message fails alone and is retried. A publish that
 * closes the channel (an exchange that does not exist) fails that message; the other unconfirmed
 * messages of the batch are published again on a new channel. A lost connection, a blocked
 * connection (memory or disk alarm) or a failed reconnect report an outage, so the dispatcher
 * releases the batch without counting attempts; reconnection waits with exponential backoff.
 */
export class RabbitMqPublisher implements OutboxPublisher {
  private readonly logger = new Logger(RabbitMqPublisher.name);
  // Private fields, so that the URL's password never shows up in util.inspect or JSON.stringify.
  readonly #options: ResolvedRabbitMqPublisherOptions;
  readonly #where: string;
  #connection: ConnectionState | undefined;
  #connecting: Promise<ConnectionState> | undefined;
  #nextAttemptAt = 0;
  #delayMs = 0;
  #lastError = '';

  constructor(options: RabbitMqPublisherOptions) {
    this.#options = resolveRabbitMqPublisherOptions(options);
    this.#where = describeEndpoint(this.#options.url);
  }

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes = new Array<PublishOutcome | undefined>(records.length).fill(undefined);
    let items: Item[] = [];
    records.forEach((record, index) => {
      try {
        items.push({
          index,
          record,
          exchange: this.#options.exchange(record),
          routingKey: this.#options.routingKey(record),
        });
      } catch (error) {
        outcomes[index] = { ok: false, error };
      }
    });

    // A second round only re-publishes the bystanders of a channel closed by another message.
    for (let round = 0; round < 2 && items.length > 0 && !signal.aborted; round++) {
      let connection: ConnectionState;
      let channel: ChannelState;
      try {
        connection = await this.connect();
        channel = await this.channel(connection);
      } catch (error) {
        // In the first round nothing was published yet: the whole batch is handed back.
        if (round === 0) throw toUnavailable(error, 'Could not open a RabbitMQ channel');
        break;
      }
      const results = await this.publishOnChannel(connection, channel, items, signal);
      const bystanders: Item[] = [];
      results.forEach((result, k) => {
        const item = items[k];
        if (item === undefined) return;
        if (result.ok === 'bystander') bystanders.push(item);
        else outcomes[item.index] = result;
      });
      items = bystanders;
    }
    return outcomes.map(
      (o) =>
        o ?? {
          ok: false,
          error: new PublisherUnavailableError(
            'RabbitMQ closed the channel before confirming the message',
          ),
        },
    );
  }

  /** Closes the channel and the connection; a later publish connects again. */
  async close(): Promise<void> {
    const connection = (await this.#connecting?.catch(() => undefined)) ?? this.#connection;
    this.#connection = undefined;
    if (connection === undefined || connection.closed) return;
    connection.closed = true;
    const channel = connection.channel;
    if (channel !== undefined && !channel.closed)
      await channel.channel.close().catch(() => undefined);
    await connection.model.close().catch(() => undefined);
  }

  /** Publishes every item on `state` and waits for their confirms, within `publishTimeoutMs`. */
  private async publishOnChannel(
    connection: ConnectionState,
    state: ChannelState,
    items: readonly Item[],
    signal: AbortSignal,
  ): Promise<RoundResult[]> {
    const entries: Entry[] = [];
    let unpublished = items.length;
    let stopped: RoundResult | undefined;
    const stop = (result: RoundResult, settleInflight: boolean): void => {
      stopped ??= result;
      if (settleInflight) for (const entry of entries) entry.settle(result);
      notify(state);
    };
    const timer = setTimeout(
      () =>
        stop({ ok: false, error: new PublishTimeoutError(this.#options.publishTimeoutMs) }, true),
      this.#options.publishTimeoutMs,
    );
    const onAbort = (): void =>
      stop({ ok: false, error: new PublisherUnavailableError('The publish was aborted') }, true);
    signal.addEventListener('abort', onAbort, { once: true });
    const onBlocked = (): void => stop(this.blockedOutcome(connection), true);
    connection.model.on('blocked', onBlocked);
    try {
      for (const item of items) {
        while (
          (state.outstanding >= this.#options.maxOutstandingConfirms || state.needsDrain) &&
          this.canPublish(connection, state, stopped)
        ) {
          await changed(state);
        }
        if (!this.canPublish(connection, state, stopped)) break;
        entries.push(this.publishOne(state, item));
        unpublished--;
      }
      // Not sent at all: nothing is ambiguous about these, so they are handed back.
      const notSent = this.notSentOutcome(connection, state, stopped);
      const results = await Promise.all(
        entries.map((entry) => new Promise<RoundResult>((resolve) => waitSettled(entry, resolve))),
      );
      return [...results, ...new Array<RoundResult>(unpublished).fill(notSent)];
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      connection.model.off('blocked', onBlocked);
    }
  }

  private notSentOutcome(
    connection: ConnectionState,
    state: ChannelState,
    stopped: RoundResult | undefined,
  ): RoundResult {
    if (connection.blocked !== undefined) return this.blockedOutcome(connection);
    if (state.closed && state.closeError !== undefined && !connection.closed)
      return { ok: 'bystander' };
    if (stopped?.ok === false && stopped.error instanceof PublisherUnavailableError) return stopped;
    const why =
      stopped === undefined
        ? 'RabbitMQ closed the channel'
        : `no confirm slot freed up within ${this.#options.publishTimeoutMs} ms`;
    return { ok: false, error: new PublisherUnavailableError(`The message was not sent: ${why}`) };
  }

  private canPublish(
    connection: ConnectionState,
    state: ChannelState,
    stopped: RoundResult | undefined,
  ): boolean {
    return (
      stopped === undefined &&
      !state.closed &&
      !connection.closed &&
      connection.blocked === undefined
    );
  }

  private publishOne(state: ChannelState, item: Item): Entry {
    const { record, exchange, routingKey } = item;
    const entry = createEntry(item);
    state.inflight.set(record.messageId, entry);
    state.outstanding++;
    let confirmed = false;
    const onConfirm = (error: unknown): void => {
      if (confirmed) return;
      confirmed = true;
      state.outstanding--;
      if (state.inflight.get(record.messageId) === entry) state.inflight.delete(record.messageId);
      notify(state);
      entry.settle(this.confirmOutcome(state, entry, error));
    };
    try {
      const ok = state.channel.publish(
        exchange,
        routingKey,
        Buffer.from(record.payload, 'utf8'),
        this.properties(record),
        onConfirm,
      );
      if (!ok) state.needsDrain = true;
    } catch (error) {
      // The channel is closing under us: the message never left.
      confirmed = true;
      state.outstanding--;
      state.inflight.delete(record.messageId);
      entry.settle({ ok: false, error: toUnavailable(error, 'The message was not sent') });
    }
    return entry;
  }

  private confirmOutcome(state: ChannelState, entry: Entry, error: unknown): RoundResult {
    const { exchange, routingKey } = entry.item;
    if (error === null || error === undefined) {
      const returned = entry.returned;
      if (returned === undefined) return { ok: true };
      const text = `RabbitMQ returned the message as unroutable (${returned.replyCode ?? 312} ${returned.replyText ?? 'NO_ROUTE'}): no queue is bound to exchange '${exchange}' for routing key '${routingKey}'`;
      return {
        ok: false,
        error: new RabbitMqPublishError(
          text,
          'unroutable',
          exchange,
          routingKey,
          returned.replyCode,
        ),
      };
    }
    if ((error as { message?: unknown }).message === 'message nacked') {
      return {
        ok: false,
        error: new RabbitMqPublishError(
          `RabbitMQ refused the message (basic.nack) on exchange '${exchange}'`,
          'nacked',
          exchange,
          routingKey,
        ),
      };
    }
    const closeError = state.closeError;
    if (closeError === undefined) {
      // The connection went away (or the channel was closed by us): nothing wrong with the message.
      return {
        ok: false,
        error: new PublisherUnavailableError(
          `RabbitMQ connection lost before the confirm: ${describeError(error)}`,
          { cause: error },
        ),
      };
    }
    const culprit =
      closeError.code === 404 || closeError.code === 403
        ? EXCHANGE_IN_ERROR.exec(closeError.message)?.[1]
        : undefined;
    if (culprit !== undefined && culprit !== exchange) return { ok: 'bystander' };
    // Either this message's exchange caused the close, or the cause cannot be told apart: the
    // message fails (retried with backoff, dead-lettered in the end) rather than loop forever.
    return {
      ok: false,
      error: new RabbitMqPublishError(
        describeError(closeError),
        'channel-error',
        exchange,
        routingKey,
        closeError.code,
      ),
    };
  }

  private properties(record: OutboxRecord): Options.Publish {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(record.headers)) {
      // CC/BCC would copy the message to other queues (sender-selected distribution).
      if (!RESERVED_HEADERS.has(name.toLowerCase())) headers[name] = value;
    }
    headers[OUTBOX_HEADER_MESSAGE_ID] = record.messageId;
    headers[OUTBOX_HEADER_TYPE] = record.type;
    if (record.key !== null) headers[OUTBOX_HEADER_KEY] = record.key;
    return {
      persistent: true,
      mandatory: true,
      messageId: record.messageId,
      type: record.type,
      // AMQP timestamps are seconds since the epoch.
      timestamp: Math.floor(record.createdAt.getTime() / 1000),
      contentType: 'application/json',
      contentEncoding: 'utf-8',
      appId: this.#options.appId,
      headers,
    };
  }

  private blockedOutcome(connection: ConnectionState): PublishOutcome {
    return {
      ok: false,
      error: new PublisherUnavailableError(
        `RabbitMQ is blocking publishers (${connection.blocked ?? 'resource alarm'})`,
      ),
    };
  }

  /** The open connection, or a new one; fails fast while blocked or waiting to reconnect. */
  private async connect(): Promise<ConnectionState> {
    const current = this.#connection;
    if (current !== undefined && !current.closed) {
      if (current.blocked !== undefined)
        throw new PublisherUnavailableError(`RabbitMQ is blocking publishers (${current.blocked})`);
      return current;
    }
    const waitMs = this.#nextAttemptAt - Date.now();
    if (waitMs > 0 && this.#connecting === undefined) {
      throw new PublisherUnavailableError(
        `RabbitMQ at ${this.#where} is unreachable (${this.#lastError}); next connection attempt in ${waitMs} ms`,
      );
    }
    this.#connecting ??= this.open().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  private async open(): Promise<ConnectionState> {
    const o = this.#options;
    let model: ChannelModel | undefined;
    try {
      model = await connect(withHeartbeat(o.url, o.heartbeat), {
        ...o.socketOptions,
        timeout: o.connectionTimeoutMs,
        clientProperties: { connection_name: o.connectionName },
      });
      const state: ConnectionState = {
        model,
        blocked: undefined,
        closed: false,
        channel: undefined,
        opening: undefined,
      };
      this.watch(state);
      if (o.assertTopology !== undefined) {
        const channel = await model.createChannel();
        channel.on('error', () => undefined); // reported by the rejected call below
        try {
          await o.assertTopology(channel);
        } finally {
          await channel.close().catch(() => undefined);
        }
      }
      this.#connection = state;
      this.#delayMs = 0;
      this.#nextAttemptAt = 0;
      this.logger.log(`Connected to RabbitMQ at ${this.#where}`);
      return state;
    } catch (error) {
      await model?.close().catch(() => undefined);
      const { initialDelayMs, maxDelayMs } = o.reconnect;
      this.#delayMs = Math.min(
        maxDelayMs,
        this.#delayMs === 0 ? initialDelayMs : this.#delayMs * 2,
      );
      this.#nextAttemptAt = Date.now() + this.#delayMs;
      this.#lastError = describeError(error);
      throw new PublisherUnavailableError(
        `Could not connect to RabbitMQ at ${this.#where}: ${this.#lastError}`,
        { cause: error },
      );
    }
  }

  private watch(state: ConnectionState): void {
    const { model } = state;
    model.on('error', (error: unknown) => {
      this.#lastError = describeError(error);
    });
    model.on('close', (error: unknown) => {
      state.closed = true;
      if (this.#connection === state) {
        this.#connection = undefined;
        if (error !== undefined && error !== null) {
          this.#lastError = describeError(error);
          this.logger.warn(
            `RabbitMQ connection to ${this.#where} lost: ${this.#lastError}; reconnecting on the next publish`,
          );
        }
      }
      if (state.channel !== undefined) notify(state.channel);
    });
    model.on('blocked', (reason: unknown) => {
      state.blocked = typeof reason === 'string' && reason !== '' ? reason : 'resource alarm';
      this.logger.warn(`RabbitMQ blocked publishing on ${this.#where}: ${state.blocked}`);
    });
    model.on('unblocked', () => {
      state.blocked = undefined;
      this.logger.log(`RabbitMQ unblocked publishing on ${this.#where}`);
    });
  }

  /** The connection's confirm channel, opened again after the server closed it. */
  private async channel(connection: ConnectionState): Promise<ChannelState> {
    const current = connection.channel;
    if (current !== undefined && !current.closed) return current;
    connection.opening ??= (async () => {
      const channel = await connection.model.createConfirmChannel();
      const state: ChannelState = {
        channel,
        closeError: undefined,
        closed: false,
        outstanding: 0,
        needsDrain: false,
        inflight: new Map(),
        waiters: new Set(),
      };
      channel.on('error', (error: Error & { code?: number }) => {
        state.closeError = error;
        this.logger.warn(
          `RabbitMQ closed the publishing channel: ${describeError(error)}; opening a new one`,
        );
      });
      channel.on('close', () => {
        state.closed = true;
        state.outstanding = 0;
        if (connection.channel === state) connection.channel = undefined;
        notify(state);
      });
      channel.on('return', (message: Message) => {
        const id: unknown = message.properties.messageId;
        const entry = typeof id === 'string' ? state.inflight.get(id) : undefined;
        if (entry !== undefined)
          entry.returned = message.fields as { replyCode?: number; replyText?: string };
      });
      channel.on('drain', () => {
        state.needsDrain = false;
        notify(state);
      });
      connection.channel = state;
      return state;
    })().finally(() => {
      connection.opening = undefined;
    });
    return connection.opening;
  }
}

function createEntry(item: Item): Entry {
  const entry: Entry = {
    item,
    returned: undefined,
    result: undefined,
    listeners: [],
    settle(result) {
      if (entry.result !== undefined) return;
      entry.result = result;
      for (const listener of entry.listeners.splice(0)) listener(result);
    },
  };
  return entry;
}

function waitSettled(entry: Entry, resolve: (result: RoundResult) => void): void {
  if (entry.result !== undefined) resolve(entry.result);
  else entry.listeners.push(resolve);
}

function toUnavailable(error: unknown, what: string): PublisherUnavailableError {
  if (error instanceof PublisherUnavailableError) return error;
  return new PublisherUnavailableError(`${what}: ${describeError(error)}`, { cause: error });
}

function notify(state: ChannelState): void {
  for (const waiter of [...state.waiters]) waiter();
}

/** Resolves at the next confirm, drain, close or stop on the channel. */
function changed(state: ChannelState): Promise<void> {
  return new Promise((resolve) => {
    const waiter = (): void => {
      state.waiters.delete(waiter);
      resolve();
    };
    state.waiters.add(waiter);
  });
}

/** Adds the heartbeat to a URL that does not set one; amqplib reads it from the query. */
function withHeartbeat(url: string | Options.Connect, heartbeat: number): string | Options.Connect {
  if (typeof url !== 'string') return { heartbeat, ...url };
  if (/[?&]heartbeat=/.test(url)) return url;
  return `${url}${url.includes('?') ? '&' : '?'}heartbeat=${heartbeat}`;
}

/** Where we connect, without credentials or query: safe to log. */
function describeEndpoint(url: string | Options.Connect): string {
  if (typeof url !== 'string') {
    const protocol = url.protocol ?? 'amqp';
    return `${protocol}://${url.hostname ?? 'localhost'}:${url.port ?? (protocol === 'amqps' ? 5671 : 5672)}/${url.vhost ?? ''}`;
  }
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
  } catch {
    return 'the configured URL';
  }
}
