import type { SNSClient, SNSClientConfig } from '@aws-sdk/client-sns';
import { PublisherOptionChecks } from '../kit/publisher-options-check';
import {
  AWS_DEFAULT_MAX_MESSAGE_BYTES,
  AWS_MAX_MESSAGE_BYTES,
  AWS_OPTION_KEYS,
  resolveAwsPublisherOptions,
  type AwsServiceOptions,
  type ResolvedAwsSharedOptions,
} from '../aws/aws-publisher.options';
import type { OutboxMessageDraft } from '../outbox-publisher.interface';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';

/** Options of {@link SnsPublisher}. */
export interface SnsPublisherOptions {
  /**
   * Your own `SNSClient` (the publisher never destroys it), or the configuration of one the
   * publisher builds and destroys at `close()`. Credentials come from the AWS SDK's default
   * provider chain unless the configuration names them; they are never logged.
   * @default a client of the default region and credential chain, with 3 s to connect and 10 s per request
   */
  client?: SNSClient | SNSClientConfig;
  /**
   * The ARN of the topic a message goes to, fixed or per message. An ARN ending in `.fifo` is a
   * FIFO topic: `MessageGroupId` from the key, `MessageDeduplicationId` the message id.
   * @default the message's topic, which must then be an ARN
   */
  topicArn?: string | ((message: OutboxMessageDraft) => string);
  /** `PublishBatch` calls in flight at once, per publisher. @default 10 */
  maxConcurrentRequests?: number;
  /**
   * The largest message, body and attributes, in bytes: checked at enqueue, so an oversized
   * message fails `enqueue()` instead of being dead-lettered. A topic takes 256 KiB unless its
   * `MaximumMessageSize` attribute allows more, up to 1 MiB; keep this at or below it. Also the
   * most one `PublishBatch` carries (SNS counts a batch against the same attribute).
   * @default 262144 (256 KiB)
   */
  maxMessageBytes?: number;
  /**
   * The topic `ping()` asks for its attributes. @default `topicArn` when fixed, else the last
   * topic published to, else `ListTopics` (which needs `sns:ListTopics`)
   */
  pingTopicArn?: string;
  /**
   * Sends messages as CloudEvents: `cloudEvents({ source })` from `nestjs-outbox/cloudevents`.
   * CloudEvents defines no SNS binding; the attributes are written as the HTTP binding writes
   * headers: in binary mode `ce-<name>` message attributes (values percent-encoded),
   * `datacontenttype` the `content-type` attribute and the payload the body; in structured mode
   * the event as the body with `content-type: application/cloudevents+json`. Of the ten
   * attributes a message may carry, the required ones always travel alone and what does not fit
   * goes into one JSON attribute, `x-outbox-headers` (docs/publishers.md, "CloudEvents").
   * @default none (plain outbox messages)
   */
  cloudEvents?: OutboxCloudEvents;
}

/** Options with defaults applied and values checked. */
export interface ResolvedSnsPublisherOptions extends ResolvedAwsSharedOptions<
  SNSClient,
  SNSClientConfig
> {
  readonly topicArn: (message: OutboxMessageDraft) => string;
  /** The one topic every message goes to, when `topicArn` is a string. */
  readonly fixedTopicArn: string | undefined;
  readonly pingTopicArn: string | undefined;
}

/**
 * SNS's own limits: a message (and a `PublishBatch` call) carries at most a topic's
 * `MaximumMessageSize`, 256 KiB by default and 1 MiB at most.
 */
export const SNS_DEFAULT_MAX_MESSAGE_BYTES = AWS_DEFAULT_MAX_MESSAGE_BYTES;
export const SNS_MAX_MESSAGE_BYTES = AWS_MAX_MESSAGE_BYTES;

const checks: PublisherOptionChecks = new PublisherOptionChecks('SnsPublisher');

// arn:<partition>:sns:<region>:<account>:<name>, names of 1 to 256 letters, digits, - and _
// (FIFO topics ending in .fifo).
const TOPIC_ARN =
  /^arn:[a-z-]+:sns:[a-z0-9-]*:[0-9]*:[A-Za-z0-9_-]{1,251}(\.fifo|[A-Za-z0-9_-]{0,5})$/;

/** Whether `value` is an SNS topic ARN. */
export function isSnsTopicArn(value: unknown): value is string {
  return typeof value === 'string' && TOPIC_ARN.test(value);
}

const SNS_OPTIONS: AwsServiceOptions = {
  service: 'SNS',
  destination: 'topicArn',
  ping: 'pingTopicArn',
  example: "{ topicArn: 'arn:aws:sns:eu-west-1:123456789012:orders' } or {}",
  keys: {
    '': {
      ...AWS_OPTION_KEYS,
      topicArn: true,
      pingTopicArn: true,
    } satisfies Record<keyof SnsPublisherOptions, true>,
  },
  isDestination: isSnsTopicArn,
  notADestination: 'is not an SNS topic ARN',
  fix: "Pass e.g. 'arn:aws:sns:eu-west-1:123456789012:orders' (FIFO topics end in .fifo).",
};

/**
 * Merges the defaults into `SnsPublisher` options and rejects invalid ones with a message that
 * says how to fix them. Pure: no I/O, nothing of the client configuration echoed.
 */
export function resolveSnsPublisherOptions(
  options: SnsPublisherOptions = {},
): ResolvedSnsPublisherOptions {
  const { route, fixed, ping, ...shared } = resolveAwsPublisherOptions<SNSClient, SNSClientConfig>(
    checks,
    options,
    SNS_OPTIONS,
  );
  return { ...shared, topicArn: route, fixedTopicArn: fixed, pingTopicArn: ping };
}
