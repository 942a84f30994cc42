import { Logger } from '@nestjs/common';
import {
  Kafka,
  logLevel as KafkaLogLevel,
  type ICustomPartitioner,
  type IHeaders,
  type LogEntry,
  type Message,
  type Producer,
  type TopicMessages,
} from 'kafkajs';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import {
  abortReason as abortedBy,
  answerWithinGrace,
  toPermanent,
  untilAborted,
} from '../kit/publish-abort';
import { failUnanswered, publishRound, type PublishOutcomes } from '../kit/publish-round';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { describeError, redactSecrets } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import {
  OUTBOX_HEADER_CONTENT_TYPE,
  OUTBOX_HEADER_MESSAGE_ID,
  OUTBOX_HEADER_TYPE,
} from '../../outbox.constants';
import { classifyKafkaError, isPermanentKafkaError } from '../kafka-error.classifier';
import { kafkaCloudEvent } from './kafka-cloud-event';
import {
  resolveKafkaPublisherOptions,
  type KafkaPublisherOptions,
  type ResolvedKafkaPublisherOptions,
} from './kafka-publisher.options';

/**
 * The partition the partitioner assigned a message on its first send, kept on the message itself
 * (a message object of this publisher's own, made anew for each publish): a WeakMap entry per
 * message cost several times more (a CPU profile of a Kafka drain put the partitioner's
 * bookkeeping at about 2 µs a message). Every later send of that message within the publish (a
 * kafkajs retry, the narrowing of a refused batch) goes to the same partition: see
 * recordingPartitioner.
 */
const ASSIGNED_PARTITION = Symbol('nestjs-outbox:kafka-partition');

type OutgoingMessage = Message & { [ASSIGNED_PARTITION]?: number };

/** One message of a batch on its way out, with its position in the batch. */
interface Outgoing {
  readonly index: number;
  readonly topic: string;
  readonly message: OutgoingMessage;
}

/**
 * A connected producer shared by every batch, and the sends still running on it. A producer that
 * has to be replaced is retired: new batches get a fresh one, and the old one is disconnected only
 * once its last send has settled, so that replacing it never fails another batch's send.
 */
interface ProducerHandle {
  readonly producer: Producer;
  /** Settles when the batch sending now (and every one queued before it) is done. */
  tail: Promise<void>;
  sends: number;
  retired: boolean;
  /** Set once `disconnect()` was called: a send failing after that failed because of it. */
  disconnected: boolean;
}

/** The failure of a batch whose producer was retired before its turn came: sent again later. */
const retiredBeforeTurn = (): PublisherUnavailableError =>
  new PublisherUnavailableError(
    'The Kafka producer was replaced before this batch was sent; it goes out on a new one',
  );

// Kafka's own rule for topic names (clients/src/main/java/.../internals/Topic.java).
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;
const LOG_FIELDS = ['broker', 'topic', 'partition', 'retryCount', 'retryTime', 'error', 'groupId'];

/**
 * Publishes outbox messages to Kafka with kafkajs: one `sendBatch` per dispatch batch (grouped by
 * topic), an idempotent producer with `acks: -1`, the message key as the Kafka key, the JSON
 * payload as the value and `x-outbox-message-id` / `x-outbox-type` next to the user's headers.
 * A binary message's bytes are the value as they are, with `x-outbox-content-type`; a message's
 * `kafka.partition` attribute picks its partition (one the topic lacks dead-letters it).
 *
 * kafkajs answers a batch as a whole. When it is refused because of one message (too large, an
 * invalid record), the publisher narrows the failure down (by topic, then by partition, then by
 * halves) so that only the culprit fails and everything else is published; the producer's
 * idempotence makes the broker drop the copies of partitions it had already appended. Connection
 * failures report an outage, so the dispatcher releases the batch without counting attempts.
 * Failures are told apart by kafkajs error classes, Kafka protocol error types and socket error
 * codes, never by message text.
 *
 * Batches share one producer, and several may be in flight at once. An aborted batch (its
 * deadline passed) stops waiting and reports what Kafka had not answered with the abort reason;
 * its request is left to finish, and the producer and the other batches' sends are untouched.
 * Only a connection or producer-state failure replaces the producer.
 *
 * Connects on the first publish; `close()` disconnects.
 */
