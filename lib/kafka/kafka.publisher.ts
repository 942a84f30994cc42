import { Logger } from '@nestjs/common';
import {
  Kafka,
  logLevel as KafkaLogLevel,
  type ICustomPartitioner,
  type LogEntry,
  type Message,
  type Producer,
  type TopicMessages,
} from 'kafkajs';
import { PermanentPublishError } from '../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../interfaces/outbox-publisher.interface';
import type { OutboxRecord } from '../interfaces/outbox-record.interface';
import { describeError, redactSecrets } from '../internal/describe-error';
import { OUTBOX_HEADER_MESSAGE_ID, OUTBOX_HEADER_TYPE } from '../outbox.constants';
import { classifyKafkaError, isPermanentKafkaError } from './kafka-error.classifier';
import {
  resolveKafkaPublisherOptions,
  type KafkaPublisherOptions,
  type ResolvedKafkaPublisherOptions,
} from './kafka-publisher.options';

/** One message of a batch on its way out, with its position in the batch. */
interface Outgoing {
  readonly index: number;
  readonly topic: string;
  readonly message: Message;
}

type Outcomes = (PublishOutcome | undefined)[];

// Kafka's own rule for topic names (clients/src/main/java/.../internals/Topic.java).
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;
const LOG_FIELDS = ['broker', 'topic', 'partition', 'retryCount', 'retryTime', 'error', 'groupId'];

/**
 * Publishes outbox messages to Kafka with kafkajs: one `sendBatch` per dispatch batch (grouped by
 * topic), an idempotent producer with `acks: -1`, the message key as the Kafka key, the JSON
 * payload as the value and `x-outbox-message-id` / `x-outbox-type` next to the user's headers.
 *
 * kafkajs answers a batch as a whole. When it is refused because of one message (too large, an
 * invalid record), the publisher narrows the failure down (by topic, then by partition, then by
 * halves) so that only the culprit fails and everything else is published; the producer's
 * idempotence makes the broker drop the copies of partitions it had already appended. Connection
 * failures report an outage, so the dispatcher releases the batch without counting attempts.
 *
 * Connects on the first publish; `close()` disconnects.
 */
export class KafkaPublisher implements OutboxPublisher {
  private readonly logger = new Logger(KafkaPublisher.name);
  // Private fields, so that the SASL password never shows up in util.inspect or JSON.stringify.
  readonly #options: ResolvedKafkaPublisherOptions;
  readonly #kafka: Kafka;
  /** The partition each message was assigned on its last send, to narrow failures down. */
  readonly #partitions = new WeakMap<Message, number>();
  #producer: Producer | undefined;
  #connecting: Promise<Producer> | undefined;

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

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes: Outcomes = new Array<PublishOutcome | undefined>(records.length).fill(
      undefined,
    );
    const outgoing: Outgoing[] = [];
    records.forEach((record, index) => {
      let topic: string;
      try {
        topic = this.#options.topic(record);
      } catch (error) {
        outcomes[index] = { ok: false, error };
        return;
      }
      if (typeof topic !== 'string' || !TOPIC_NAME.test(topic) || topic === '.' || topic === '..') {
        const error = new PermanentPublishError(
          `"${String(topic)}" is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)`,
        );
        outcomes[index] = { ok: false, error };
        return;
      }
      outgoing.push({ index, topic, message: this.toMessage(record) });
    });

