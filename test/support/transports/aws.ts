import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SQSClient,
  type Message,
  type SQSClientConfig,
} from '@aws-sdk/client-sqs';
import {
  CreateTopicCommand,
  DeleteTopicCommand,
  SNSClient,
  SubscribeCommand,
  type SNSClientConfig,
} from '@aws-sdk/client-sns';
import { PublishTimeoutError, type OutboxPublisher, type OutboxRecord } from '../../../lib';
import { ABORT_CONFIRM_GRACE_MS } from '../../../lib/publishers/kit/publish-abort';
import type { FaultProxy } from '../../../lib/testing';
import { SERVICES } from '../services';
import { Collector } from './collector';
import { freePort } from './net';
import { sleep } from '../wait-for';

// ElasticMQ (scripts/elasticmq.sh) for SQS, and fauxqs (an SNS/SQS emulator from npm, started
// by the spec that needs it) for SNS: what the AWS publishers' specs and the bench talk to.

const CREDENTIALS = { accessKeyId: 'test', secretAccessKey: 'test' };

export const ELASTICMQ_ENDPOINT = `http://${SERVICES.elasticmq.host}:${SERVICES.elasticmq.port}`;

/** The configuration of an SQS client for ElasticMQ, or for `endpoint` (a proxy in front of it). */
export function sqsConfig(endpoint = ELASTICMQ_ENDPOINT): SQSClientConfig {
  // maxAttempts 1: a test sees what the publisher makes of one failure, not of the SDK's retries.
  return { endpoint, region: 'elasticmq', credentials: CREDENTIALS, maxAttempts: 1 };
}

let counter = 0;
/** A queue name of its own for one test (`.fifo` for a FIFO queue). */
export function uniqueQueueName(prefix: string, fifo = false): string {
  const name = `${prefix}-${process.pid}-${Date.now() % 1_000_000}-${++counter}`;
  return fifo ? `${name}.fifo` : name;
}

/** Creates a queue and answers its URL; FIFO when the name ends in `.fifo`. */
export async function createQueue(
  client: SQSClient,
  name: string,
  attributes: Record<string, string> = {},
): Promise<string> {
  const fifo = name.endsWith('.fifo') ? { FifoQueue: 'true' } : {};
  const { QueueUrl } = await client.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { ...fifo, ...attributes } }),
  );
  if (QueueUrl === undefined) throw new Error(`CreateQueue ${name} answered no URL`);
  return QueueUrl;
}

/** Messages received from one queue (each deleted once received), until `close`. */
export interface SqsQueueConsumer {
  readonly url: string;
  readonly received: Collector<Message>;
  /** Stops receiving and deletes the queue. */
  close(): Promise<void>;
}

/**
 * Receives from `url` in a loop (long polls of 1 s, ten at a time, deleting what it received)
 * until closed; `close` deletes the queue too.
 */
export function consumeSqs(client: SQSClient, url: string): SqsQueueConsumer {
  const received = new Collector<Message>();
  const stop = new AbortController();
  const loop = (async () => {
    while (!stop.signal.aborted) {
      try {
        const { Messages = [] } = await client.send(
          new ReceiveMessageCommand({
            QueueUrl: url,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: 1,
            MessageAttributeNames: ['All'],
            MessageSystemAttributeNames: ['All'],
          }),
          { abortSignal: stop.signal },
        );
        for (const message of Messages) received.push(message);
        if (Messages.length > 0) {
          await client.send(
            new DeleteMessageBatchCommand({
              QueueUrl: url,
              Entries: Messages.map((m, i) => ({
                Id: String(i),
                ReceiptHandle: m.ReceiptHandle ?? '',
              })),
            }),
          );
        }
      } catch {
        if (!stop.signal.aborted) await sleep(100);
      }
    }
  })();
  return {
    url,
    received,
    close: async () => {
      stop.abort();
      await loop;
      await client.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => undefined);
    },
  };
}

/** How many messages a queue holds now (visible and in flight), as SQS counts them. */
export async function queueDepth(client: SQSClient, url: string): Promise<number> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(Attributes.ApproximateNumberOfMessages ?? 0) +
    Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0)
  );
}

