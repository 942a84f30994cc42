import { Logger } from '@nestjs/common';
import {
  GetTopicAttributesCommand,
  ListTopicsCommand,
  PublishBatchCommand,
  SNSClient,
  type PublishBatchRequestEntry,
} from '@aws-sdk/client-sns';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
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
import { awsOrdering } from '../aws/aws-fifo';
import { awsMessageParts } from '../aws/aws-message-attributes';
import {
  isSnsTopicArn,
  resolveSnsPublisherOptions,
  type ResolvedSnsPublisherOptions,
  type SnsPublisherOptions,
} from './sns-publisher.options';

type Outcomes = (PublishOutcome | undefined)[];
type Entry = Omit<PublishBatchRequestEntry, 'Id'>;

/**
 * Publishes outbox messages to Amazon SNS topics with `PublishBatch` (AWS SDK v3, an optional
 * peer): up to ten messages a call, calls in parallel, one outcome per message from the call's
 * `Successful` and `Failed` lists. The message is the JSON payload as it is (a binary payload in
 * base64, with `x-outbox-content-type`); the message id, type, key and headers travel as message
 * attributes exactly as with `SqsPublisher` (at most ten, the headers folded into one JSON
 * attribute, `x-outbox-headers`, when they do not fit), so an SQS queue subscribed with raw
 * message delivery receives the same message `SqsPublisher` would send.
 *
 * On a FIFO topic (`.fifo`), `MessageGroupId` is the message's key and `MessageDeduplicationId`
 * its message id: SNS orders each group and drops a copy sent again within five minutes, and
 * passes both on to FIFO queues subscribed. A standard topic neither orders nor deduplicates.
 *
 * Failures are told apart as for SQS ({@link AwsBatchSender}): an entry refused as the sender's
 * fault fails permanently and alone, a missing topic (`NotFound`) fails its messages
 * permanently, refused connections, timeouts, throttling and server faults are an outage (no
 * attempt counted), and refused credentials too, logged as an error. Messages over
 * `maxMessageBytes` are refused at enqueue (`checkEnqueue`).
 *
 * Builds no connection until the first publish; `close()` destroys the client it built.
 */
export class SnsPublisher implements OutboxPublisher {
  private readonly logger = new Logger(SnsPublisher.name);
  // Private fields, so that the client's credentials never show up in util.inspect or JSON.
  readonly #options: ResolvedSnsPublisherOptions;
  readonly #client: SNSClient;
  readonly #ownsClient: boolean;
  readonly #sender: AwsBatchSender<Entry>;
  #lastTopicArn: string | undefined;

  constructor(options: SnsPublisherOptions = {}) {
    this.#options = resolveSnsPublisherOptions(options);
    ({ client: this.#client, owned: this.#ownsClient } = awsClient(
      this.#options,
      (config) => new SNSClient(config),
    ));
    this.#sender = new AwsBatchSender<Entry>(
      (arn, entries, signal) => this.send(arn, entries, signal),
      {
        service: 'SNS',
        destinationNoun: 'topic',
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
    const items: AwsBatchItem<Entry>[] = [];
    records.forEach((record, index) => {
      let arn: string;
      try {
        arn = this.#options.topicArn(record);
      } catch (error) {
        outcomes[index] = { ok: false, error };
        return;
      }
      const item = this.item(index, arn, record);
      if ('ok' in item) outcomes[index] = item;
      else items.push(item);
    });
    if (items.length > 0 && pastPublishDeadline(signal)) {
      for (const { index } of items) outcomes[index] = unsent(abortReason(signal));
    } else if (items.length > 0) {
      this.#lastTopicArn = (items[items.length - 1] as AwsBatchItem<Entry>).destination;
      await this.#sender.send(items, outcomes, signal);
    }
    return outcomes.map((o) => o ?? unsent(abortReason(signal)));
  }

  /**
   * Refuses at enqueue what SNS would never take: a message whose topic is not an SNS topic ARN,
   * or over `maxMessageBytes` (body and attributes).
   */
  checkEnqueue(message: OutboxMessageDraft): PublisherRefusal | undefined {
    let arn: string | undefined;
    try {
      arn = this.#options.topicArn(message);
    } catch {
      arn = undefined; // the publish reports it, with the error the function throws
    }
    if (arn !== undefined && !isSnsTopicArn(arn)) {
      return { reason: 'invalid-topic', problem: notAnArn(arn) };
    }
    return awsSizeRefusal('SNS', message, this.#options.maxMessageBytes);
  }

  /**
   * For health checks: asks SNS for the attributes of a topic (`pingTopicArn`, the fixed
   * `topicArn`, or the last one published to; before any, lists one page of topics). Rejects
   * with `PublisherUnavailableError` when SNS does not answer or refuses.
   */
  async ping(signal: AbortSignal): Promise<void> {
    const arn = this.#options.pingTopicArn ?? this.#options.fixedTopicArn ?? this.#lastTopicArn;
    await awsPing('SNS', signal, async () => {
      if (arn === undefined) {
        await this.#client.send(new ListTopicsCommand({}), { abortSignal: signal });
      } else {
        await this.#client.send(new GetTopicAttributesCommand({ TopicArn: arn }), {
          abortSignal: signal,
        });
      }
    });
  }

  /** Destroys the client the publisher built (one you passed in is left to you). */
  close(): Promise<void> {
    if (this.#ownsClient) this.#client.destroy();
    return Promise.resolve();
  }

  private item(
    index: number,
    arn: string,
    record: OutboxRecord,
  ): AwsBatchItem<Entry> | PublishOutcome {
    if (!isSnsTopicArn(arn)) {
      return { ok: false, error: new PermanentPublishError(notAnArn(arn)) };
    }
    const parts = awsMessageParts(record);
    // Enqueued before the limit applied (another publisher, a smaller maxMessageBytes).
    const tooLarge = awsTooLarge('SNS', parts, this.#options.maxMessageBytes);
    if (tooLarge !== undefined) return tooLarge;
    const own = record.attributes?.sns;
    const entry: Entry = {
      Message: parts.body,
      MessageAttributes: parts.attributes,
      ...awsOrdering(arn, record, own?.messageGroupId),
    };
    if (own?.subject !== undefined) entry.Subject = own.subject;
    return { index, destination: arn, key: record.key, bytes: parts.bytes, entry };
  }

  private async send(
    arn: string,
    entries: readonly PublishBatchRequestEntry[],
    signal: AbortSignal,
  ): Promise<AwsBatchAnswer> {
    const answer = await this.#client.send(
      new PublishBatchCommand({ TopicArn: arn, PublishBatchRequestEntries: [...entries] }),
      { abortSignal: signal },
    );
    return awsBatchAnswer(answer);
  }
}

function notAnArn(value: string): string {
  return `its topic ${JSON.stringify(value)} is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>). Give SnsPublisher a topicArn (a fixed ARN, or a function of the message), or enqueue the ARN as the topic.`;
}
