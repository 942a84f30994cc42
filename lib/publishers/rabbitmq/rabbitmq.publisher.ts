import { Logger } from '@nestjs/common';
import {
  connect,
  type Channel,
  type ChannelModel,
  type ConfirmChannel,
  type Message,
  type Options,
} from 'amqplib';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import {
  ABORT_CONFIRM_GRACE_MS,
  abortLeavesGrace,
  abortReason,
  toPermanent,
  toUnavailable,
} from '../kit/publish-abort';
import { STRUCTURED_CONTENT_TYPE } from '../cloud-events/cloud-event-headers';
import type { EncodedCloudEvent } from '../cloud-events/outbox-cloud-events.port';
import { publishRound, type PublishOutcomes } from '../kit/publish-round';
import { couldNotConnect, ReconnectingConnection } from '../kit/reconnecting-connection';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { raceAbort } from '../../internal/race-abort';
import { describeError } from '../../internal/describe-error';
import {
  OUTBOX_HEADER_KEY,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_SEQUENCE,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import { closeAmqp, destroyAmqpSocket } from './amqp-close';
import { RabbitMqAccessRefusedError, type RabbitMqRefusal } from './rabbitmq-access-refused.error';
import { RabbitMqHeaderTables } from './rabbitmq-header-tables';
import { RabbitMqPublishError } from './rabbitmq-publish.error';
import {
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
  type ResolvedRabbitMqPublisherOptions,
} from './rabbitmq-publisher.options';
import {
  publishIdOf,
  RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX,
  RABBITMQ_PUBLISH_ID_HEADER,
} from './rabbitmq-publish-id';

/** A message with its destination, and its position in the batch. */
interface Item {
  readonly index: number;
  readonly record: OutboxRecord;
  readonly exchange: string;
  readonly routingKey: string;
  /** The message as a CloudEvent, with the `cloudEvents` option (unless its type is sent plain). */
  readonly event?: EncodedCloudEvent;
}

/**
 * The outcome of one publish on one channel. The server closed the channel (because of some
 * message on it) before this message was confirmed (`suspect`: it may be the one at fault) or
 * before it was written at all (`unsent`). Either way it is published again, on a channel of
 * its own, to find the message at fault.
 */
type RoundResult = PublishOutcome | { readonly ok: 'suspect' } | { readonly ok: 'unsent' };

/** A published message waiting for its confirm. */
interface Entry {
  readonly item: Item;
  /** Its confirm sequence number (delivery tag) on the channel. */
  readonly tag: number;
  readonly publishId: string;
  /** Set by `basic.return`, which RabbitMQ sends before the confirm of the same message. */
  returned: { replyCode?: number; replyText?: string } | undefined;
  result: RoundResult | undefined;
  readonly listeners: ((result: RoundResult) => void)[];
  settle(result: RoundResult): void;
}

interface ChannelState {
  readonly channel: ConfirmChannel;
  /** The server's reason when it closed the channel (404 no exchange, 403, 406 …). */
  closeError: (Error & { code?: unknown }) | undefined;
  closed: boolean;
  /** Delivery tag of the last publish: RabbitMQ numbers a confirm channel's publishes from 1. */
  lastTag: number;
  /** Published and not confirmed yet (abandoned ones included), by delivery tag, in order. */
  readonly unconfirmed: Map<number, Entry>;
  /** The same entries by publish id, for `basic.return`. */
  readonly byPublishId: Map<string, Entry>;
  /** `publish()` returned false: wait for 'drain' before writing more. */
  needsDrain: boolean;
  readonly waiters: Set<() => void>;
}

interface ConnectionState {
  readonly model: ChannelModel;
  blocked: string | undefined;
  closed: boolean;
  /** The channel every batch publishes on first. */
  channel: ChannelState | undefined;
  opening: Promise<ChannelState> | undefined;
}

const RESERVED_HEADERS = new Set(['cc', 'bcc']);
/** The AMQP binding's prefix of attribute names in binary mode (`cloudEvents:` is the other). */
export const AMQP_CLOUDEVENTS_PREFIX = 'cloudEvents_';
// The module's own headers, after the message's, in this order (see properties()).
const OUTBOX_HEADERS = [
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
  OUTBOX_HEADER_KEY,
  RABBITMQ_PUBLISH_ID_HEADER,
] as const;
const ACCESS_REFUSED = 403;
const NOT_FOUND = 404;
/** How long an exchange seen to exist is trusted before it is checked again. */
const EXCHANGE_CHECK_TTL_MS = 10_000;
// amqplib reports a refused handshake only as text, in two fixed formats of its lib/connection.js
// (the server's reply code is no property): "Handshake terminated by server: 403 (ACCESS-REFUSED)
// with message ..." when the login is refused, and "Expected ConnectionOpenOk; got
// <ConnectionClose ...>" when connection.open to the vhost is. Anchored on those formats only.
const HANDSHAKE_REFUSED = /^Handshake terminated by server: (403|530) /;
const VHOST_REFUSED = /^Expected ConnectionOpenOk; got <ConnectionClose\b/;

/**
 * Publishes outbox messages to RabbitMQ with amqplib on a confirm channel: persistent, mandatory
 * messages with `messageId`, `type`, `timestamp`, `contentType: application/json` and the
 * user's headers plus `x-outbox-message-id`, `x-outbox-type`, `x-outbox-key` and
 * `x-outbox-publish-id` (with `outboxHeaders: false`, the user's headers only, and the publish id
 * in `correlationId`). A message counts as published only when the broker confirmed it and did
 * not return it as unroutable (returns are matched to the exact publish by its publish id).
 *
 * By default messages go to the default exchange with the topic as routing key, i.e. to the
 * queue named like the topic; set `exchange` and `routingKey` for anything else, or give one
 * message its own with its `rabbitmq` attributes (with `priority` and `expiration`). A binary
 * message's bytes are the content as they are, with its `contentType`.
 *
 * Failures: an unroutable (returned) or nacked message fails alone and is retried. When a publish
 * makes the server close the channel (an exchange that does not exist, a 406), every message
 * unconfirmed on it, of any batch, is published again on channels of its own, narrowed down until
 * the message at fault is found: only that one fails. A lost connection, a blocked connection
 * (memory or disk alarm) or a failed reconnect report an outage, so the dispatcher releases the
 * batch without counting attempts; reconnection waits with exponential backoff. A refused login,
 * vhost or permission ({@link RabbitMqAccessRefusedError}) is logged at error level on every
 * attempt and never costs a message an attempt; {@link RabbitMqPublisher.connect} lets the
 * application fail at bootstrap instead.
 */
export class RabbitMqPublisher implements OutboxPublisher {
  private readonly logger = new Logger(RabbitMqPublisher.name);
  // Private fields, so that the URL's password never shows up in util.inspect or JSON.stringify.
  readonly #options: ResolvedRabbitMqPublisherOptions;
  readonly #where: string;
  readonly #user: string | undefined;
  readonly #vhost: string;
  readonly #link: ReconnectingConnection<ConnectionState>;
  /** Exchanges seen to exist, with when (see `missingExchanges`). */
  readonly #exchangesSeen = new Map<string, number>();
  #publishes = 0;
  readonly #headerTables = new RabbitMqHeaderTables(OUTBOX_HEADERS);

  constructor(options: RabbitMqPublisherOptions) {
    this.#options = resolveRabbitMqPublisherOptions(options);
    this.#where = describeEndpoint(this.#options.url);
    ({ user: this.#user, vhost: this.#vhost } = identity(this.#options.url));
    const what = `RabbitMQ at ${this.#where}`;
    this.#link = new ReconnectingConnection<ConnectionState>({
      what,
      reconnect: this.#options.reconnect,
      logger: this.logger,
      open: () => this.open(),
      usable: (state) => !state.closed,
      failure: (error) => this.accessRefusal(error) ?? couldNotConnect(what, error),
      refusal: (failure) =>
        failure instanceof RabbitMqAccessRefusedError ? failure.message : undefined,
      // A refusal is typed, so that an app's connect() or health check can tell it apart.
      keepsLastFailure: (last) => last instanceof RabbitMqAccessRefusedError,
    });
  }

  /**
   * Connects now instead of on the first publish (and now, even while waiting to reconnect).
   * Rejects with {@link RabbitMqAccessRefusedError} when RabbitMQ refuses the credentials, the
   * vhost or the topology's permissions, and with `PublisherUnavailableError` when it cannot be
   * reached. Await it where the publisher is built to stop a misconfigured application at
   * bootstrap; `publish()` keeps reconnecting with backoff either way.
   */
  async connect(): Promise<void> {
    await this.connection(true);
  }

  /**
   * For health checks: resolves when a connection to RabbitMQ is open (opening one now if
   * needed) and RabbitMQ is not blocking publishers; rejects with the reason otherwise.
   */
  async ping(signal: AbortSignal): Promise<void> {
    await raceAbort(this.connection(true), signal);
  }

  publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    return publishRound(records, signal, {
      item: (record, index): Item | PublishOutcome => {
        // A message's own exchange or routing key (broker attributes) wins over the route.
        const own = record.attributes?.rabbitmq;
        const item: Item = {
          index,
          record,
          exchange: own?.exchange ?? this.#options.exchange(record),
          routingKey: own?.routingKey ?? this.#options.routingKey(record),
        };
        const cloudEvents = this.#options.cloudEvents;
        if (cloudEvents === undefined) return item;
        let event: EncodedCloudEvent | undefined;
        try {
          event = cloudEvents.encode(record);
        } catch (error) {
          return { ok: false, error: toPermanent(error, 'The message is no valid CloudEvent') };
        }
        return event === undefined ? item : { ...item, event };
      },
      send: (items, outcomes) => this.send(items, outcomes, signal),
      unanswered: () =>
        new PublisherUnavailableError('RabbitMQ closed the channel before confirming the message'),
    });
  }

  private async send(
    items: readonly Item[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    let connection: ConnectionState;
    let shared: ChannelState;
    try {
      connection = await this.connection(false);
      shared = await this.sharedChannel(connection);
    } catch (error) {
      // Nothing was published yet: the whole batch is handed back.
      throw toUnavailable(error, 'Could not open a RabbitMQ channel');
    }
    // A publish to a missing exchange closes the channel, and the confirms of messages the
    // broker had already routed on it are lost with it: publishing those again would deliver
    // them twice. So such messages fail here, before anything is sent.
    const missing = await this.missingExchanges(connection, items);
    const sendable = items.filter((item) => {
      const error = missing.get(item.exchange);
      if (error === undefined) return true;
      outcomes[item.index] = { ok: false, error: this.noExchange(error, item) };
      return false;
    });
    const results = await this.publishOnChannel(connection, shared, sendable, signal);
    const again: Item[] = [];
    results.forEach((result, k) => {
      const item = sendable[k];
      if (item === undefined) return;
      if (result.ok === 'suspect' || result.ok === 'unsent') again.push(item);
      else outcomes[item.index] = result;
    });
    if (again.length > 0) await this.isolate(connection, again, outcomes, signal);
  }

  /** Closes the channel and the connection; a later publish connects again. */
  async close(): Promise<void> {
    const connection = await this.#link.take();
    if (connection === undefined || connection.closed) return;
    connection.closed = true;
    const { model } = connection;
    const channel = connection.channel;
    const closing = (async () => {
      if (channel !== undefined && !channel.closed) await closeAmqp(channel.channel);
      await closeAmqp(model);
    })();
    // A broker that does not answer the close, with the socket still open, must not hold the
    // app's shutdown: after publishTimeoutMs the socket is ended.
    await raceAbort(closing, AbortSignal.timeout(this.#options.publishTimeoutMs)).catch(() =>
      destroyAmqpSocket(model),
    );
  }

  /**
   * Publishes messages whose channel the server closed before confirming them, each group on a
   * channel of its own, so that neither another batch nor the message at fault can disturb them.
   * A group whose channel is closed again is split in halves; a message that is the only one
   * unconfirmed on a closed channel is the one at fault. (The server processes a channel's
   * publishes in order and never confirms the one it closed the channel for.)
   */
  private async isolate(
    connection: ConnectionState,
    items: readonly Item[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    const groups: Item[][] = [[...items]];
    // Enough to isolate every message alone; a channel the server keeps closing for no message's
    // fault must not loop forever.
    let rounds = 2 * items.length + 2;
    const refused = new Set<string>();
    while (groups.length > 0 && !pastPublishDeadline(signal)) {
      const group = groups.shift() ?? [];
      if (rounds-- <= 0) {
        const error = new PublisherUnavailableError(
          'RabbitMQ kept closing the channel and the message at fault could not be isolated',
        );
        for (const item of group) outcomes[item.index] ??= { ok: false, error };
        continue;
      }
      let state: ChannelState;
      try {
        state = await this.openChannel(connection);
      } catch (cause) {
        const error = toUnavailable(cause, 'Could not open a RabbitMQ channel');
        for (const item of [group, ...groups].flat()) outcomes[item.index] ??= { ok: false, error };
        break;
      }
      const results = await this.publishOnChannel(connection, state, group, signal);
      if (!state.closed) await closeAmqp(state.channel);
      const unconfirmed: Item[] = [];
      const unsent: Item[] = [];
      results.forEach((result, k) => {
        const item = group[k];
        if (item === undefined) return;
        if (result.ok === 'suspect') unconfirmed.push(item);
        else if (result.ok === 'unsent') unsent.push(item);
        else outcomes[item.index] = result;
      });
      const [only] = unconfirmed;
      if (unconfirmed.length === 1 && only !== undefined) {
        const error = this.channelFailure(state, only);
        outcomes[only.index] = { ok: false, error };
        if (error instanceof RabbitMqAccessRefusedError) refused.add(error.message);
      } else if (unconfirmed.length > 1) {
        const half = Math.ceil(unconfirmed.length / 2);
        groups.unshift(unconfirmed.slice(0, half), unconfirmed.slice(half));
      }
      if (unsent.length > 0) groups.push(unsent);
    }
    // A permission problem is the operator's to fix, and retrying will not: say so at error level.
    for (const message of refused) this.logger.error(message);
  }

  /**
   * The exchanges of `items` that do not exist, with the server's error, checked with a passive
   * declare on a channel of their own (a 404 closes it) and remembered for a few seconds when
   * they do exist, so a steady stream costs one check per exchange every
   * `EXCHANGE_CHECK_TTL_MS`. The default exchange always exists. A check that fails for another
   * reason says nothing: the publish goes ahead and the channel-close path copes.
   */
  private async missingExchanges(
    connection: ConnectionState,
    items: readonly Item[],
  ): Promise<Map<string, Error>> {
    const missing = new Map<string, Error>();
    const now = Date.now();
    const unchecked = [...new Set(items.map((i) => i.exchange))].filter(
      (name) => name !== '' && (this.#exchangesSeen.get(name) ?? 0) + EXCHANGE_CHECK_TTL_MS <= now,
    );
    let channel: Channel | undefined;
    try {
      for (const name of unchecked) {
        channel ??= await this.checkChannel(connection);
        try {
          await channel.checkExchange(name);
          this.#exchangesSeen.set(name, Date.now());
        } catch (error) {
          const code = (error as { code?: unknown }).code;
          if (code === NOT_FOUND && error instanceof Error) missing.set(name, error);
          // The server closed the channel: the next check needs a new one.
          channel = undefined;
        }
      }
    } catch {
      // No channel for checks: publish as before and let the channel-close path find culprits.
    } finally {
      if (channel !== undefined) await closeAmqp(channel);
    }
    return missing;
  }

  private async checkChannel(connection: ConnectionState): Promise<Channel> {
    const channel = await connection.model.createChannel();
    // A failed check closes the channel with an 'error' event, answered by checkExchange itself.
    channel.on('error', () => undefined);
    return channel;
  }

  private noExchange(error: Error, item: Item): RabbitMqPublishError {
    return new RabbitMqPublishError(
      `${describeError(error)}: the message was not published`,
      'channel-error',
      item.exchange,
      item.routingKey,
      NOT_FOUND,
    );
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
    // Settles this round's entries only: an abandoned publish stays unconfirmed on the channel
    // until its confirm (or the channel's close) arrives, so a late return still finds it.
    const stop = (result: RoundResult): void => {
      stopped ??= result;
      for (const entry of entries) entry.settle(result);
      notify(state);
    };
    const timer = setTimeout(
      () => stop({ ok: false, error: new PublishTimeoutError(this.#options.publishTimeoutMs) }),
      this.#options.publishTimeoutMs,
    );
    // Aborted other than by the deadline: nothing more is written, and what was written is
    // answered as its confirms come, until ABORT_CONFIRM_GRACE_MS (see there).
    let halted: RoundResult | undefined;
    let grace: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      const result: RoundResult = { ok: false, error: abortReason(signal) };
      if (!abortLeavesGrace(signal)) {
        stop(result);
        return;
      }
      halted ??= result;
      notify(state);
      grace ??= setTimeout(() => stop(result), ABORT_CONFIRM_GRACE_MS);
    };
    // Aborted, or past the deadline, while the connection or channel was being opened (or
    // while the process was paused): publish nothing.
    if (pastPublishDeadline(signal)) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const onBlocked = (): void => stop(this.blockedOutcome(connection));
    connection.model.on('blocked', onBlocked);
    try {
      for (const item of items) {
        while (
          (state.unconfirmed.size >= this.#options.maxOutstandingConfirms || state.needsDrain) &&
          this.canPublish(connection, state, stopped ?? halted)
        ) {
          await changed(state);
        }
        // Past the deadline the abort stops the round (onAbort), whether or not its timer fired.
        if (pastPublishDeadline(signal) || !this.canPublish(connection, state, stopped ?? halted))
          break;
        entries.push(this.publishOne(state, item));
        unpublished--;
      }
      // Not sent at all: nothing is ambiguous about these. (Decided now, while the channel's
      // state is the one that stopped the loop.)
      const notSent =
        unpublished === 0 ? undefined : this.notSentOutcome(connection, state, stopped ?? halted);
      const results = await Promise.all(
        entries.map((entry) => new Promise<RoundResult>((resolve) => waitSettled(entry, resolve))),
      );
      return notSent === undefined
        ? results
        : [...results, ...new Array<RoundResult>(unpublished).fill(notSent)];
    } finally {
      clearTimeout(timer);
      clearTimeout(grace);
      signal.removeEventListener('abort', onAbort);
      connection.model.off('blocked', onBlocked);
    }
  }

  /**
   * The outcome of the messages the loop did not get to write: `sent: false`, so that none
   * counts an attempt for a wait on the messages before it (confirm slots, drain, a block).
   */
  private notSentOutcome(
    connection: ConnectionState,
    state: ChannelState,
    stopped: RoundResult | undefined,
  ): RoundResult {
    if (connection.blocked !== undefined)
      return { ...this.blockedOutcome(connection), sent: false };
    if (state.closed && state.closeError !== undefined && !connection.closed)
      return { ok: 'unsent' };
    if (
      stopped?.ok === false &&
      (stopped.error instanceof PublisherUnavailableError ||
        stopped.error instanceof PublishTimeoutError)
    )
      return { ok: false, error: stopped.error, sent: false };
    const why =
      stopped === undefined
        ? 'RabbitMQ closed the channel'
        : `no confirm slot freed up within ${this.#options.publishTimeoutMs} ms`;
    return {
      ok: false,
      error: new PublisherUnavailableError(`The message was not sent: ${why}`),
      sent: false,
    };
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
    const publishId = String(++this.#publishes);
    const entry = createEntry(item, ++state.lastTag, publishId);
    state.unconfirmed.set(entry.tag, entry);
    state.byPublishId.set(publishId, entry);
    try {
      // Confirms are taken from the channel's ack/nack events by delivery tag (see openChannel),
      // not from this callback, which amqplib also calls with an error when the channel closes.
      const ok =
        item.event === undefined
          ? state.channel.publish(
              item.exchange,
              item.routingKey,
              typeof item.record.payload === 'string'
                ? Buffer.from(item.record.payload, 'utf8')
                : item.record.payload,
              this.properties(item.record, publishId),
            )
          : this.publishCloudEvent(state, item, item.event, publishId);
      if (!ok) state.needsDrain = true;
    } catch (error) {
      // The message never left. amqplib throws a TypeError or RangeError while encoding a frame
      // it cannot encode (a property out of range), before writing anything: this message would
      // fail so on every attempt, and as an outage it would be retried forever without its
      // attempts counting, holding its key. The broker never saw it, so its delivery tag is
      // given back (the next message gets it) and the channel goes on. Anything else means the
      // channel is closing under us: an outage.
      forget(state, entry);
      const unencodable = error instanceof TypeError || error instanceof RangeError;
      if (unencodable) state.lastTag--;
      entry.settle({
        ok: false,
        error: unencodable
          ? new PermanentPublishError(
              `RabbitMQ cannot encode the message: ${describeError(error)}`,
              {
                cause: error,
              },
            )
          : toUnavailable(error, 'The message was not sent'),
      });
    }
    return entry;
  }

  /** The outcome of a confirm (`nacked`: a basic.nack) for `entry`. */
  private confirmOutcome(entry: Entry, nacked: boolean): PublishOutcome {
    const { exchange, routingKey } = entry.item;
    if (nacked) {
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
    const returned = entry.returned;
    if (returned === undefined) return { ok: true };
    const text = `RabbitMQ returned the message as unroutable (${returned.replyCode ?? 312} ${returned.replyText ?? 'NO_ROUTE'}): no queue is bound to exchange '${exchange}' for routing key '${routingKey}'`;
    return {
      ok: false,
      error: new RabbitMqPublishError(text, 'unroutable', exchange, routingKey, returned.replyCode),
    };
  }

  /** The failure of the message that made the server close its (own) channel. */
  private channelFailure(state: ChannelState, item: Item): unknown {
    const { exchange, routingKey } = item;
    const closeError = state.closeError;
    const code = typeof closeError?.code === 'number' ? closeError.code : undefined;
    if (code === ACCESS_REFUSED) {
      return this.refused(
        'permission',
        `publishing to exchange '${exchange}' was refused (${describeError(closeError)})`,
        closeError,
      );
    }
    return new RabbitMqPublishError(
      closeError === undefined ? 'RabbitMQ closed the channel' : describeError(closeError),
      'channel-error',
      exchange,
      routingKey,
      code,
    );
  }

  /**
   * A message as a CloudEvent (the CloudEvents AMQP binding, on AMQP 0-9-1's headers table for
   * its application properties): in binary mode each attribute a `cloudEvents_` header (the
   * separator the binding prefers, which JMS selectors accept), `datacontenttype` the
   * `content-type` property and the payload the body; in structured mode the event as the JSON
   * body with `content-type: application/cloudevents+json`. No `x-outbox-*` headers: the
   * `messageId`, `type` and `timestamp` properties are set as for any message, and the publish
   * id goes in `correlationId`.
   */
  private publishCloudEvent(
    state: ChannelState,
    item: Item,
    event: EncodedCloudEvent,
    publishId: string,
  ): boolean {
    const { record } = item;
    // The per-key number is the event's `sequence` attribute (as in headersBesideCloudEvent).
    const own = Object.keys(record.headers).filter(
      (name) => name !== OUTBOX_HEADER_SEQUENCE && !RESERVED_HEADERS.has(name.toLowerCase()),
    );
    const attributes = event.mode === 'binary' ? Object.keys(event.attributes) : [];
    // A reused table per set of names, as for plain messages (see RabbitMqHeaderTables).
    const headers = this.#headerTables.tableFor(
      attributes.length === 0
        ? own
        : [...own, ...attributes.map((name) => `${AMQP_CLOUDEVENTS_PREFIX}${name}`)],
      false,
    );
    for (const name of own) headers[name] = record.headers[name];
    let body: Buffer;
    let contentType: string;
    if (event.mode === 'binary') {
      for (const name of attributes)
        headers[`${AMQP_CLOUDEVENTS_PREFIX}${name}`] = event.attributes[name];
      body = typeof record.payload === 'string' ? Buffer.from(record.payload) : record.payload;
      contentType = event.contentType;
    } else {
      body = Buffer.from(event.body);
      contentType = STRUCTURED_CONTENT_TYPE;
    }
    assertHeadersFit(headers);
    const broker = record.attributes?.rabbitmq;
    return state.channel.publish(item.exchange, item.routingKey, body, {
      persistent: true,
      mandatory: true,
      messageId: record.messageId,
      type: record.type,
      timestamp: Math.floor(record.createdAt.getTime() / 1000),
      contentType,
      ...(broker?.priority === undefined ? {} : { priority: broker.priority }),
      ...(broker?.expiration === undefined ? {} : { expiration: String(broker.expiration) }),
      appId: this.#options.appId,
      correlationId: `${RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX}${publishId}`,
      headers,
    });
  }

  private properties(record: OutboxRecord, publishId: string): Options.Publish {
    const outboxHeaders = this.#options.outboxHeaders;
    // CC/BCC would copy the message to other queues (sender-selected distribution).
    const own = Object.keys(record.headers).filter(
      (name) => !RESERVED_HEADERS.has(name.toLowerCase()),
    );
    const headers = this.#headerTables.tableFor(own, outboxHeaders);
    for (const name of own) headers[name] = record.headers[name];
    if (outboxHeaders) {
      headers[OUTBOX_HEADER_MESSAGE_ID] = record.messageId;
      headers[OUTBOX_HEADER_TYPE] = record.type;
      headers[OUTBOX_HEADER_KEY] = record.key ?? undefined;
      headers[RABBITMQ_PUBLISH_ID_HEADER] = publishId;
    }
    assertHeadersFit(headers);
    const attributes = record.attributes?.rabbitmq;
    return {
      persistent: true,
      mandatory: true,
      messageId: record.messageId,
      type: record.type,
      // AMQP timestamps are seconds since the epoch.
      timestamp: Math.floor(record.createdAt.getTime() / 1000),
      // Bytes go with their own content type and no content encoding: they are not text.
      ...(record.encoding === 'binary'
        ? { contentType: record.contentType }
        : { contentType: 'application/json', contentEncoding: 'utf-8' }),
      ...(attributes?.priority === undefined ? {} : { priority: attributes.priority }),
      ...(attributes?.expiration === undefined
        ? {}
        : { expiration: String(attributes.expiration) }),
      appId: this.#options.appId,
      // Without the outbox headers, none unless the message has headers of its own: headers
      // are what costs RabbitMQ and amqplib most per message, even one (bench P1).
      ...(outboxHeaders
        ? { headers }
        : {
            correlationId: `${RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX}${publishId}`,
            ...(own.length > 0 ? { headers } : {}),
          }),
    };
  }

  private blockedOutcome(connection: ConnectionState): { ok: false; error: Error } {
    return {
      ok: false,
      error: new PublisherUnavailableError(
        `RabbitMQ is blocking publishers (${connection.blocked ?? 'resource alarm'})`,
      ),
    };
  }

  /**
   * The open connection, or a new one; fails fast while blocked or waiting to reconnect (unless
   * `now`, for `connect()`).
   */
  private async connection(now: boolean): Promise<ConnectionState> {
    const current = this.#link.current;
    if (current !== undefined && !current.closed && current.blocked !== undefined)
      throw new PublisherUnavailableError(`RabbitMQ is blocking publishers (${current.blocked})`);
    return this.#link.get(now);
  }

  /** Opens a connection and declares the topology; rejects with why not, having closed it. */
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
          await closeAmqp(channel);
        }
      }
      return state;
    } catch (error) {
      if (model !== undefined) await closeAmqp(model);
      throw error;
    }
  }

  /** The refusal in a failed connection attempt, if RabbitMQ refused rather than failed. */
  private accessRefusal(error: unknown): RabbitMqAccessRefusedError | undefined {
    const message = error instanceof Error ? error.message : '';
    const login = HANDSHAKE_REFUSED.exec(message);
    if (login !== null) {
      return this.refused('login', 'the login was refused', error, Number(login[1]));
    }
    if (VHOST_REFUSED.test(message)) return this.refused('vhost', 'access was refused', error);
    // A channel error of assertTopology carries the reply code as a property.
    if ((error as { code?: unknown } | null)?.code === ACCESS_REFUSED) {
      return this.refused(
        'permission',
        `declaring the topology was refused (${describeError(error)})`,
        error,
      );
    }
    return undefined;
  }

  private refused(
    refusal: RabbitMqRefusal,
    what: string,
    cause: unknown,
    replyCode: number | undefined = refusal === 'vhost' ? undefined : ACCESS_REFUSED,
  ): RabbitMqAccessRefusedError {
    const user = this.#user === undefined ? 'the default user' : `user '${this.#user}'`;
    const fix =
      refusal === 'login'
        ? 'the credentials are wrong (username or password)'
        : refusal === 'vhost'
          ? `the credentials or vhost permissions are wrong: ${user} may not use vhost '${this.#vhost}' (or it does not exist)`
          : `the vhost permissions are wrong: ${user} may not do this on vhost '${this.#vhost}'`;
    return new RabbitMqAccessRefusedError(
      `RabbitMQ at ${this.#where} refused ${user}: ${what}; ${fix}. Nothing is published until this is fixed, and no message loses an attempt.`,
      refusal,
      this.#where,
      this.#user,
      this.#vhost,
      replyCode,
      { cause },
    );
  }

  private watch(state: ConnectionState): void {
    const { model } = state;
    model.on('error', (error: unknown) => {
      this.#link.failing(
        new PublisherUnavailableError(`RabbitMQ connection error: ${describeError(error)}`, {
          cause: error,
        }),
      );
    });
    model.on('close', (error: unknown) => {
      state.closed = true;
      // Closed by close() (no error): no news for the batches that come meanwhile.
      const lost =
        error === undefined || error === null
          ? undefined
          : new PublisherUnavailableError(`RabbitMQ connection lost: ${describeError(error)}`, {
              cause: error,
            });
      if (this.#link.forget(state, lost) && lost !== undefined) {
        this.logger.warn(
          `RabbitMQ connection to ${this.#where} lost: ${describeError(error)}; reconnecting on the next publish`,
        );
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

  /** The connection's shared confirm channel, opened again after the server closed it. */
  private async sharedChannel(connection: ConnectionState): Promise<ChannelState> {
    const current = connection.channel;
    if (current !== undefined && !current.closed) return current;
    connection.opening ??= this.openChannel(connection)
      .then((state) => {
        if (!state.closed) connection.channel = state;
        return state;
      })
      .finally(() => {
        connection.opening = undefined;
      });
    return connection.opening;
  }

  private async openChannel(connection: ConnectionState): Promise<ChannelState> {
    const channel = await connection.model.createConfirmChannel();
    const state: ChannelState = {
      channel,
      closeError: undefined,
      closed: false,
      lastTag: 0,
      unconfirmed: new Map(),
      byPublishId: new Map(),
      needsDrain: false,
      waiters: new Set(),
    };
    channel.on('error', (error: Error & { code?: unknown }) => {
      state.closeError = error;
      this.logger.warn(
        `RabbitMQ closed a publishing channel: ${describeError(error)}; its unconfirmed messages are published again on channels of their own`,
      );
    });
    channel.on('close', () => {
      state.closed = true;
      if (connection.channel === state) connection.channel = undefined;
      // amqplib's own callbacks stop at the first confirmed hole in its window; settle all here.
      const closed: RoundResult =
        state.closeError !== undefined
          ? { ok: 'suspect' }
          : {
              ok: false,
              error: new PublisherUnavailableError('RabbitMQ connection lost before the confirm'),
            };
      for (const entry of state.unconfirmed.values()) entry.settle(closed);
      state.unconfirmed.clear();
      state.byPublishId.clear();
      notify(state);
    });
    channel.on('ack', (fields: { deliveryTag: number; multiple: boolean }) =>
      this.confirmed(state, fields, false),
    );
    channel.on('nack', (fields: { deliveryTag: number; multiple: boolean }) =>
      this.confirmed(state, fields, true),
    );
    channel.on('return', (message: Message) => {
      const id = publishIdOf(message.properties);
      const entry = id === undefined ? undefined : state.byPublishId.get(id);
      if (entry !== undefined)
        entry.returned = message.fields as { replyCode?: number; replyText?: string };
    });
    channel.on('drain', () => {
      state.needsDrain = false;
      notify(state);
    });
    return state;
  }

  /** Settles the entries a basic.ack / basic.nack confirms (one tag, or every tag up to it). */
  private confirmed(
    state: ChannelState,
    { deliveryTag, multiple }: { deliveryTag: number; multiple: boolean },
    nacked: boolean,
  ): void {
    const settled: Entry[] = [];
    if (multiple) {
      for (const [tag, entry] of state.unconfirmed) {
        if (tag > deliveryTag) break;
        settled.push(entry);
      }
    } else {
      const entry = state.unconfirmed.get(deliveryTag);
      if (entry !== undefined) settled.push(entry);
    }
    for (const entry of settled) {
      forget(state, entry);
      entry.settle(this.confirmOutcome(entry, nacked));
    }
    notify(state);
  }
}

function createEntry(item: Item, tag: number, publishId: string): Entry {
  const entry: Entry = {
    item,
    tag,
    publishId,
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

function forget(state: ChannelState, entry: Entry): void {
  state.unconfirmed.delete(entry.tag);
  state.byPublishId.delete(entry.publishId);
}

function waitSettled(entry: Entry, resolve: (result: RoundResult) => void): void {
  if (entry.result !== undefined) resolve(entry.result);
  else entry.listeners.push(resolve);
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

/** The user and vhost we connect as (never the password), for messages about refusals. */
function identity(url: string | Options.Connect): { user: string | undefined; vhost: string } {
  if (typeof url !== 'string') return { user: url.username, vhost: url.vhost ?? '/' };
  try {
    const parsed = new URL(url);
    const path = parsed.pathname.replace(/^\//, '');
    return {
      user: parsed.username === '' ? undefined : decodeURIComponent(parsed.username),
      // amqplib's rule: an empty path means the vhost '/'; otherwise the decoded path.
      vhost: path === '' ? '/' : decodeURIComponent(path),
    };
  } catch {
    return { user: undefined, vhost: '/' };
  }
}

/**
 * amqplib encodes a message's properties, its headers table included, into one 64 KiB buffer,
 * and a header value that crosses the buffer's end is cut short without an error, its full length
 * still written: RabbitMQ then closes the connection (541), failing every message on it as an
 * outage, and the message, first again at the next claim, would stop all publishing for good.
 * Such a message fails here instead (a RangeError, which publishOne turns into a permanent
 * failure). The bound leaves room for the other properties (a few short strings of at most 255
 * bytes each).
 */
const MAX_HEADERS_BYTES = 60_000;

function assertHeadersFit(headers: Record<string, unknown>): void {
  // A field takes a length byte, its name, a type byte, a 4-byte length and its value; a
  // character takes at most 3 bytes in UTF-8. Exact byte counts only when that bound is reached.
  let upper = 0;
  for (const name in headers) {
    const value = headers[name];
    upper += 6 + 3 * (name.length + (typeof value === 'string' ? value.length : 0));
  }
  if (upper <= MAX_HEADERS_BYTES) return;
  let bytes = 0;
  for (const name in headers) {
    const value = headers[name];
    bytes +=
      6 + Buffer.byteLength(name) + (typeof value === 'string' ? Buffer.byteLength(value) : 0);
  }
  if (bytes > MAX_HEADERS_BYTES) {
    throw new RangeError(
      `its headers take ${bytes} bytes in AMQP, more than the ${MAX_HEADERS_BYTES} a message's properties can hold: send large data in the payload`,
    );
  }
}
