import type { SNSClient, SNSClientConfig } from '@aws-sdk/client-sns';
import type { KnownOptionKeys, OptionFailure } from '../../options/option-checks';
import { PublisherOptionChecks } from '../kit/publisher-options-check';
import { resolveAwsClient, resolveAwsLimits } from '../aws/aws-publisher-parts';
import type { OutboxMessageDraft } from '../outbox-publisher.interface';

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
}

/** Options with defaults applied and values checked. */
export interface ResolvedSnsPublisherOptions {
  /** The client given, or undefined when the publisher builds its own from `clientConfig`. */
  readonly client: SNSClient | undefined;
  readonly clientConfig: SNSClientConfig;
  readonly topicArn: (message: OutboxMessageDraft) => string;
  /** The one topic every message goes to, when `topicArn` is a string. */
  readonly fixedTopicArn: string | undefined;
  readonly maxConcurrentRequests: number;
  readonly maxMessageBytes: number;
  readonly pingTopicArn: string | undefined;
}

/**
 * SNS's own limits: a message (and a `PublishBatch` call) carries at most a topic's
 * `MaximumMessageSize`, 256 KiB by default and 1 MiB at most.
 */
export const SNS_DEFAULT_MAX_MESSAGE_BYTES = 262_144;
export const SNS_MAX_MESSAGE_BYTES = 1_048_576;

const OPTION_KEYS = {
  '': {
    client: true,
    topicArn: true,
    maxConcurrentRequests: true,
    maxMessageBytes: true,
    pingTopicArn: true,
  } satisfies Record<keyof SnsPublisherOptions, true>,
} satisfies KnownOptionKeys;

const checks: PublisherOptionChecks = new PublisherOptionChecks('SnsPublisher');
const fail: OptionFailure = checks.fail;
const { show } = checks;

// arn:<partition>:sns:<region>:<account>:<name>, names of 1 to 256 letters, digits, - and _
// (FIFO topics ending in .fifo).
const TOPIC_ARN =
  /^arn:[a-z-]+:sns:[a-z0-9-]*:[0-9]*:[A-Za-z0-9_-]{1,251}(\.fifo|[A-Za-z0-9_-]{0,5})$/;

/** Whether `value` is an SNS topic ARN. */
export function isSnsTopicArn(value: unknown): value is string {
  return typeof value === 'string' && TOPIC_ARN.test(value);
}

function checkArn(option: string, value: unknown): void {
  if (!isSnsTopicArn(value)) {
    fail(
      option,
      `${show(value)} is not an SNS topic ARN`,
      "Pass e.g. 'arn:aws:sns:eu-west-1:123456789012:orders' (FIFO topics end in .fifo).",
    );
  }
}

/**
 * Merges the defaults into `SnsPublisher` options and rejects invalid ones with a message that
 * says how to fix them. Pure: no I/O, nothing of the client configuration echoed.
 */
export function resolveSnsPublisherOptions(
  options: SnsPublisherOptions = {},
): ResolvedSnsPublisherOptions {
  checks.optionsObject(options, "{ topicArn: 'arn:aws:sns:eu-west-1:123456789012:orders' } or {}");
  checks.knownKeys(options, OPTION_KEYS);
  const { client, clientConfig } = resolveAwsClient<SNSClient, SNSClientConfig>(
    checks,
    options.client,
    'SNS',
  );
  const { topicArn } = options;
  if (topicArn !== undefined && typeof topicArn !== 'function') checkArn('topicArn', topicArn);
  if (options.pingTopicArn !== undefined) checkArn('pingTopicArn', options.pingTopicArn);
  const fixedTopicArn = typeof topicArn === 'string' ? topicArn : undefined;
  const limits = resolveAwsLimits(
    checks,
    options,
    SNS_DEFAULT_MAX_MESSAGE_BYTES,
    SNS_MAX_MESSAGE_BYTES,
  );
  return {
    client,
    clientConfig,
    topicArn:
      typeof topicArn === 'function'
        ? topicArn
        : fixedTopicArn !== undefined
          ? () => fixedTopicArn
          : (message) => message.topic,
    fixedTopicArn,
    ...limits,
    pingTopicArn: options.pingTopicArn,
  };
}
