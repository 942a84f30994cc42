import {
  OutboxOptionsError,
  PermanentPublishError,
  PublisherUnavailableError,
  routePublishers,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { readPublish } from '../../lib/dispatch/pipeline/batch-outcome';

// routePublishers: which publisher gets which message, outcomes back in the batch's order, and
// how a publisher's failure reads to the dispatcher (readPublish is the dispatcher's own reading).

let seq = 0;
const record = (topic: string): OutboxRecord => {
  seq += 1;
  return {
    id: String(seq),
    messageId: `m-${seq}`,
    topic,
    key: null,
    type: 't',
    payload: '{}',
    headers: {},
    attempts: 1,
    createdAt: new Date(0),
  };
};

/** A publisher that keeps what it was given and answers from `answer`. */
class Keeping implements OutboxPublisher {
  readonly got: string[][] = [];
  closed = 0;
  pinged = 0;
  constructor(
    private readonly answer: (r: OutboxRecord) => PublishOutcome | 'throw' = () => ({ ok: true }),
  ) {}
  publish(messages: readonly OutboxRecord[]): Promise<readonly PublishOutcome[]> {
    this.got.push(messages.map((m) => m.messageId));
    const answers = messages.map(this.answer);
    if (answers.includes('throw')) return Promise.reject(new Error('connection refused'));
    return Promise.resolve(answers as PublishOutcome[]);
  }
  close(): Promise<void> {
    this.closed += 1;
    return Promise.resolve();
  }
  ping(): Promise<void> {
    this.pinged += 1;
    return Promise.resolve();
  }
}

const signal = new AbortController().signal;

describe('routePublishers (unit)', () => {
  it('sends each topic to its route, the rest to the fallback, and answers in the batch order', async () => {
    const local = new Keeping();
    const broker = new Keeping((r) =>
      r.topic === 'audit' ? { ok: false, error: new Error('nack') } : { ok: true },
    );
    const router = routePublishers({
      routes: [{ topics: ['orders', 'billing'], publisher: local }],
      fallback: broker,
    });
    const batch = [
      record('orders'),
      record('audit'),
      record('billing'),
      record('mail'),
      record('orders'),
    ];
    const outcomes = await router.publish(batch, signal);
    expect(local.got).toEqual([[batch[0]?.messageId, batch[2]?.messageId, batch[4]?.messageId]]);
    expect(broker.got).toEqual([[batch[1]?.messageId, batch[3]?.messageId]]);
    expect(outcomes.map((o) => o.ok)).toEqual([true, false, true, true, true]);
  });

  it('routes by a test on the topic, first matching route first', async () => {
    const a = new Keeping();
    const b = new Keeping();
    const router = routePublishers({
      routes: [
        { topics: (t) => t.startsWith('local.'), publisher: a },
        { topics: (t) => t.includes('.'), publisher: b },
      ],
    });
    const batch = [record('local.orders'), record('x.y')];
    await router.publish(batch, signal);
    expect(a.got).toEqual([[batch[0]?.messageId]]);
    expect(b.got).toEqual([[batch[1]?.messageId]]);
  });

  it('dead-letters a topic no route takes when there is no fallback, naming the topic', async () => {
    const router = routePublishers({ routes: [{ topics: ['orders'], publisher: new Keeping() }] });
    const [outcome] = await router.publish([record('invoices')], signal);
    const error = (outcome as { error: unknown }).error;
    expect(error).toBeInstanceOf(PermanentPublishError);
    expect(String(error)).toContain('No publisher routes topic "invoices"');
  });

  it('turns a publisher that throws into PublisherUnavailableError for its messages only: an outage when the batch was all its own', async () => {
    const local = new Keeping();
    const broker = new Keeping(() => 'throw');
    const router = routePublishers({
      routes: [{ topics: ['orders'], publisher: local }],
      fallback: broker,
    });

    const mixed = await router.publish([record('orders'), record('audit')], signal);
    expect(mixed[0]).toEqual({ ok: true });
    expect((mixed[1] as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);
    // A mixed batch is not an outage: the broker's message counts an attempt and backs off.
    expect(readPublish({ kind: 'returned', outcomes: mixed }, 2).result.kind).toBe('outcomes');

    const brokerOnly = await router.publish([record('audit'), record('mail')], signal);
    expect(readPublish({ kind: 'returned', outcomes: brokerOnly }, 2).result.kind).toBe('outage');
  });

  it('fails the messages of a publisher that breaks its contract (wrong number of outcomes)', async () => {
    const liar: OutboxPublisher = { publish: () => Promise.resolve([]) };
    const router = routePublishers({ routes: [{ topics: ['orders'], publisher: liar }] });
    const [outcome] = await router.publish([record('orders')], signal);
    expect((outcome as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);
  });

  it('closes and pings each publisher once, even when it serves several routes', async () => {
    const local = new Keeping();
    const broker = new Keeping();
    const router = routePublishers({
      routes: [
        { topics: ['a'], publisher: local },
        { topics: ['b'], publisher: local },
      ],
      fallback: broker,
    });
    await router.ping?.(signal);
    await router.close?.();
    expect([local.closed, local.pinged, broker.closed, broker.pinged]).toEqual([1, 1, 1, 1]);
  });

  it('refuses a topic named by two routes, a route without publisher, and no routes at all', () => {
    const p = new Keeping();
    expect(() =>
      routePublishers({
        routes: [
          { topics: ['a'], publisher: p },
          { topics: ['a'], publisher: p },
        ],
      }),
    ).toThrow(OutboxOptionsError);
    expect(() =>
      routePublishers({ routes: [{ topics: ['a'], publisher: undefined as never }] }),
    ).toThrow('has no publisher');
    expect(() => routePublishers({ routes: [] })).toThrow(OutboxOptionsError);
    expect(() => routePublishers({ routes: [{ topics: [''], publisher: p }] })).toThrow(
      OutboxOptionsError,
    );
  });
});
