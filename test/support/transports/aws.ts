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
