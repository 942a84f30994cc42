import { PublisherUnavailableError, type OutboxRecord, type PublishOutcome } from '../../lib';
import { KafkaPublisher } from '../../lib/publishers/kafka';

// A batch waits its turn on the shared producer while the batch before it is sent. When that
// send fails the producer (an outage, a producer-state error), the producer is retired: kafkajs
// has rolled back its sequence numbers, past what the broker may have appended, so a later
// batch sent on it could be answered as the duplicate of messages it never wrote and be reported
// published. The waiting batch must not be sent on it.

interface PendingSend {
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

class FakeProducer {
  readonly sends: PendingSend[] = [];
  connect(): Promise<void> {
    return Promise.resolve();
  }
  disconnect(): Promise<void> {
    return Promise.resolve();
  }
  sendBatch(): Promise<void> {
    return new Promise<void>((resolve, reject) => this.sends.push({ resolve, reject }));
  }
}

const mockProducers: FakeProducer[] = [];

jest.mock('kafkajs', () => {
  const actual: Record<string, unknown> = jest.requireActual('kafkajs');
  return {
    ...actual,
    Kafka: class {
      producer(): FakeProducer {
        const producer = new FakeProducer();
        mockProducers.push(producer);
        return producer;
      }
    },
  };
});

function record(n: number): OutboxRecord {
  return {
    id: String(n),
    messageId: `m-${n}`,
    topic: 'orders',
    key: `k-${n}`,
    type: 'order.created',
    payload: `{"n":${n}}`,
    headers: {},
    attempts: 1,
    createdAt: new Date(),
  };
}

async function until(probe: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !probe(); i++) await new Promise((r) => setImmediate(r));
  if (!probe()) throw new Error('condition not reached');
}

describe('KafkaPublisher, a producer retired while a batch waits its turn', () => {
  it('hands the waiting batch back as an outage instead of sending it on the retired producer', async () => {
    const publisher = new KafkaPublisher({ brokers: ['127.0.0.1:9092'] });
    const first = publisher.publish([record(1)], new AbortController().signal);
    await until(() => mockProducers[0]?.sends.length === 1);
    const producer = mockProducers[0] as FakeProducer;
    const second = publisher.publish([record(2)], new AbortController().signal);
    // The second batch waits behind the first on the same producer.
    await new Promise((r) => setImmediate(r));
    expect(producer.sends).toHaveLength(1);

    const lost = Object.assign(new Error('Connection lost'), { name: 'KafkaJSConnectionError' });
    producer.sends[0]?.reject(lost);
    const [firstOutcome] = await first;
    expect(firstOutcome).toMatchObject({ ok: false });
    expect(firstOutcome).not.toHaveProperty('sent'); // it was sent: the broker may have it
    expect((firstOutcome as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);

    // Before the fix the second batch went out on the retired producer here.
    await new Promise((r) => setImmediate(r));
    for (const send of producer.sends.slice(1)) send.resolve();
    const [secondOutcome] = (await second) as [PublishOutcome];
    expect(producer.sends).toHaveLength(1);
    // Never sent: the dispatcher gives its attempt back, even beside messages that were.
    expect(secondOutcome).toMatchObject({ ok: false, sent: false });
    expect((secondOutcome as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);

    // The next batch goes out on a fresh producer.
    const third = publisher.publish([record(3)], new AbortController().signal);
    await until(() => mockProducers[1]?.sends.length === 1);
    mockProducers[1]?.sends[0]?.resolve();
    expect(await third).toEqual([{ ok: true }]);
    await publisher.close();
  });
});
