import { Logger } from '@nestjs/common';
import {
  GetTopicAttributesCommand,
  ListTopicsCommand,
  PublishBatchCommand,
  SNSClient,
  type PublishBatchRequestEntry,
  type SNSClientConfig,
} from '@aws-sdk/client-sns';
import type { OutboxSnsAttributes } from '../../message/outbox-message.interface';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import { AwsBatchPublisher } from '../aws/aws-batch-publisher';
import {
  isSnsTopicArn,
  resolveSnsPublisherOptions,
  type SnsPublisherOptions,
} from './sns-publisher.options';

type Entry = Omit<PublishBatchRequestEntry, 'Id'>;

/**
 * Publishes outbox messages to Amazon SNS topics with `PublishBatch` (AWS SDK v3, an optional
 * peer): up to ten messages a call, calls in parallel, one outcome per message from the call's
 * `Successful` and `Failed` lists. The message is the JSON payload as it is (a binary payload in
 * base64, with `x-outbox-content-type`); the message id, type, key and headers travel as message
 * attributes exactly as with `SqsPublisher` (at most ten, the headers folded into one JSON
 * attribute, `x-outbox-headers`, when they do not fit), so an SQS queue subscribed with raw
 * message delivery receives the same message `SqsPublisher` would send, a CloudEvent too with
 * the `cloudEvents` option.
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
  // A private field, so that the client's credentials never show up in util.inspect or JSON.
  readonly #aws: AwsBatchPublisher<SNSClient, SNSClientConfig, OutboxSnsAttributes, Entry>;

  constructor(options: SnsPublisherOptions = {}) {
    const o = resolveSnsPublisherOptions(options);
    this.#aws = new AwsBatchPublisher<SNSClient, SNSClientConfig, OutboxSnsAttributes, Entry>(
      {
        service: 'SNS',
        destinationNoun: 'topic',
        build: (config) => new SNSClient(config),
        notADestination: (arn) => (isSnsTopicArn(arn) ? undefined : notAnArn(arn)),
        own: (record) => record.attributes?.sns,
        entry: ({ body, ...common }, own) => {
          const entry: Entry = { Message: body, ...common };
          if (own?.subject !== undefined) entry.Subject = own.subject;
          return entry;
        },
        sendBatch: (client, arn, entries, signal) =>
          client.send(
            new PublishBatchCommand({ TopicArn: arn, PublishBatchRequestEntries: entries }),
            {
              abortSignal: signal,
            },
          ),
        ping: (client, arn, signal) =>
          arn === undefined
            ? client.send(new ListTopicsCommand({}), { abortSignal: signal })
            : client.send(new GetTopicAttributesCommand({ TopicArn: arn }), {
                abortSignal: signal,
              }),
      },
      { ...o, route: o.topicArn, fixed: o.fixedTopicArn, ping: o.pingTopicArn },
      this.logger,
    );
  }

  publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const aws = this.#aws;
    return aws.publish(
      records,
      signal,
      (record, index) => {
        const arn = aws.destination(record);
        return typeof arn === 'string' ? aws.item(index, arn, record) : arn;
      },
      (items, outcomes) => aws.send(items, outcomes, signal),
    );
  }

  /**
   * Refuses at enqueue what SNS would never take: a message whose topic is not an SNS topic ARN,
   * or over `maxMessageBytes` (body and attributes).
   */
  checkEnqueue(message: OutboxMessageDraft): PublisherRefusal | undefined {
    const arn = this.#aws.routeAtEnqueue(message);
    if (arn !== undefined && !isSnsTopicArn(arn)) {
      return { reason: 'invalid-topic', problem: notAnArn(arn) };
    }
    return this.#aws.sizeRefusal(message);
  }

  /**
   * For health checks: asks SNS for the attributes of a topic (`pingTopicArn`, the fixed
   * `topicArn`, or the last one published to; before any, lists one page of topics). Rejects
   * with `PublisherUnavailableError` when SNS does not answer or refuses.
   */
  ping(signal: AbortSignal): Promise<void> {
    return this.#aws.ping(signal);
  }

  /** Destroys the client the publisher built (one you passed in is left to you). */
  close(): Promise<void> {
    return this.#aws.close();
  }
}

function notAnArn(value: string): string {
  return `its topic ${JSON.stringify(value)} is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>). Give SnsPublisher a topicArn (a fixed ARN, or a function of the message), or enqueue the ARN as the topic.`;
}
