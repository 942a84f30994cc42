import { Logger } from '@nestjs/common';
import {
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ListQueuesCommand,
  SendMessageBatchCommand,
  SQSClient,
  type SendMessageBatchRequestEntry,
} from '@aws-sdk/client-sqs';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import { unsent } from '../kit/publish-abort';
import {
  awsBatchAnswer,
  awsClient,
  awsPing,
  awsSizeRefusal,
  awsTooLarge,
} from '../aws/aws-publisher-parts';
import {
  abortReason,
  AwsBatchSender,
  type AwsBatchAnswer,
  type AwsBatchItem,
} from '../aws/aws-batch-sender';
import { classifyAwsError } from '../aws/aws-error.classifier';
import { awsOrdering, isFifoDestination } from '../aws/aws-fifo';
import { awsMessageParts, isAwsText } from '../aws/aws-message-attributes';
import {
  isSqsQueue,
  resolveSqsPublisherOptions,
  type ResolvedSqsPublisherOptions,
  type SqsPublisherOptions,
} from './sqs-publisher.options';

type Outcomes = (PublishOutcome | undefined)[];
type Entry = Omit<SendMessageBatchRequestEntry, 'Id'>;

const isUrl = (queue: string): boolean => /^https?:\/\//.test(queue);

/**
 * Publishes outbox messages to Amazon SQS with `SendMessageBatch` (AWS SDK v3, an optional peer):
 * up to ten messages a call, calls in parallel, one outcome per message from the call's
 * `Successful` and `Failed` lists. The body is the JSON payload as it is (a binary payload in
 * base64, with `x-outbox-content-type`); the message id, type and key travel as the message
 * attributes `x-outbox-message-id`, `x-outbox-type` and `x-outbox-key`, the headers as
 * attributes of their own while they fit SQS's ten (else as one JSON attribute,
 * `x-outbox-headers`).
 *
 * On a FIFO queue (`.fifo`), `MessageGroupId` is the message's key (SQS orders each group) and
 * `MessageDeduplicationId` its message id, so a message sent twice within SQS's five-minute
 * window (a retry after a timeout) is stored once. A standard queue neither orders nor
 * deduplicates: the outbox still sends a key's messages one after the other, but SQS may hand
 * them to consumers in another order, and more than once.
 *
 * Failures: an entry SQS refuses as the sender's fault (an invalid character, too large) fails
 * permanently and alone; its neighbours are published. A missing queue fails its messages
 * permanently. Refused connections, timeouts, throttling and server faults are an outage (no
 * attempt counted); refused credentials too, logged as an error on every publish. See
 * {@link AwsBatchSender}. Messages over `maxMessageBytes` are refused at enqueue
 * (`checkEnqueue`).
 *
 * Builds no connection until the first publish; `close()` destroys the client it built.
 */
export class SqsPublisher implements OutboxPublisher {
  private readonly logger = new Logger(SqsPublisher.name);
  // Private fields, so that the client's credentials never show up in util.inspect or JSON.
  readonly #options: ResolvedSqsPublisherOptions;
  readonly #client: SQSClient;
  readonly #ownsClient: boolean;
  readonly #sender: AwsBatchSender<Entry>;
  /** Queue URLs by name, as GetQueueUrl answered (a missing queue is asked again). */
  readonly #urls = new Map<string, Promise<string>>();
  #lastQueue: string | undefined;

