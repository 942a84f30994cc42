import type { SQSClient, SQSClientConfig } from '@aws-sdk/client-sqs';
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

/** Options of {@link SqsPublisher}. */
export interface SqsPublisherOptions {
  /**
   * Your own `SQSClient` (the publisher never destroys it), or the configuration of one the
   * publisher builds and destroys at `close()`. Credentials come from the AWS SDK's default
   * provider chain unless the configuration names them; they are never logged.
   * @default a client of the default region and credential chain, with 3 s to connect and 10 s per request
   */
  client?: SQSClient | SQSClientConfig;
  /**
   * The queue of a message: its name (looked up once with `GetQueueUrl`) or its URL, fixed or per
   * message. A name or URL ending in `.fifo` is a FIFO queue: `MessageGroupId` from the key,
   * `MessageDeduplicationId` the message id.
   * @default the message's topic, as a queue name
   */
  queue?: string | ((message: OutboxMessageDraft) => string);
  /** `SendMessageBatch` calls in flight at once, per publisher. @default 10 */
  maxConcurrentRequests?: number;
  /**
   * The largest message, body and attributes, in bytes: checked at enqueue, so an oversized
   * message fails `enqueue()` instead of being dead-lettered. A queue's `MaximumMessageSize` may
   * allow up to 1 MiB; keep this at or below it. Also the most one `SendMessageBatch` carries.
   * @default 262144 (256 KiB)
   */
  maxMessageBytes?: number;
  /**
   * The queue `ping()` asks for its attributes (a name or a URL). @default `queue` when fixed,
   * else the last queue published to, else `ListQueues` (which needs `sqs:ListQueues`)
   */
  pingQueue?: string;
  /**
   * Sends messages as CloudEvents: `cloudEvents({ source })` from `nestjs-outbox/cloudevents`.
   * CloudEvents defines no SQS binding; the attributes are written as the HTTP binding writes
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
export interface ResolvedSqsPublisherOptions extends ResolvedAwsSharedOptions<
  SQSClient,
  SQSClientConfig
> {
  readonly queue: (message: OutboxMessageDraft) => string;
  /** The one queue every message goes to, when `queue` is a string. */
  readonly fixedQueue: string | undefined;
  readonly pingQueue: string | undefined;
}

/** SQS's own limits: a message (and a batch call) carries at most 1 MiB; 256 KiB by default. */
export const SQS_DEFAULT_MAX_MESSAGE_BYTES = AWS_DEFAULT_MAX_MESSAGE_BYTES;
export const SQS_MAX_MESSAGE_BYTES = AWS_MAX_MESSAGE_BYTES;

const checks: PublisherOptionChecks = new PublisherOptionChecks('SqsPublisher');

// A queue name (1 to 80 of letters, digits, '-' and '_', FIFO ones ending in '.fifo') or an
// http(s) URL.
const QUEUE_NAME = /^[A-Za-z0-9_-]{1,75}(\.fifo|[A-Za-z0-9_-]{0,5})$/;
const QUEUE_URL = /^https?:\/\/\S+$/;

/** Whether `value` names a queue the publisher can send to: an SQS queue name or a URL. */
export function isSqsQueue(value: unknown): value is string {
  return typeof value === 'string' && (QUEUE_NAME.test(value) || QUEUE_URL.test(value));
}

const SQS_OPTIONS: AwsServiceOptions = {
  service: 'SQS',
  destination: 'queue',
  ping: 'pingQueue',
  example: "{ queue: 'orders.fifo' } or {}",
  keys: {
    '': {
      ...AWS_OPTION_KEYS,
      queue: true,
      pingQueue: true,
    } satisfies Record<keyof SqsPublisherOptions, true>,
  },
  isDestination: isSqsQueue,
  notADestination:
    'is neither an SQS queue name (1 to 80 letters, digits, - or _, FIFO queues ending in .fifo) nor a queue URL',
  fix: "Pass e.g. 'orders', 'orders.fifo' or 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders'.",
};

/**
 * Merges the defaults into `SqsPublisher` options and rejects invalid ones with a message that
 * says how to fix them. Pure: no I/O, nothing of the client configuration echoed.
 */
export function resolveSqsPublisherOptions(
  options: SqsPublisherOptions = {},
): ResolvedSqsPublisherOptions {
  const { route, fixed, ping, ...shared } = resolveAwsPublisherOptions<SQSClient, SQSClientConfig>(
    checks,
    options,
    SQS_OPTIONS,
  );
  return { ...shared, queue: route, fixedQueue: fixed, pingQueue: ping };
}