export class KafkaPublisher implements OutboxPublisher {
  private readonly logger = new Logger(KafkaPublisher.name);
  // Private fields, so that the SASL password never shows up in util.inspect or JSON.stringify.
  readonly #options: ResolvedKafkaPublisherOptions;
  readonly #kafka: Kafka;
  #current: ProducerHandle | undefined;
  #connecting: Promise<ProducerHandle> | undefined;
  /** Every producer not yet disconnected, the current one and retired ones still sending. */
  readonly #handles = new Set<ProducerHandle>();
  /** Partition counts of the topics messages named a partition of (partitions are only added). */
  readonly #partitionCounts = new Map<string, number>();

  constructor(options: KafkaPublisherOptions) {
    this.#options = resolveKafkaPublisherOptions(options);
    const o = this.#options;
    this.#kafka = new Kafka({
      brokers: o.brokers,
      clientId: o.clientId,
      ssl: o.ssl,
      sasl: o.sasl,
      connectionTimeout: o.connectionTimeout,
      requestTimeout: o.requestTimeout,
      retry: o.retry,
      logLevel: o.logLevel,
      logCreator: () => (entry) => this.log(entry),
    });
  }

  publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    return publishRound(records, signal, {
      item: (record, index) => this.outgoing(record, index),
      prepare: (outgoing, outcomes) => this.refuseMissingPartitions(outgoing, outcomes, signal),
      send: (outgoing, outcomes) => this.sendInTurn(outgoing, outcomes, signal),
      aborted: ABORTED,
      unanswered: () =>
        new PublisherUnavailableError('The publish was abandoned before Kafka answered'),
    });
  }

  /** Disconnects every producer, including ones an abandoned send still uses; a later publish connects again. */
  /**
   * For health checks: asks the cluster for its brokers over a short-lived admin connection
   * (the producer stays "connected" while brokers are down, so it cannot tell); rejects with
   * `PublisherUnavailableError` when Kafka does not answer.
   */
  async ping(signal: AbortSignal): Promise<void> {
    const admin = this.#kafka.admin({ retry: { retries: 0 } });
    const check = (async () => {
      try {
        await admin.connect();
        await admin.describeCluster();
      } catch (error) {
        throw new PublisherUnavailableError(`Kafka is unreachable: ${describeError(error)}`, {
          cause: error,
        });
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
    })();
    await raceAbort(check, signal);
  }

  async close(): Promise<void> {
    await this.#connecting?.catch(() => undefined);
    this.#current = undefined;
    await Promise.all([...this.#handles].map((handle) => this.disconnect(handle)));
  }

  /** The message as it goes out, or why it cannot (its topic is not a Kafka topic name). */
  private outgoing(record: OutboxRecord, index: number): Outgoing | PublishOutcome {
    const topic = this.#options.topic(record);
    if (typeof topic !== 'string' || !TOPIC_NAME.test(topic) || topic === '.' || topic === '..') {
      const error = new PermanentPublishError(
        `"${String(topic)}" is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)`,
      );
      return { ok: false, error };
    }
    const cloudEvents = this.#options.cloudEvents;
    if (cloudEvents === undefined) return { index, topic, message: this.toMessage(record) };
    try {
      const event = cloudEvents.encode(record);
      const message = event === undefined ? this.toMessage(record) : kafkaCloudEvent(record, event);
      return { index, topic, message };
    } catch (error) {
      return { ok: false, error: toPermanent(error, 'The message is no valid CloudEvent') };
    }
  }

  /** Sends the batch on the current producer when its turn comes, waiting until `signal` aborts. */
  private async sendInTurn(
    outgoing: readonly Outgoing[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    const handle = await untilAborted(this.connect(), signal);
    if (handle === undefined) return;
    handle.sends++;
    const sending = this.inTurn(handle, () =>
      // Retired while this batch waited its turn: a send before it failed the producer,
      // whose sequence numbers kafkajs rolled back past what the broker may have appended,
      // so a send on it could be answered as the duplicate of messages it never wrote.
      handle.retired
        ? Promise.resolve(failUnanswered(outgoing, outcomes, retiredBeforeTurn(), false))
        : this.send(handle, outgoing, outcomes, signal),
    ).finally(() => this.sendSettled(handle));
    // On abort, stop waiting (after a grace for its answer when the hold was lost or the app
    // stops): the request is left to finish (or fail) on its own. Tearing the producer down
    // instead would fail every other batch in flight on it.
    await untilAborted(sending, signal);
    if (signal.aborted) await answerWithinGrace(sending, signal);
  }

  /**
   * kafkajs drops a message whose explicit partition the topic does not have, and still answers
   * the send as a success: such a message is failed here (permanently) instead of being marked
   * delivered. The counts are read once per topic, and again when a message names a partition
   * beyond them (partitions may have been added since).
   */
  private async refuseMissingPartitions(
    outgoing: Outgoing[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<Outgoing[]> {
    const pinned = outgoing.filter((o) => o.message.partition !== undefined);
    if (pinned.length === 0 || signal.aborted) return outgoing;
    const stale = [
      ...new Set(
        pinned
          .filter((o) => (o.message.partition ?? 0) >= (this.#partitionCounts.get(o.topic) ?? 0))
          .map((o) => o.topic),
      ),
    ];
    if (stale.length > 0) {
      const admin = this.#kafka.admin({ retry: { retries: 0 } });
      try {
        await raceAbort(admin.connect(), signal);
        const { topics } = await raceAbort(admin.fetchTopicMetadata({ topics: stale }), signal);
        for (const t of topics) this.#partitionCounts.set(t.name, t.partitions.length);
      } catch (error) {
        // Unknown: leave those messages to the send, which fails or succeeds on its own terms,
        // except that an unknown count cannot vouch for a pinned partition.
        for (const o of pinned.filter((p) => stale.includes(p.topic))) {
          outcomes[o.index] = {
            ok: false,
            error: new PublisherUnavailableError(
              `Could not read the partitions of Kafka topic "${o.topic}": ${describeError(error)}`,
              { cause: error },
            ),
          };
        }
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
    }
    for (let i = outgoing.length - 1; i >= 0; i--) {
      const o = outgoing[i] as Outgoing;
      if (o.message.partition === undefined) continue;
      const count = this.#partitionCounts.get(o.topic);
      if (outcomes[o.index] !== undefined) outgoing.splice(i, 1);
      else if (count !== undefined && o.message.partition >= count) {
        outcomes[o.index] = {
          ok: false,
          error: new PermanentPublishError(
            `Kafka topic "${o.topic}" has no partition ${o.message.partition} (it has ${count}): the message's kafka.partition attribute names a partition that does not exist`,
          ),
        };
        outgoing.splice(i, 1);
      }
    }
    return outgoing;
  }

  private toMessage(record: OutboxRecord): OutgoingMessage {
    const message: OutgoingMessage = {
      key: record.key,
      value: record.payload,
      headers: this.outboxHeaders(record),
    };
    const partition = record.attributes?.kafka?.partition;
    if (partition !== undefined) message.partition = partition;
    return message;
  }

  private outboxHeaders(record: OutboxRecord): IHeaders {
    // Built property by property, not as spreads followed by more properties: Node runs that
    // shape many times slower, and this runs once per message (see toClaimedRecord). A header
    // named "__proto__" (refused at enqueue since, but possible in older rows) needs the spread:
    // Object.assign would set the copy's prototype with it instead of copying it.
    const headers: IHeaders = Object.hasOwn(record.headers, '__proto__')
      ? { ...record.headers }
      : Object.assign({}, record.headers);
    headers[OUTBOX_HEADER_MESSAGE_ID] = record.messageId;
    headers[OUTBOX_HEADER_TYPE] = record.type;
    // A binary payload is the value as it is; its content type travels as a header.
    if (record.encoding === 'binary') headers[OUTBOX_HEADER_CONTENT_TYPE] = record.contentType;
    return headers;
  }

  /**
   * Sends `batch` in one request; on failure, decides per kind of failure whether the messages
   * fail, are handed back (outage), or are narrowed down to find the one the broker refused.
   */
  private async send(
    handle: ProducerHandle,
    batch: readonly Outgoing[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
    depth = 0,
  ): Promise<void> {
    if (pastPublishDeadline(signal)) {
      // Not sent by this publish (a narrowed-down part was, in the request that failed).
      if (depth === 0) failUnanswered(batch, outcomes, abortReason(signal), false);
      return; // otherwise left undefined: reported with the abort reason
    }
    try {
      await handle.producer.sendBatch({
        topicMessages: groupByTopic(batch),
        acks: -1,
        timeout: this.#options.requestTimeout,
        compression: this.#options.compression,
      });
      for (const { index } of batch) outcomes[index] = { ok: true };
      return;
    } catch (error) {
      if (handle.disconnected) {
        // close() disconnected the producer under this send: nothing is wrong with the messages.
        failUnanswered(
          batch,
          outcomes,
          new PublisherUnavailableError('The Kafka producer was closed before Kafka answered', {
            cause: error,
          }),
        );
        return;
      }
      const kind = classifyKafkaError(error);
      if (kind === 'outage' || kind === 'producer') {
        // A fresh producer for the next batches: new connections, metadata and producer id (the
        // old one's sequence numbers may no longer match what the broker holds). Even for an
        // abandoned send: the failure says the producer itself is broken.
        this.retire(handle);
      }
      if (signal.aborted) return;
      const topics = distinct(batch, (m) => m.topic);
      switch (kind) {
        case 'outage':
        case 'producer': {
          const reason =
            kind === 'outage' ? 'Kafka is unreachable' : 'the Kafka producer had to be reset';
          failUnanswered(
            batch,
            outcomes,
            new PublisherUnavailableError(`${reason}: ${describeError(error)}`, { cause: error }),
          );
          return;
        }
        case 'unavailable':
          if (topics.size > 1) return this.split(handle, topics, outcomes, signal, depth, false);
          failUnanswered(
            batch,
            outcomes,
            new PublisherUnavailableError(
              `Kafka partitions are not available: ${describeError(error)}`,
              { cause: error },
            ),
          );
          return;
        case 'topic':
        case 'other':
          if (topics.size > 1) return this.split(handle, topics, outcomes, signal, depth, false);
          failUnanswered(batch, outcomes, this.failure(error, batch));
          return;
        case 'message': {
          if (batch.length === 1)
            return failUnanswered(batch, outcomes, this.failure(error, batch));
          if (depth === 0) {
            this.logger.warn(
              `Kafka refused a request of ${batch.length} messages for its content (${describeError(error)}); sending it in parts to find the message(s) at fault`,
            );
          }
          if (topics.size > 1) return this.split(handle, topics, outcomes, signal, depth, false);
          const partitions = distinct(batch, (m) => String(m.message[ASSIGNED_PARTITION] ?? -1));
          if (partitions.size > 1)
            return this.split(handle, partitions, outcomes, signal, depth, false);
          const half = Math.ceil(batch.length / 2);
          const halves = new Map([
            ['left', batch.slice(0, half)],
            ['right', batch.slice(half)],
          ]);
          return this.split(handle, halves, outcomes, signal, depth, true);
        }
      }
    }
  }

  /**
   * Sends each group on its own. Topic and partition groups go out together: each holds the same
   * messages per partition as the refused request, so partitions the broker had already appended
   * are recognised as duplicates by the idempotent producer and not written twice. Halves of one
   * partition go in order.
   */
  private async split(
    handle: ProducerHandle,
    groups: Map<string, Outgoing[]>,
    outcomes: PublishOutcomes,
    signal: AbortSignal,
    depth: number,
    sequential: boolean,
  ): Promise<void> {
    if (sequential) {
      for (const group of groups.values()) {
        await this.send(handle, group, outcomes, signal, depth + 1);
      }
    } else {
      await Promise.all(
        [...groups.values()].map((group) => this.send(handle, group, outcomes, signal, depth + 1)),
      );
    }
  }

  private failure(error: unknown, batch: readonly Outgoing[]): unknown {
    if (batch.length === 1 && isPermanentKafkaError(error)) {
      const [only] = batch;
      const partition = only?.message[ASSIGNED_PARTITION];
      const where = `${only?.topic ?? '?'}${partition === undefined ? '' : `[${partition}]`}`;
      return toPermanent(error, `Kafka refused the message for ${where}`);
    }
    return error;
  }

  private connect(): Promise<ProducerHandle> {
    if (this.#current !== undefined) return Promise.resolve(this.#current);
    this.#connecting ??= (async () => {
      const p = this.#options.producer;
      const producer = this.#kafka.producer({
        createPartitioner: this.recordingPartitioner(),
        idempotent: p.idempotent,
        maxInFlightRequests: p.maxInFlightRequests,
        allowAutoTopicCreation: p.allowAutoTopicCreation,
        metadataMaxAge: p.metadataMaxAge,
        retry: this.#options.retry,
      });
      try {
        await producer.connect();
      } catch (error) {
        await producer.disconnect().catch(() => undefined);
        throw new PublisherUnavailableError(`Could not connect to Kafka: ${describeError(error)}`, {
          cause: error,
        });
      }
      const handle: ProducerHandle = {
        producer,
        tail: Promise.resolve(),
        sends: 0,
        retired: false,
        disconnected: false,
      };
      this.#handles.add(handle);
      this.#current = handle;
      return handle;
    })().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /**
   * Runs one batch's sends (narrowing included) while no other batch sends on the producer.
   * kafkajs rolls back the idempotence sequence numbers of every partition of a refused request,
   * also of partitions the broker did append; resending those same messages next is recognised
   * as a duplicate, but a request of another batch to such a partition in between is rejected as
   * OUT_OF_ORDER_SEQUENCE_NUMBER. With one request in flight per broker (the default) kafkajs
   * queues requests anyway, so this costs next to nothing.
   */
  private async inTurn(handle: ProducerHandle, work: () => Promise<void>): Promise<void> {
    const previous = handle.tail;
    let done: () => void = () => undefined;
    handle.tail = new Promise<void>((resolve) => {
      done = resolve;
    });
    try {
      await previous;
      await work();
    } finally {
      done();
    }
  }

  /** No new batch uses `handle`; it is disconnected once its last send settles. */
  private retire(handle: ProducerHandle): void {
    if (this.#current === handle) this.#current = undefined;
    handle.retired = true;
    if (handle.sends === 0) void this.disconnect(handle);
  }

  private sendSettled(handle: ProducerHandle): void {
    handle.sends--;
    if (handle.retired && handle.sends === 0) void this.disconnect(handle);
  }

  /** Never rejects (failures are logged), so callers may leave it unawaited. */
  private async disconnect(handle: ProducerHandle): Promise<void> {
    if (handle.disconnected) return;
    handle.disconnected = true;
    handle.retired = true;
    this.#handles.delete(handle);
    await handle.producer
      .disconnect()
      .catch((error: unknown) =>
        this.logger.warn(`Disconnecting the Kafka producer failed: ${describeError(error)}`),
      );
  }

  /**
   * The configured partitioner, made sticky per message. A refused request rolls back the
   * idempotent producer's sequence numbers of every partition in it, appended or not; a message
   * sent again to another partition (a keyless one, spread round-robin, or any under a partitioner
   * that is not a function of the message) can then take the sequence numbers of messages the
   * broker already appended there, be answered as their duplicate and reported published without
   * ever being written. Sent again to the same partitions, the same messages are those duplicates.
   */
  private recordingPartitioner(): ICustomPartitioner {
    const create = this.#options.producer.createPartitioner;
    return () => {
      const partitioner = create();
      return (args) => {
        const message = args.message as OutgoingMessage;
        const assigned = message[ASSIGNED_PARTITION];
        if (assigned !== undefined) return assigned;
        const partition = partitioner(args);
        message[ASSIGNED_PARTITION] = partition;
        return partition;
      };
    };
  }

  private log({ namespace, level, log }: LogEntry): void {
    const extra = LOG_FIELDS.filter((f) => log[f] !== undefined && log[f] !== null)
      .map((f) => `${f}=${String(log[f])}`)
      .join(' ');
    const text = redactSecrets(
      `kafkajs ${namespace}: ${log.message}${extra === '' ? '' : ` (${extra})`}`,
    );
    if (level === KafkaLogLevel.ERROR) this.logger.error(text);
    else if (level === KafkaLogLevel.WARN) this.logger.warn(text);
    else if (level === KafkaLogLevel.INFO) this.logger.log(text);
    else this.logger.debug(text);
  }
}

/** How an aborted publish's unanswered messages say what was cut short. */
const ABORTED = 'before Kafka answered';

function abortReason(signal: AbortSignal): Error {
  return abortedBy(signal, ABORTED);
}

function groupByTopic(batch: readonly Outgoing[]): TopicMessages[] {
  return [...distinct(batch, (m) => m.topic)].map(([topic, messages]) => ({
    topic,
    messages: messages.map((m) => m.message),
  }));
}

function distinct(
  batch: readonly Outgoing[],
  keyOf: (m: Outgoing) => string,
): Map<string, Outgoing[]> {
  const groups = new Map<string, Outgoing[]>();
  for (const m of batch) {
    const key = keyOf(m);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [m]);
    else group.push(m);
  }
  return groups;
}
