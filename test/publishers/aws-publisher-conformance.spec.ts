import { SNSClient } from '@aws-sdk/client-sns';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SnsPublisher } from '../../lib/publishers/sns';
import { SqsPublisher } from '../../lib/publishers/sqs';
import {
  publisherConformanceCases,
  type PublisherConformanceFixture,
  type PublisherConformanceTarget,
} from '../../lib/testing/publisher-conformance';
import { describeWith } from '../support/services';
import {
  consumeSqs,
  createQueue,
  outboxIdOf,
  sqsConfig,
  startFauxqs,
  topicWithQueue,
  uniqueQueueName,
  type Fauxqs,
} from '../support/transports/aws';
import { readOutboxSqsMessage } from '../../lib/publishers/sqs';

// The publisher conformance suite (nestjs-outbox/testing) against real servers: SqsPublisher on
// ElasticMQ (scripts/elasticmq.sh), a standard and a FIFO queue; SnsPublisher on fauxqs (an
// SNS/SQS emulator from npm, started here on a port of its own), a standard topic delivering
// SNS notifications and a FIFO topic with raw message delivery, each read from a subscribed queue.
// Every case gets a queue (or topic) of its own, deleted afterwards.

const sqs = new SQSClient(sqsConfig());
afterAll(() => sqs.destroy());

function sqsTarget(name: string, fifo: boolean): PublisherConformanceTarget {
  return {
    name,
    // A standard queue promises no order; ElasticMQ's happens to keep it, SQS's does not.
    ordersByKey: fifo,
    setUp: async (): Promise<PublisherConformanceFixture> => {
      const queue = uniqueQueueName('conformance', fifo);
      const consumer = consumeSqs(sqs, await createQueue(sqs, queue));
      const publisher = new SqsPublisher({ client: sqsConfig() });
      return {
        publisher,
        topic: queue,
        received: () =>
          consumer.received.items.map(outboxIdOf).filter((id): id is string => id !== undefined),
        tearDown: async () => {
          await publisher.close();
          await consumer.close();
        },
      };
    },
  };
}

describeWith(['elasticmq'], 'publisher conformance: SqsPublisher on ElasticMQ', () => {
  describe.each([sqsTarget('standard queue', false), sqsTarget('FIFO queue', true)])(
    '$name',
    (target) => {
      it.each(publisherConformanceCases())('$name', (c) => c.run(target));
    },
  );
});

describe('publisher conformance: SnsPublisher on fauxqs', () => {
  let fauxqs: Fauxqs;
  let sns: SNSClient;
  let queues: SQSClient;
  beforeAll(async () => {
    fauxqs = await startFauxqs();
    sns = new SNSClient(fauxqs.snsConfig());
    queues = new SQSClient(fauxqs.sqsConfig());
  });
  afterAll(async () => {
    sns.destroy();
    queues.destroy();
    await fauxqs.stop();
  });

  function snsTarget(name: string, fifo: boolean, raw: boolean): PublisherConformanceTarget {
    return {
      name,
      ordersByKey: fifo,
      setUp: async (): Promise<PublisherConformanceFixture> => {
        const topic = await topicWithQueue(sns, queues, { fifo, raw });
        const publisher = new SnsPublisher({ client: fauxqs.snsConfig() });
        return {
          publisher,
          topic: topic.topicArn,
          // Raw delivery or an SNS notification around the message: the reader finds the id.
          received: () =>
            topic.consumer.received.items
              .map((m) => readOutboxSqsMessage(m).messageId)
              .filter((id): id is string => id !== undefined),
          tearDown: async () => {
            await publisher.close();
            await topic.close();
          },
        };
      },
    };
  }

  describe.each([
    snsTarget('standard topic, SNS notifications', false, false),
    snsTarget('FIFO topic, raw message delivery', true, true),
  ])('$name', (target) => {
    it.each(publisherConformanceCases())('$name', (c) => c.run(target));
  });
});