/** The outbox message id a received message carries. */
export const outboxIdOf = (message: Message): string | undefined =>
  message.MessageAttributes?.['x-outbox-message-id']?.StringValue;

/** A fauxqs server (SNS and SQS in one) in a child process of its own, on a free port. */
export interface Fauxqs {
  readonly endpoint: string;
  sqsConfig(): SQSClientConfig;
  snsConfig(): SNSClientConfig;
  stop(): Promise<void>;
}

export async function startFauxqs(): Promise<Fauxqs> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    // Its package exports only an ES module entry, which jest's resolver cannot find: the bin.
    [join(__dirname, '../../../node_modules/fauxqs/dist/cli.js')],
    {
      env: { ...process.env, FAUXQS_PORT: String(port), FAUXQS_LOGGER: 'false' },
      stdio: 'ignore',
    },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const response = await fetch(`${endpoint}/health`);
      if (response.ok) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill();
      throw new Error(`fauxqs did not start on port ${port}`);
    }
    await sleep(100);
  }
  const config = { endpoint, region: 'us-east-1', credentials: CREDENTIALS, maxAttempts: 1 };
  return {
    endpoint,
    sqsConfig: () => ({ ...config }),
    snsConfig: () => ({ ...config }),
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill();
      await exited;
    },
  };
}

/** An SNS topic with an SQS queue subscribed to it; `close` deletes both. */
export interface SubscribedTopic {
  readonly topicArn: string;
  readonly consumer: SqsQueueConsumer;
  close(): Promise<void>;
}

export async function topicWithQueue(
  sns: SNSClient,
  sqs: SQSClient,
  options: { fifo?: boolean; raw?: boolean } = {},
): Promise<SubscribedTopic> {
  const fifo = options.fifo ?? false;
  const name = `outbox-sns-${randomUUID()}${fifo ? '.fifo' : ''}`;
  const { TopicArn } = await sns.send(
    new CreateTopicCommand({ Name: name, Attributes: fifo ? { FifoTopic: 'true' } : {} }),
  );
  if (TopicArn === undefined) throw new Error('CreateTopic answered no ARN');
  const url = await createQueue(sqs, uniqueQueueName('outbox-sns-sub', fifo));
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }),
  );
  await sns.send(
    new SubscribeCommand({
      TopicArn,
      Protocol: 'sqs',
      Endpoint: Attributes.QueueArn,
      Attributes: options.raw === true ? { RawMessageDelivery: 'true' } : {},
    }),
  );
  const consumer = consumeSqs(sqs, url);
  return {
    topicArn: TopicArn,
    consumer,
    close: async () => {
      await consumer.close();
      await sns.send(new DeleteTopicCommand({ TopicArn })).catch(() => undefined);
    },
  };
}

/**
 * A publisher behind a proxy, and the queue its messages reach: what the abort grace cases
 * below publish through.
 */
export interface HeldAnswerTarget {
  readonly proxy: FaultProxy;
  /** The batch call as the proxy sees its request: /SendMessageBatch/, /PublishBatch/. */
  readonly call: RegExp;
  readonly publisher: OutboxPublisher;
  /** The queue name or topic ARN the messages go to. */
  readonly destination: string;
  /** What reaches the queue (the topic's subscribed queue). */
  readonly received: Collector<Message>;
}

/** How a publish aborted with the answer to its batch call held back ended, in words. */
export interface HeldAnswerSummary {
  /** Each message: 'delivered', or its error's class ('…, not sent' when `sent: false`). */
  readonly outcomes: string[];
  /** Whether the queue holds the batch, each message once (it did before the abort). */
  readonly queueHoldsTheBatch: boolean;
  /** When the publish answered, counted from the abort. */
  readonly answered: 'within the grace' | 'as the grace ended' | 'later';
}

/** One way the abort comes, and what the publish must answer then. */
export interface AbortGraceCase {
  readonly name: string;
  readonly expected: HeldAnswerSummary;
  run(target: HeldAnswerTarget): Promise<HeldAnswerSummary>;
}

const BATCH = 10;

