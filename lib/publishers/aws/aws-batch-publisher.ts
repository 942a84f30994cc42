import type { Logger } from '@nestjs/common';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { raceAbort } from '../../internal/race-abort';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { publishRound, type PublishOutcomes, type RoundItem } from '../kit/publish-round';
import type {
  OutboxMessageDraft,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import {
  AWS_ABORTED,
  AwsBatchSender,
  awsUnreachable,
  type AwsBatchAnswer,
  type AwsBatchItem,
} from './aws-batch-sender';
import { toPermanent } from '../kit/publish-abort';
import { OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import { CLOUDEVENTS_SEQUENCE_DIGITS } from '../cloud-events/received-cloud-event';
import { awsCloudEventParts } from './aws-cloud-event';
import type { AwsBatchEntryFailure } from './aws-error.classifier';
import { awsOrdering, type AwsOrderingFields } from './aws-fifo';
import {
  awsMessageBytesBound,
  awsMessageParts,
  awsTooLargeProblem,
  type AwsMessageAttributes,
  type AwsMessageParts,
} from './aws-message-attributes';
import type { ResolvedAwsPublisherOptions } from './aws-publisher.options';

// Typed structurally, so that this folder loads no AWS package.

/** An AWS SDK v3 client as the publishers use it. */
export interface AwsClient {
  send(...args: never[]): Promise<unknown>;
  destroy(): void;
}

/** What a batch call (`SendMessageBatch`, `PublishBatch`) answers, as both SDKs type it. */
export interface AwsBatchResponse {
  readonly Successful?: readonly { readonly Id?: string }[];
  readonly Failed?: readonly AwsBatchEntryFailure[];
}

/** What every entry carries, whichever the service: its body, its attributes, its FIFO fields. */
export interface AwsCommonEntry extends AwsOrderingFields {
  readonly body: string;
  readonly MessageAttributes: AwsMessageAttributes;
}

/**
 * What SQS or SNS gives {@link AwsBatchPublisher}: its names, its client and its calls, nothing
 * else. `O` is the message's attributes for the service (`attributes.sqs`), `E` its entry.
 */
export interface AwsServiceCalls<C, Config, O extends { readonly messageGroupId?: string }, E> {
  /** `SQS` or `SNS`, for messages; `SQSClient` is the client's class. */
  readonly service: 'SQS' | 'SNS';
  /** What a destination is called in messages. */
  readonly destinationNoun: 'queue' | 'topic';
  /** Builds the client the publisher owns, from the configuration given. */
  build(config: Config & { requestHandler: object }): C;
  /** Why `destination` (what the route answered) is none of the service's, if it is not. */
  notADestination(destination: string): string | undefined;
  /** The message's attributes for the service. */
  own(record: OutboxRecord): O | undefined;
  /** The entry of a message, less its `Id`: the common fields under the SDK's names, and its own. */
  entry(common: AwsCommonEntry, own: O | undefined): E;
  /**
   * One batch call to `destination` (a queue URL, a topic ARN), cancelled by `signal`: the
   * sender's own for the call, not the publish's (see AwsBatchSender's abort grace).
   */
  sendBatch(
    client: C,
    destination: string,
    entries: (E & { Id: string })[],
    signal: AbortSignal,
  ): Promise<AwsBatchResponse>;
  /** A health check's call: about `destination` when one is known, else about the account. */
  ping(client: C, destination: string | undefined, signal: AbortSignal): Promise<unknown>;
}

/**
 * An SQS or SNS publisher less its service's calls: the client it builds (or is given), each
 * message's entry (body, attributes, FIFO fields; one over `maxMessageBytes` refused for good),
 * the publish round over {@link AwsBatchSender}, the size refusal at enqueue, the health check
 * and `close()`. The service gives its names, its entry and its calls ({@link AwsServiceCalls}).
 */
export class AwsBatchPublisher<
  C extends AwsClient,
  Config,
  O extends { readonly messageGroupId?: string },
  E,
> {
  readonly client: C;
  readonly #owned: boolean;
  readonly #sender: AwsBatchSender<E>;
  #lastDestination: string | undefined;

  constructor(
    private readonly calls: AwsServiceCalls<C, Config, O, E>,
    private readonly options: ResolvedAwsPublisherOptions<C, Config>,
    logger: Logger,
  ) {
    if (options.client !== undefined) {
      this.client = options.client;
      this.#owned = false;
    } else {
      // Timeouts that fail a dead endpoint well within a lease (the SDK's own default waits forever).
      this.client = calls.build({
        requestHandler: { connectionTimeout: 3_000, requestTimeout: 10_000 },
        ...options.clientConfig,
      });
      this.#owned = true;
    }
    this.#sender = new AwsBatchSender<E>(
      async (destination, entries, signal) =>
        batchAnswer(await calls.sendBatch(this.client, destination, [...entries], signal)),
      {
        service: calls.service,
        destinationNoun: calls.destinationNoun,
        maxConcurrentRequests: options.maxConcurrentRequests,
        maxBatchBytes: options.maxMessageBytes,
        logger,
      },
    );
  }

  /**
   * One publish: `item` makes a record into what `send` sends (both are the service's, over
   * {@link destination}, {@link item} and {@link send}), with the deadline read between them.
   */
  publish<I extends RoundItem>(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
    item: (record: OutboxRecord, index: number) => I | PublishOutcome,
    send: (items: readonly I[], outcomes: PublishOutcomes) => Promise<void>,
  ): Promise<PublishOutcome[]> {
    return publishRound(records, signal, {
      item,
      send,
      aborted: AWS_ABORTED,
      unanswered: () => new PublisherUnavailableError('The publish ended before AWS answered'),
    });
  }

  /** Where a message goes, or its outcome when that is none of the service's destinations. */
  destination(record: OutboxRecord): string | PublishOutcome {
    const destination = this.options.route(record);
    const problem = this.calls.notADestination(destination);
    return problem === undefined
      ? destination
      : { ok: false, error: new PermanentPublishError(problem) };
  }

  /** The item of one message to `destination` (its address), or why it can never be sent. */
  item(index: number, destination: string, record: OutboxRecord): AwsBatchItem<E> | PublishOutcome {
    let parts: AwsMessageParts;
    try {
      parts = this.partsOf(record);
    } catch (error) {
      return { ok: false, error: toPermanent(error, 'The message is no valid CloudEvent') };
    }
    // Enqueued before the limit applied (another publisher, a smaller maxMessageBytes).
    const problem = this.tooLarge(parts, this.options.maxMessageBytes);
    if (problem !== undefined) return { ok: false, error: new PermanentPublishError(problem) };
    const own = this.calls.own(record);
    const entry = this.calls.entry(
      {
        body: parts.body,
        MessageAttributes: parts.attributes,
        ...awsOrdering(destination, record, own?.messageGroupId),
      },
      own,
    );
    return { index, destination, key: record.key, bytes: parts.bytes, entry };
  }

  /** The body and attributes of a message: a CloudEvent's with `cloudEvents`, else the outbox's. */
  private partsOf(record: OutboxRecord): AwsMessageParts {
    const event = this.options.cloudEvents?.encode(record);
    return event === undefined ? awsMessageParts(record) : awsCloudEventParts(record, event);
  }

  /** Sends the items, filling in each one's outcome. */
  send(
    items: readonly AwsBatchItem<E>[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    const last = items[items.length - 1];
    if (last === undefined) return Promise.resolve();
    this.#lastDestination = last.destination;
    return this.#sender.send(items, outcomes, signal);
  }

  /**
   * The destination of a message at enqueue; undefined when the route throws (the publish
   * reports it, with the error the function throws).
   */
  routeAtEnqueue(message: OutboxMessageDraft): string | undefined {
    try {
      return this.options.route(message);
    } catch {
      return undefined;
    }
  }

  /**
   * The refusal at enqueue of a message over `maxMessageBytes` (body and attributes). A cheap
   * bound first: the exact size needs the attributes built, which most messages are far enough
   * below not to need.
   */
  sizeRefusal(message: OutboxMessageDraft): PublisherRefusal | undefined {
    const max = this.options.maxMessageBytes;
    if (this.options.cloudEvents !== undefined) return this.cloudEventSizeRefusal(message, max);
    const binary = typeof message.payload !== 'string';
    const payloadBytes =
      typeof message.payload === 'string' ? message.payload.length * 3 : message.payload.byteLength;
    if (awsMessageBytesBound(payloadBytes, binary, JSON.stringify(message.headers).length) <= max)
      return undefined;
    const problem = this.tooLarge(awsMessageParts(message), max);
    return problem === undefined ? undefined : { reason: 'payload-too-large', problem };
  }

  /**
   * The size refusal of a message sent as a CloudEvent: the event made now, as the publish will
   * make it (its attributes come from options the publisher cannot bound, `source` and
   * `subject`), from the message as it will be claimed: enqueued now, and numbered when it has a
   * key (a number of the most digits, which `ordering.sequence` may add after this check). A
   * message the encoder refuses is left to the publish, which fails it for good.
   */
  private cloudEventSizeRefusal(
    message: OutboxMessageDraft,
    max: number,
  ): PublisherRefusal | undefined {
    const headers =
      message.key === null || message.headers[OUTBOX_HEADER_SEQUENCE] !== undefined
        ? message.headers
        : {
            ...message.headers,
            [OUTBOX_HEADER_SEQUENCE]: '9'.repeat(CLOUDEVENTS_SEQUENCE_DIGITS),
          };
    const common = { ...message, id: '0', headers, attempts: 1, createdAt: new Date() };
    const record: OutboxRecord =
      typeof message.payload === 'string'
        ? { ...common, payload: message.payload, encoding: 'json', contentType: undefined }
        : {
            ...common,
            payload: message.payload,
            encoding: 'binary',
            contentType: message.contentType ?? 'application/octet-stream',
          };
    let parts: AwsMessageParts;
    try {
      parts = this.partsOf(record);
    } catch {
      return undefined;
    }
    const problem = this.tooLarge(parts, max);
    return problem === undefined ? undefined : { reason: 'payload-too-large', problem };
  }

  /**
   * For health checks: the service's call about the ping destination, the fixed one, or the last
   * one published to; an outage when the service does not answer or refuses.
   */
  async ping(signal: AbortSignal): Promise<void> {
    const destination = this.options.ping ?? this.options.fixed ?? this.#lastDestination;
    const check = (async () => {
      try {
        await this.calls.ping(this.client, destination, signal);
      } catch (error) {
        throw awsUnreachable(this.calls.service, error);
      }
    })();
    await raceAbort(check, signal);
  }

  /** Destroys the client the publisher built (one passed in is left to its owner). */
  close(): Promise<void> {
    if (this.#owned) this.client.destroy();
    return Promise.resolve();
  }

  private tooLarge(parts: AwsMessageParts, max: number): string | undefined {
    return parts.bytes <= max ? undefined : awsTooLargeProblem(this.calls.service, parts, max);
  }
}

function batchAnswer(answer: AwsBatchResponse): AwsBatchAnswer {
  return {
    successful: (answer.Successful ?? []).map((s) => s.Id ?? ''),
    failed: answer.Failed ?? [],
  };
}