  constructor(options: SqsPublisherOptions = {}) {
    this.#options = resolveSqsPublisherOptions(options);
    ({ client: this.#client, owned: this.#ownsClient } = awsClient(
      this.#options,
      (config) => new SQSClient(config),
    ));
    this.#sender = new AwsBatchSender<Entry>(
      (url, entries, signal) => this.send(url, entries, signal),
      {
        service: 'SQS',
        destinationNoun: 'queue',
        maxConcurrentRequests: this.#options.maxConcurrentRequests,
        maxBatchBytes: this.#options.maxMessageBytes,
        logger: this.logger,
      },
    );
  }

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes: Outcomes = new Array<PublishOutcome | undefined>(records.length).fill(
      undefined,
    );
    const queues = new Set<string>();
    const named: { index: number; queue: string; record: OutboxRecord }[] = [];
    records.forEach((record, index) => {
      let queue: string;
      try {
        queue = this.#options.queue(record);
      } catch (error) {
        outcomes[index] = { ok: false, error };
        return;
      }
      if (!isSqsQueue(queue)) {
        outcomes[index] = {
          ok: false,
          error: new PermanentPublishError(
            `${JSON.stringify(queue)} is neither an SQS queue name nor a queue URL`,
          ),
        };
        return;
      }
      named.push({ index, queue, record });
      queues.add(queue);
    });
    if (named.length > 0 && pastPublishDeadline(signal)) {
      for (const { index } of named) outcomes[index] = unsent(abortReason(signal));
      return outcomes as PublishOutcome[];
    }
    const urls = await this.queueUrls([...queues], signal);
    const items: AwsBatchItem<Entry>[] = [];
    for (const { index, queue, record } of named) {
      const url = urls.get(queue);
      if (url === undefined || typeof url !== 'string') {
        outcomes[index] = url?.outcome ?? { ok: false, error: abortReason(signal), sent: false };
        continue;
      }
      const item = this.item(index, url, record);
      if ('ok' in item) outcomes[index] = item;
      else items.push(item);
    }
    if (items.length > 0) {
      this.#lastQueue = (items[items.length - 1] as AwsBatchItem<Entry>).destination;
      await this.#sender.send(items, outcomes, signal);
    }
    return outcomes.map((o) => o ?? unsent(abortReason(signal)));
  }

  /**
   * Refuses at enqueue what SQS would never take: a message over `maxMessageBytes` (body and
   * attributes), text SQS does not allow in a body, and a per-message delay for a FIFO queue.
   */
  checkEnqueue(message: OutboxMessageDraft): PublisherRefusal | undefined {
    let queue: string | undefined;
    try {
      queue = this.#options.queue(message);
    } catch {
      queue = undefined; // the publish reports it, with the error the function throws
    }
    if (
      message.attributes?.sqs?.delaySeconds !== undefined &&
      queue !== undefined &&
      isFifoDestination(queue)
    ) {
      return {
        reason: 'invalid-attributes',
        problem: `attributes.sqs.delaySeconds is set, but the message goes to the FIFO queue ${queue}, which refuses a per-message delay. Set the queue's DelaySeconds, or delay the message in the outbox (availableAt, delayMs).`,
      };
    }
    // The JSON body is sent as it is: SQS refuses U+FFFE and U+FFFF, which JSON does not escape.
    if (typeof message.payload === 'string' && !isAwsText(message.payload)) {
      return {
        reason: 'not-serialisable',
        problem:
          'the payload contains a character SQS does not take in a message body (U+FFFE or U+FFFF). Remove it, or send the payload as bytes (contentType), which travel in base64.',
      };
    }
    return awsSizeRefusal('SQS', message, this.#options.maxMessageBytes);
  }

  /**
   * For health checks: asks SQS for one attribute of a queue (`pingQueue`, the fixed `queue`, or
   * the last one published to; before any, lists one queue). Rejects with
   * `PublisherUnavailableError` when SQS does not answer or refuses.
   */
  async ping(signal: AbortSignal): Promise<void> {
    const queue = this.#options.pingQueue ?? this.#options.fixedQueue ?? this.#lastQueue;
    await awsPing('SQS', signal, async () => {
      if (queue === undefined) {
        await this.#client.send(new ListQueuesCommand({ MaxResults: 1 }), {
          abortSignal: signal,
        });
        return;
      }
      const url = isUrl(queue) ? queue : await this.lookUp(queue, signal);
      await this.#client.send(
        new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }),
        { abortSignal: signal },
      );
    });
  }

  /** Destroys the client the publisher built (one you passed in is left to you). */
  close(): Promise<void> {
    if (this.#ownsClient) this.#client.destroy();
    return Promise.resolve();
  }

  private item(
    index: number,
    url: string,
    record: OutboxRecord,
  ): AwsBatchItem<Entry> | PublishOutcome {
    const parts = awsMessageParts(record);
    // Enqueued before the limit applied (another publisher, a smaller maxMessageBytes).
    const tooLarge = awsTooLarge('SQS', parts, this.#options.maxMessageBytes);
    if (tooLarge !== undefined) return tooLarge;
    const own = record.attributes?.sqs;
    const entry: Entry = {
      MessageBody: parts.body,
      MessageAttributes: parts.attributes,
      ...awsOrdering(url, record, own?.messageGroupId),
    };
    if (own?.delaySeconds !== undefined) entry.DelaySeconds = own.delaySeconds;
    return { index, destination: url, key: record.key, bytes: parts.bytes, entry };
  }

  private async send(
    url: string,
    entries: readonly SendMessageBatchRequestEntry[],
    signal: AbortSignal,
  ): Promise<AwsBatchAnswer> {
    const answer = await this.#client.send(
      new SendMessageBatchCommand({ QueueUrl: url, Entries: [...entries] }),
      { abortSignal: signal },
    );
    return awsBatchAnswer(answer);
  }

  /**
   * The URL of each queue named: a URL as it is, a name from GetQueueUrl (once; a failure is
   * asked again next time). A name that fails gives the outcome its messages get.
   */
  private async queueUrls(
    queues: readonly string[],
    signal: AbortSignal,
  ): Promise<Map<string, string | { outcome: PublishOutcome }>> {
    const out = new Map<string, string | { outcome: PublishOutcome }>();
    await Promise.all(
      queues.map(async (queue) => {
        if (isUrl(queue)) {
          out.set(queue, queue);
          return;
        }
        try {
          out.set(queue, await this.lookUp(queue, signal));
        } catch (error) {
          out.set(queue, { outcome: this.lookUpFailure(queue, error, signal) });
        }
      }),
    );
    return out;
  }

  private lookUp(queue: string, signal: AbortSignal): Promise<string> {
    let url = this.#urls.get(queue);
    if (url === undefined) {
      url = (async () => {
        const answer = await this.#client.send(new GetQueueUrlCommand({ QueueName: queue }), {
          abortSignal: signal,
        });
        if (answer.QueueUrl === undefined) throw new Error('GetQueueUrl answered no QueueUrl');
        return answer.QueueUrl;
      })();
      this.#urls.set(queue, url);
      url.catch(() => this.#urls.delete(queue));
    }
    return raceAbort(url, signal);
  }

  private lookUpFailure(queue: string, error: unknown, signal: AbortSignal): PublishOutcome {
    if (signal.aborted) return { ok: false, error: abortReason(signal), sent: false };
    const kind = classifyAwsError(error);
    if (kind === 'destination') {
      return {
        ok: false,
        error: new PermanentPublishError(
          `SQS queue ${queue} does not exist: ${describeError(error)}`,
          {
            cause: error,
          },
        ),
      };
    }
    if (kind === 'credentials') {
      this.logger.error(
        `SQS refused the credentials or a permission (${describeError(error)}): nothing is published and no message counts an attempt until this is fixed`,
      );
    }
    // Nothing was sent yet: whatever kept the URL from us counts no attempt.
    return {
      ok: false,
      error: new PublisherUnavailableError(
        `Could not look up the URL of SQS queue ${queue}: ${describeError(error)}`,
        { cause: error },
      ),
      sent: false,
    };
  }
}