    if (outgoing.length > 0) {
      const producer = await this.connect();
      const onAbort = (): void => void this.discardProducer(producer);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        await this.send(producer, outgoing, outcomes, signal);
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
    }
    return outcomes.map(
      (o) =>
        o ?? {
          ok: false,
          error: new PublisherUnavailableError('The publish was abandoned before Kafka answered'),
        },
    );
  }

  /** Disconnects the producer; a later publish connects again. */
  async close(): Promise<void> {
    await this.#connecting?.catch(() => undefined);
    await this.discardProducer(this.#producer);
  }

  private toMessage(record: OutboxRecord): Message {
    return {
      key: record.key,
      value: record.payload,
      headers: {
        ...record.headers,
        [OUTBOX_HEADER_MESSAGE_ID]: record.messageId,
        [OUTBOX_HEADER_TYPE]: record.type,
      },
    };
  }

  /**
   * Sends `batch` in one request; on failure, decides per kind of failure whether the messages
   * fail, are handed back (outage), or are narrowed down to find the one the broker refused.
   */
  private async send(
    producer: Producer,
    batch: readonly Outgoing[],
    outcomes: Outcomes,
    signal: AbortSignal,
    depth = 0,
  ): Promise<void> {
    if (signal.aborted) return; // left undefined: reported as unavailable
    try {
      await producer.sendBatch({
        topicMessages: groupByTopic(batch),
        acks: -1,
        timeout: this.#options.requestTimeout,
        compression: this.#options.compression,
      });
      for (const { index } of batch) outcomes[index] = { ok: true };
      return;
    } catch (error) {
      if (signal.aborted) return;
      const kind = classifyKafkaError(error);
      const topics = distinct(batch, (m) => m.topic);
      switch (kind) {
        case 'outage':
        case 'producer': {
          // A fresh producer next time: new connections, metadata and producer id (the old
          // one's sequence numbers may no longer match what the broker holds).
          await this.discardProducer(producer);
          const reason =
            kind === 'outage' ? 'Kafka is unreachable' : 'the Kafka producer had to be reset';
          this.fail(
            batch,
            outcomes,
            new PublisherUnavailableError(`${reason}: ${describeError(error)}`, { cause: error }),
          );
          return;
        }
        case 'unavailable':
          if (topics.size > 1) return this.split(producer, topics, outcomes, signal, depth, false);
          this.fail(
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
          if (topics.size > 1) return this.split(producer, topics, outcomes, signal, depth, false);
          this.fail(batch, outcomes, this.failure(error, batch));
          return;
        case 'message': {
          if (batch.length === 1) return this.fail(batch, outcomes, this.failure(error, batch));
          if (depth === 0) {
            this.logger.warn(
              `Kafka refused a request of ${batch.length} messages for its content (${describeError(error)}); sending it in parts to find the message(s) at fault`,
            );
          }
          if (topics.size > 1) return this.split(producer, topics, outcomes, signal, depth, false);
          const partitions = distinct(batch, (m) => String(this.#partitions.get(m.message) ?? -1));
          if (partitions.size > 1)
            return this.split(producer, partitions, outcomes, signal, depth, false);
          const half = Math.ceil(batch.length / 2);
          const halves = new Map([
            ['left', batch.slice(0, half)],
            ['right', batch.slice(half)],
          ]);
          return this.split(producer, halves, outcomes, signal, depth, true);
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
    producer: Producer,
    groups: Map<string, Outgoing[]>,
    outcomes: Outcomes,
    signal: AbortSignal,
    depth: number,
    sequential: boolean,
  ): Promise<void> {
    if (sequential) {
      for (const group of groups.values()) {
        await this.send(producer, group, outcomes, signal, depth + 1);
      }
    } else {
      await Promise.all(
        [...groups.values()].map((group) =>
          this.send(producer, group, outcomes, signal, depth + 1),
        ),
      );
    }
  }

  private failure(error: unknown, batch: readonly Outgoing[]): unknown {
    if (batch.length === 1 && isPermanentKafkaError(error)) {
      const [only] = batch;
      const partition = only === undefined ? undefined : this.#partitions.get(only.message);
      const where = `${only?.topic ?? '?'}${partition === undefined ? '' : `[${partition}]`}`;
      return new PermanentPublishError(
        `Kafka refused the message for ${where}: ${describeError(error)}`,
        { cause: error },
      );
    }
    return error;
  }

  private fail(batch: readonly Outgoing[], outcomes: Outcomes, error: unknown): void {
    for (const { index } of batch) outcomes[index] ??= { ok: false, error };
  }

  private connect(): Promise<Producer> {
    if (this.#producer !== undefined) return Promise.resolve(this.#producer);
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
      this.#producer = producer;
      return producer;
    })().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  private async discardProducer(producer: Producer | undefined): Promise<void> {
    if (producer === undefined) return;
    if (this.#producer === producer) this.#producer = undefined;
    await producer
      .disconnect()
      .catch((error: unknown) =>
        this.logger.warn(`Disconnecting the Kafka producer failed: ${describeError(error)}`),
      );
  }

  /** The configured partitioner, remembering each message's partition. */
  private recordingPartitioner(): ICustomPartitioner {
    const create = this.#options.producer.createPartitioner;
    const assigned = this.#partitions;
    return () => {
      const partitioner = create();
      return (args) => {
        const partition = partitioner(args);
        assigned.set(args.message, partition);
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
