import type { TestingModule } from '@nestjs/testing';
import { connect, type ChannelModel } from 'amqplib';
import { Registry } from 'prom-client';
import {
  combineObservers,
  OutboxDispatcher,
  OutboxOptionsError,
  OutboxService,
  type OutboxPublisher,
} from '../../lib';
import { OutboxMetrics, OutboxPrometheusModule } from '../../lib/integrations/prometheus';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { testDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith, SERVICES } from '../support/services';
import { freePort } from '../support/transports/net';
import { sleep } from '../support/wait-for';

// PostgreSQL outbox → real dispatcher → real RabbitMQ, with OutboxPrometheusModule's metrics in a
// real prom-client registry, read back the way Prometheus scrapes them (registry.metrics()).

const db = testDatabase('postgres');
const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const SAMPLE_MS = 250;
let counter = 0;
const unique = (what: string): string => `outbox-prom-${what}-${process.pid}-${++counter}`;

/** The value of one sample in Prometheus' text format, or undefined when it is not exposed. */
function sampleOf(text: string, sample: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? undefined : Number(line.slice(sample.length + 1));
}

async function scrapeUntil(
  registry: Registry,
  what: string,
  done: (text: string) => boolean,
  timeoutMs = 15_000,
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = await registry.metrics();
    if (done(text)) return text;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last scrape:\n${text}`);
    await sleep(50);
  }
}

describeWith(['postgres', 'rabbitmq'], 'Prometheus metrics (OutboxPrometheusModule)', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_prom' });
  let amqp: ChannelModel;

  beforeAll(async () => {
    amqp = await connect(RABBITMQ_URL);
    amqp.on('error', () => undefined);
  });

  afterAll(async () => {
    await amqp?.close().catch(() => undefined);
  });

  async function openApp(
    registry: Registry,
    publisher: OutboxPublisher,
    prefix = '',
  ): Promise<{ moduleRef: TestingModule; deadIds: string[] }> {
    const deadIds: string[] = [];
    // The setup the README shows: the metrics module is global, so the outbox factory injects it
    // and combines it with an observer of the app's own.
    const { moduleRef } = await scope.open({
      publisher,
      imports: [OutboxPrometheusModule.forRoot({ registry, prefix, sampleIntervalMs: SAMPLE_MS })],
      options: {
        retry: { maxAttempts: 2, initialDelayMs: 0, jitter: 0 },
        dispatcher: { listen: false, pollIntervalMs: 50, maxOutagePauseMs: 200 },
      },
      factory: {
        inject: [OutboxMetrics],
        useFactory: (metrics: OutboxMetrics) => ({
          observer: combineObservers(metrics, {
            onDeadLetter: (record) => deadIds.push(record.messageId),
          }),
        }),
      },
    });
    return { moduleRef, deadIds };
  }

  it('counts published, retried and dead-lettered messages by topic and times batches; gauges follow the table', async () => {
    const registry = new Registry();
    const queue = unique('q');
    const channel = await amqp.createChannel();
    await channel.assertQueue(queue, { durable: false });
    scope.defer(() => channel.deleteQueue(queue).then(() => channel.close()));
    const publisher = new RabbitMqPublisher({ url: RABBITMQ_URL });
    const { moduleRef, deadIds } = await openApp(registry, publisher);
    const outbox = moduleRef.get(OutboxService);
    const dispatcher = moduleRef.get(OutboxDispatcher);

    // Four messages to a queue that exists; one to a routing key no queue is bound to, which
    // RabbitMQ returns: a failure, retried once, then dead-lettered (maxAttempts 2).
    const nowhere = unique('nowhere');
    const enqueuedAt = Date.now();
    const [lostId] = await scope.ds.transaction(async (m) => {
      const lost = await outbox.enqueue([{ topic: nowhere, payload: { n: 0 } }], m);
      await outbox.enqueue(
        [1, 2, 3, 4].map((n) => ({ topic: queue, payload: { n } })),
        m,
      );
      return lost;
    });

    const backlog = await scrapeUntil(
      registry,
      'the gauges to see 5 pending messages',
      (text) => sampleOf(text, 'outbox_pending_messages') === 5,
    );
    expect(sampleOf(backlog, 'outbox_oldest_pending_age_seconds')).toBeGreaterThan(0);
    expect(sampleOf(backlog, 'outbox_dead_messages')).toBe(0);

    // Scrapes read what the sampler last stored: they never count the table themselves.
    const stats = jest.spyOn(outbox, 'stats');
    const started = Date.now();
    for (let i = 0; i < 50; i++) await registry.metrics();
    const elapsed = Date.now() - started;
    expect(stats.mock.calls.length).toBeLessThanOrEqual(Math.floor(elapsed / SAMPLE_MS) + 1);
    // …while the sampler does read through this very service, on its own schedule.
    const sampled = Date.now() + 5_000;
    while (stats.mock.calls.length === 0 && Date.now() < sampled) await sleep(20);
    expect(stats.mock.calls.length).toBeGreaterThanOrEqual(1);
    stats.mockRestore();

    const deadline = Date.now() + 20_000;
    while (deadIds.length === 0 && Date.now() < deadline) {
      await dispatcher.drain();
      await sleep(20);
    }
    expect(deadIds).toEqual([lostId]);
    const received: number[] = [];
    for (let i = 0; i < 4; i++) {
      const message = await channel.get(queue, { noAck: true });
      if (message !== false)
        received.push((JSON.parse(message.content.toString()) as { n: number }).n);
    }
    expect(received.sort()).toEqual([1, 2, 3, 4]);

    const text = await scrapeUntil(
      registry,
      'the gauges to see the drained table',
      (t) =>
        sampleOf(t, 'outbox_pending_messages') === 0 && sampleOf(t, 'outbox_dead_messages') === 1,
    );
    expect(sampleOf(text, `outbox_messages_published_total{topic="${queue}"}`)).toBe(4);
    expect(sampleOf(text, `outbox_messages_published_total{topic="${nowhere}"}`)).toBeUndefined();
    expect(sampleOf(text, `outbox_messages_retried_total{topic="${nowhere}"}`)).toBe(1);
    expect(sampleOf(text, `outbox_messages_dead_lettered_total{topic="${nowhere}"}`)).toBe(1);
    expect(sampleOf(text, 'outbox_oldest_pending_age_seconds')).toBe(0);
    expect(sampleOf(text, 'outbox_outages_total')).toBe(0);
    // Every batch that claimed something was timed: at least the first and the retry.
    expect(sampleOf(text, 'outbox_batch_duration_seconds_count')).toBeGreaterThanOrEqual(2);
    expect(sampleOf(text, 'outbox_batch_duration_seconds_sum')).toBeGreaterThan(0);
    expect(text).toContain('# TYPE outbox_batch_duration_seconds histogram');
    // Per message: each of the four took one attempt, and none took longer than the test so far.
    const topic = `{topic="${queue}"}`;
    expect(sampleOf(text, `outbox_delivery_attempts_count${topic}`)).toBe(4);
    expect(sampleOf(text, `outbox_delivery_attempts_sum${topic}`)).toBe(4);
    expect(sampleOf(text, `outbox_delivery_attempts_bucket{le="1",topic="${queue}"}`)).toBe(4);
    expect(sampleOf(text, `outbox_message_latency_seconds_count${topic}`)).toBe(4);
    const latencySum = sampleOf(text, `outbox_message_latency_seconds_sum${topic}`) ?? -1;
    expect(latencySum).toBeGreaterThan(0);
    expect(latencySum).toBeLessThanOrEqual((4 * (Date.now() - enqueuedAt)) / 1_000);
  });

  it('counts outages of an unreachable broker; a prefix keeps two outboxes apart in one registry', async () => {
    const registry = new Registry();
    await openApp(registry, new RabbitMqPublisher({ url: RABBITMQ_URL }), 'up_');
    const port = await freePort(); // nothing listens there: connection refused
    const { moduleRef } = await openApp(
      registry,
      new RabbitMqPublisher({
        url: `amqp://guest:guest@127.0.0.1:${port}`,
        reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
      }),
      'down_',
    );
    await scope.ds.transaction((m) =>
      moduleRef.get(OutboxService).enqueue({ topic: unique('q'), payload: {} }, m),
    );
    const dispatcher = moduleRef.get(OutboxDispatcher);
    const deadline = Date.now() + 20_000;
    let text = '';
    while (Date.now() < deadline) {
      await dispatcher.drain();
      text = await registry.metrics();
      if ((sampleOf(text, 'down_outbox_outages_total') ?? 0) >= 1) break;
      await sleep(50);
    }
    expect(sampleOf(text, 'down_outbox_outages_total')).toBeGreaterThanOrEqual(1);
    expect(sampleOf(text, 'up_outbox_outages_total')).toBe(0);
    // An outage burns no attempt: the message is still pending, nothing was dead-lettered.
    expect(sampleOf(text, 'down_outbox_messages_published_total')).toBeUndefined();
    const later = await scrapeUntil(
      registry,
      'the pending message in the down_ gauges',
      (t) => sampleOf(t, 'down_outbox_pending_messages') === 1,
    );
    expect(sampleOf(later, 'down_outbox_dead_messages')).toBe(0);
    expect(sampleOf(later, 'up_outbox_pending_messages')).toBe(0);
  });

  it('refuses a second set of the same metrics in one registry, naming the fix', () => {
    const registry = new Registry();
    const first = new OutboxMetrics({ registry, prefix: 'app_' });
    expect(() => new OutboxMetrics({ registry, prefix: 'app_' })).toThrow(OutboxOptionsError);
    expect(() => new OutboxMetrics({ registry, prefix: 'app_' })).toThrow(/distinct prefix/);
    // The failed attempt registered nothing, and the first instance's metrics are intact.
    // Seven counters and histograms, three table gauges, four log-tailing metrics.
    expect(registry.getMetricsAsArray()).toHaveLength(14);
    expect(first.registry).toBe(registry);
    expect(() => new OutboxMetrics({ registry, prefix: '9bad' })).toThrow(OutboxOptionsError);
    expect(
      () => new OutboxMetrics({ registry, prefx: 'x_' } as unknown as { prefix: string }),
    ).toThrow(/prefx is not an option; did you mean prefix\?/);
  });
});
