import { Logger } from '@nestjs/common';
import {
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ListQueuesCommand,
  SendMessageBatchCommand,
  SQSClient,
  type SendMessageBatchRequestEntry,
  type SQSClientConfig,
} from '@aws-sdk/client-sqs';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import type { OutboxSqsAttributes } from '../../message/outbox-message.interface';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import { toPermanent } from '../kit/publish-abort';
import type { PublishOutcomes } from '../kit/publish-round';
import { AwsBatchPublisher } from '../aws/aws-batch-publisher';
import { abortReason, awsCredentialsRefused, type AwsBatchItem } from '../aws/aws-batch-sender';
import { classifyAwsError } from '../aws/aws-error.classifier';
import { isFifoDestination } from '../aws/aws-fifo';
import { isAwsText } from '../aws/aws-message-attributes';
import {
  isSqsQueue,
  resolveSqsPublisherOptions,
  type SqsPublisherOptions,
} from './sqs-publisher.options';

type Entry = Omit<SendMessageBatchRequestEntry, 'Id'>;

/** A message whose queue is named, before its URL is known. */
interface Named {
  readonly index: number;
  readonly queue: string;
  readonly record: OutboxRecord;
}

const isUrl = (queue: string): boolean => /^https?:\/\//.test(queue);

/**
 * Publishes outbox messages to Amazon SQS with `SendMessageBatch` (AWS SDK v3, an optional peer):
 * up to ten messages a call, calls in parallel, one outcome per message from the call's
 * `Successful` and `Failed` lists. The body is the JSON payload as it is (a binary payload in
 * base64, with `x-outbox-content-type`); the message id, type and key travel as the message
 * attributes `x-outbox-message-id`, `x-outbox-type` and `x-outbox-key`, the headers as
 * attributes of their own while they fit SQS's ten (else as one JSON attribute,
 * `x-outbox-headers`). With `cloudEvents`, each message is a CloudEvent instead (`ce-*`
 * attributes, or the event as the body; see {@link SqsPublisherOptions.cloudEvents}).
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
  // A private field, so that the client's credentials never show up in util.inspect or JSON.
  readonly #aws: AwsBatchPublisher<SQSClient, SQSClientConfig, OutboxSqsAttributes, Entry>;
  /** Queue URLs by name, as GetQueueUrl answered (a missing queue is asked again). */
  readonly #urls = new Map<string, Promise<string>>();

  constructor(options: SqsPublisherOptions = {}) {
    const o = resolveSqsPublisherOptions(options);
    this.#aws = new AwsBatchPublisher<SQSClient, SQSClientConfig, OutboxSqsAttributes, Entry>(
      {
        service: 'SQS',
        destinationNoun: 'queue',
        build: (config) => new SQSClient(config),
        notADestination: (queue) =>
          isSqsQueue(queue)
            ? undefined
            : `${JSON.stringify(queue)} is neither an SQS queue name nor a queue URL`,
        own: (record) => record.attributes?.sqs,
        entry: ({ body, ...common }, own) => {
          const entry: Entry = { MessageBody: body, ...common };
          if (own?.delaySeconds !== undefined) entry.DelaySeconds = own.delaySeconds;
          return entry;
        },
        sendBatch: (client, url, entries, signal) =>
          client.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: entries }), {
            abortSignal: signal,
          }),
        ping: async (client, queue, signal) => {
          if (queue === undefined) {
            return client.send(new ListQueuesCommand({ MaxResults: 1 }), { abortSignal: signal });
          }
          const url = isUrl(queue) ? queue : await this.lookUp(queue, signal);
          return client.send(
            new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }),
            { abortSignal: signal },
          );
        },
      },
      { ...o, route: o.queue, fixed: o.fixedQueue, ping: o.pingQueue },
      this.logger,
    );
  }

  publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    return this.#aws.publish(
      records,
      signal,
      (record, index) => {
        const queue = this.#aws.destination(record);
        return typeof queue === 'string' ? { index, queue, record } : queue;
      },
      (named, outcomes) => this.send(named, outcomes, signal),
    );
  }

  /**
   * Refuses at enqueue what SQS would never take: a message over `maxMessageBytes` (body and
   * attributes), text SQS does not allow in a body, and a per-message delay for a FIFO queue.
   */
  checkEnqueue(message: OutboxMessageDraft): PublisherRefusal | undefined {
    const queue = this.#aws.routeAtEnqueue(message);
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
    return this.#aws.sizeRefusal(message);
  }

  /**
   * For health checks: asks SQS for one attribute of a queue (`pingQueue`, the fixed `queue`, or
   * the last one published to; before any, lists one queue). Rejects with
   * `PublisherUnavailableError` when SQS does not answer or refuses.
   */
  ping(signal: AbortSignal): Promise<void> {
    return this.#aws.ping(signal);
  }

  /** Destroys the client the publisher built (one you passed in is left to you). */
  close(): Promise<void> {
    return this.#aws.close();
  }

  /** Sends messages to the URLs of their queues, once looked up. */
  private async send(
    named: readonly Named[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    const urls = await this.queueUrls([...new Set(named.map((n) => n.queue))], signal);
    const items: AwsBatchItem<Entry>[] = [];
    for (const { index, queue, record } of named) {
      const url = urls.get(queue);
      if (url === undefined || typeof url !== 'string') {
        outcomes[index] = url?.outcome ?? { ok: false, error: abortReason(signal), sent: false };
        continue;
      }
      const item = this.#aws.item(index, url, record);
      if ('ok' in item) outcomes[index] = item;
      else items.push(item);
    }
    await this.#aws.send(items, outcomes, signal);
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
        const answer = await this.#aws.client.send(new GetQueueUrlCommand({ QueueName: queue }), {
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
        error: toPermanent(error, `SQS queue ${queue} does not exist`),
      };
    }
    if (kind === 'credentials') this.logger.error(awsCredentialsRefused('SQS', error));
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