/**
 * The abort grace of the AWS publishers, against the service behind a proxy that holds back
 * the answer to the batch call: the service has stored the batch (read back from the queue)
 * and the publish has not heard so, when the dispatcher aborts it. Aborted because its hold was
 * lost, the answer let through 50 ms later counts (every message delivered); not let through,
 * the call is cancelled as the grace ends. Aborted by its deadline, the call is cancelled at
 * once, as before the grace. In the last two the queue holds messages reported failed: the
 * copies the grace cannot spare.
 */
export function abortGraceCases(): AbortGraceCase[] {
  const lost = (): Error => new Error('the delivery partitions were lost');
  const batchOf = (outcome: string): string[] => new Array<string>(BATCH).fill(outcome);
  return [
    {
      name: 'aborted because its hold was lost: a call already sent waits a moment for its answer, and what the service took is answered as delivered',
      expected: {
        outcomes: batchOf('delivered'),
        queueHoldsTheBatch: true,
        answered: 'within the grace',
      },
      run: (target) => abortWithAnswerHeld(target, lost(), 50),
    },
    {
      name: 'aborted because its hold was lost, no answer within the grace: the call is cancelled then, and its messages fail as before',
      expected: {
        outcomes: batchOf('PublisherUnavailableError'),
        queueHoldsTheBatch: true,
        answered: 'as the grace ended',
      },
      run: (target) => abortWithAnswerHeld(target, lost(), undefined),
    },
    {
      name: 'aborted by its deadline: the call is cancelled at once, as before',
      expected: {
        outcomes: batchOf('PublishTimeoutError'),
        queueHoldsTheBatch: true,
        answered: 'within the grace',
      },
      run: (target) => abortWithAnswerHeld(target, new PublishTimeoutError(1_000), undefined),
    },
  ];
}

/**
 * Publishes one message (so that a connection is open and, for SQS, the queue's URL known: the
 * batch then goes out at once), then a batch with the answer to its call held back; aborts it
 * with `reason` once the queue holds the batch, and lets the answer through `releaseAfterMs`
 * later (undefined: once the publish has answered).
 */
async function abortWithAnswerHeld(
  target: HeldAnswerTarget,
  reason: unknown,
  releaseAfterMs: number | undefined,
): Promise<HeldAnswerSummary> {
  const { proxy, publisher, destination, received } = target;
  const record = (n: number): OutboxRecord => ({
    id: String(n),
    messageId: randomUUID(),
    topic: destination,
    key: null,
    type: 'abort-grace',
    payload: JSON.stringify({ n }),
    encoding: 'json',
    contentType: undefined,
    headers: {},
    attempts: 1,
    createdAt: new Date(),
  });
  const [warm] = await publisher.publish([record(0)], new AbortController().signal);
  if (warm?.ok !== true) throw new Error('the warm-up message was not published');
  await received.waitFor(1);
  const batch = Array.from({ length: BATCH }, (_, n) => record(1 + n));
  proxy.holdAnswerTo(target.call);
  const abort = new AbortController();
  const publishing = publisher.publish(batch, abort.signal);
  await received.waitFor(1 + BATCH);
  const abortedAt = performance.now();
  abort.abort(reason);
  const released =
    releaseAfterMs === undefined ? undefined : sleep(releaseAfterMs).then(() => proxy.restore());
  const outcomes = await publishing;
  const answeredInMs = performance.now() - abortedAt;
  await released;
  proxy.restore();
  // Anything sent after the abort would have reached the queue by now.
  await sleep(300);
  const stored = received.items.slice(1).map(outboxIdOf);
  return {
    outcomes: outcomes.map((o) =>
      o.ok
        ? 'delivered'
        : `${(o.error as Error).constructor.name}${o.sent === false ? ', not sent' : ''}`,
    ),
    queueHoldsTheBatch: stored.length === BATCH && batch.every((r) => stored.includes(r.messageId)),
    answered:
      answeredInMs < ABORT_CONFIRM_GRACE_MS
        ? 'within the grace'
        : answeredInMs < ABORT_CONFIRM_GRACE_MS + 1_000
          ? 'as the grace ended'
          : 'later',
  };
}
