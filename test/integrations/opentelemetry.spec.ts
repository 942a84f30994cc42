import { randomUUID } from 'node:crypto';
import { ClientTCP, Transport } from '@nestjs/microservices';
import {
  context,
  propagation,
  SpanKind,
  SpanStatusCode,
  trace,
  type SpanContext,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { connect, type ChannelModel } from 'amqplib';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import {
  OUTBOX_HEADER_MESSAGE_ID,
  OutboxEvent,
  OutboxInvalidMessageError,
  OutboxOptionsError,
  type OutboxMessage,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { ClientProxyPublisher, type OutboxEnvelope } from '../../lib/publishers/microservices';
import { traceContextHeaders, TracedPublisher } from '../../lib/integrations/opentelemetry';
import { RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { JetStreamPublisher } from '../../lib/publishers/jetstream';
import { consumeStream, jetStreamAdmin, JETSTREAM_URL } from '../support/transports/jetstream';
import { RedisStreamsPublisher } from '../../lib/publishers/redis-streams';
import { readOutbox, testDatabase, TestOrder } from '../support/databases';
import { type OutboxApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith, SERVICES } from '../support/services';
import { Collector } from '../support/transports/collector';
import { startNestConsumer } from '../support/transports/nest-consumer';
import { freePort } from '../support/transports/net';
import { consumeRedisStream, redisClient, REDIS_URL } from '../support/transports/redis-streams';
import { sleep } from '../support/wait-for';

// The trace context travels from the span that enqueued a message, through the outbox table and
// a real dispatcher, to a real consumer of Kafka, RabbitMQ, Redis Streams and a Nest TCP
// microservice; the producer spans are taken from a real OpenTelemetry SDK.

const db = testDatabase('postgres');
const RABBITMQ_URL = `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
const KAFKA_BROKERS = [`${SERVICES.kafka.host}:${SERVICES.kafka.port}`];
let counter = 0;
const unique = (what: string): string => `outbox-otel-${what}-${process.pid}-${++counter}`;

/** The W3C traceparent header, taken apart. */
function parseTraceparent(value: string | undefined): { traceId: string; spanId: string } {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(value ?? '');
  if (match === null) throw new Error(`not a W3C traceparent: ${String(value)}`);
  return { traceId: match[1] as string, spanId: match[2] as string };
}

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('outbox-test');

type Harness = OutboxApp<OutboxPublisher>;

describeWith(['postgres'], 'OpenTelemetry: trace context from enqueue to consumer', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_otel' });
  // Broker clients the tests open, closed after each (a client that is gone already is fine).
  const closers: (() => Promise<unknown>)[] = [];

  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(provider);
  });

  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
    exporter.reset();
  });

  afterAll(async () => {
    trace.disable();
    propagation.disable();
    context.disable();
    await provider.shutdown();
  });

  async function openOutbox(
    publisher: OutboxPublisher,
    headersProvider: OutboxModuleOptions['headersProvider'] = traceContextHeaders,
  ): Promise<Harness> {
    return scope.open({
      publisher,
      options: {
        headersProvider,
        retry: { maxAttempts: 1 },
        dispatcher: { listen: false, pollIntervalMs: 50 },
      },
    });
  }

  /** Enqueues inside an active span (as a request handler would) and returns that span's context. */
  async function enqueueInSpan(
    h: Harness,
    message: OutboxMessage,
  ): Promise<{ id: string; enqueued: SpanContext }> {
    return tracer.startActiveSpan('POST /orders', async (span) => {
      try {
        const id = await scope.ds.transaction((m) => h.outbox.enqueue(message, m));
        return { id, enqueued: span.spanContext() };
      } finally {
        span.end();
      }
    });
  }

  async function drainUntil(h: Harness, done: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 30_000;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await h.dispatcher.drain();
      await sleep(20);
    }
  }

  function producerSpan(messageId: string): ReadableSpan {
    const spans = exporter
      .getFinishedSpans()
      .filter((s) => s.attributes['messaging.message.id'] === messageId);
    expect(spans).toHaveLength(1);
    return spans[0] as ReadableSpan;
  }

  /** The assertions every transport shares. */
  async function expectPropagated(
    h: Harness,
    sent: { id: string; enqueued: SpanContext },
    received: string | undefined,
    expected: { system: string; destination: string },
  ): Promise<void> {
    // At enqueue: the row holds the enqueuing span's context.
    const [row] = await readOutbox(scope.ds, h.table);
    expect(parseTraceparent(row?.headers.traceparent)).toEqual({
      traceId: sent.enqueued.traceId,
      spanId: sent.enqueued.spanId,
    });

    const span = producerSpan(sent.id);
    expect(span.name).toBe(`send ${expected.destination}`);
    expect(span.kind).toBe(SpanKind.PRODUCER);
    expect(span.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(span.attributes).toMatchObject({
      'messaging.system': expected.system,
      'messaging.destination.name': expected.destination,
      'messaging.operation.type': 'send',
      'messaging.message.id': sent.id,
    });
    // A child of the enqueuing span, in its trace.
    expect(span.spanContext().traceId).toBe(sent.enqueued.traceId);
    expect(span.parentSpanContext?.spanId).toBe(sent.enqueued.spanId);

    // At the consumer: the producer span's context.
    expect(parseTraceparent(received)).toEqual({
      traceId: sent.enqueued.traceId,
      spanId: span.spanContext().spanId,
    });
  }

  describeWith(['kafka'], 'KafkaPublisher', () => {
    it('the Kafka consumer continues the trace from the producer span', async () => {
      const topic = unique('kafka');
      const kafka = new Kafka({
        brokers: KAFKA_BROKERS,
        clientId: 'outbox-otel-it',
        logLevel: logLevel.NOTHING,
      });
      const admin = kafka.admin();
      await admin.connect();
      closers.push(() => admin.disconnect());
      await admin.createTopics({
        topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
        waitForLeaders: true,
      });
      const received = new Collector<Record<string, string>>();
      const consumer: Consumer = kafka.consumer({ groupId: unique('group'), maxWaitTimeInMs: 100 });
      closers.push(() => consumer.disconnect());
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        eachMessage: ({ message }) => {
          const headers: Record<string, string> = {};
          for (const [name, value] of Object.entries(message.headers ?? {}))
            headers[name] = String(value);
          received.push(headers);
          return Promise.resolve();
        },
      });

      const h = await openOutbox(
        new TracedPublisher(
          new KafkaPublisher({ brokers: KAFKA_BROKERS, clientId: 'outbox-otel' }),
          {
            system: 'kafka',
          },
        ),
      );
      const sent = await enqueueInSpan(h, {
        topic,
        key: 'order-1',
        type: 'order.created',
        payload: { orderId: 1 },
        headers: { 'x-tenant': 't1' },
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the producer span');
      const [headers] = await received.settle(1, 300, 30_000);

      expect(headers?.[OUTBOX_HEADER_MESSAGE_ID]).toBe(sent.id);
      expect(headers?.['x-tenant']).toBe('t1');
      await expectPropagated(h, sent, headers?.traceparent, {
        system: 'kafka',
        destination: topic,
      });
      expect(producerSpan(sent.id).attributes['messaging.kafka.message.key']).toBe('order-1');
    });
  });

  describeWith(['rabbitmq'], 'RabbitMqPublisher', () => {
    let connection: ChannelModel;

    beforeAll(async () => {
      connection = await connect(RABBITMQ_URL);
      connection.on('error', () => undefined);
    });

    afterAll(async () => {
      await connection?.close().catch(() => undefined);
    });

    it('the RabbitMQ consumer continues the trace; a message the broker cannot route ends its span as an error', async () => {
      const queue = unique('rmq');
      const channel = await connection.createChannel();
      closers.push(() => channel.deleteQueue(queue).then(() => channel.close()));
      await channel.assertQueue(queue, { durable: false });
      const received = new Collector<Record<string, unknown>>();
      await channel.consume(
        queue,
        (msg) => {
          if (msg === null) return;
          received.push(msg.properties.headers ?? {});
          channel.ack(msg);
        },
        { noAck: false },
      );

      const h = await openOutbox(
        new TracedPublisher(new RabbitMqPublisher({ url: RABBITMQ_URL }), { system: 'rabbitmq' }),
      );
      const sent = await enqueueInSpan(h, {
        topic: queue,
        type: 'order.created',
        payload: { orderId: 2 },
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the producer span');
      const [headers] = await received.settle(1);
      expect(headers?.[OUTBOX_HEADER_MESSAGE_ID]).toBe(sent.id);
      const traceparent = headers?.traceparent;
      await expectPropagated(h, sent, typeof traceparent === 'string' ? traceparent : undefined, {
        system: 'rabbitmq',
        destination: queue,
      });

      // No queue of that name: RabbitMQ returns the message, the publisher fails it, and with
      // maxAttempts 1 it is dead-lettered; its span says why.
      exporter.reset();
      const lost = await enqueueInSpan(h, {
        topic: unique('nowhere'),
        type: 'order.created',
        payload: {},
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the failed span');
      const failed = producerSpan(lost.id);
      expect(failed.status.code).toBe(SpanStatusCode.ERROR);
      expect(failed.status.message).toMatch(/unroutable|NO_ROUTE|312/i);
      expect(failed.events.some((e) => e.name === 'exception')).toBe(true);
      expect(failed.parentSpanContext?.spanId).toBe(lost.enqueued.spanId);
    });
  });

  describeWith(['nats'], 'JetStreamPublisher', () => {
    it('the JetStream consumer continues the trace from the producer span (NATS headers)', async () => {
      const admin = await jetStreamAdmin();
      closers.push(() => admin.close());
      const stream = await admin.createStream({}, 'otel');
      const consumer = await consumeStream(admin.nc, stream.name);
      closers.push(() => consumer.close());
      const subject = `${stream.name}.orders`;

      const h = await openOutbox(
        new TracedPublisher(new JetStreamPublisher({ servers: JETSTREAM_URL }), { system: 'nats' }),
      );
      const sent = await enqueueInSpan(h, {
        topic: subject,
        key: 'order-3',
        type: 'order.created',
        payload: { orderId: 3 },
        headers: { 'x-tenant': 't1' },
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the producer span');
      const [message] = await consumer.received.settle(1);

      expect(message?.messageId).toBe(sent.id);
      expect(message?.headers['x-tenant']).toBe('t1');
      await expectPropagated(h, sent, message?.headers.traceparent, {
        system: 'nats',
        destination: subject,
      });
    });
  });

  describeWith(['redis'], 'RedisStreamsPublisher', () => {
    it('the stream entry carries the producer span context as a field; a WRONGTYPE refusal ends its span as an error', async () => {
      const stream = unique('redis');
      const consumer = await consumeRedisStream(stream);
      closers.push(() => consumer.close());
      const h = await openOutbox(
        new TracedPublisher(new RedisStreamsPublisher({ connection: REDIS_URL }), {
          system: 'redis',
        }),
      );
      const sent = await enqueueInSpan(h, {
        topic: stream,
        key: 'order-3',
        type: 'order.created',
        payload: { orderId: 3 },
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the producer span');
      const [entry] = await consumer.received.settle(1);
      expect(entry?.fields[OUTBOX_HEADER_MESSAGE_ID]).toBe(sent.id);
      await expectPropagated(h, sent, entry?.fields.traceparent, {
        system: 'redis',
        destination: stream,
      });

      // A key of another type: Redis refuses the XADD (WRONGTYPE), the message is dead at once.
      const redis = redisClient();
      const taken = unique('redis-string');
      closers.push(async () => {
        await redis.del(taken);
        await redis.quit();
      });
      await redis.set(taken, 'not a stream');
      exporter.reset();
      const lost = await enqueueInSpan(h, { topic: taken, type: 'order.created', payload: {} });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the failed span');
      const failed = producerSpan(lost.id);
      expect(failed.status.code).toBe(SpanStatusCode.ERROR);
      expect(failed.status.message).toMatch(/WRONGTYPE/);
      expect(failed.attributes['error.type']).toBe('PermanentPublishError');
      expect(failed.parentSpanContext?.spanId).toBe(lost.enqueued.spanId);
    });
  });

  describe('headersProvider', () => {
    @OutboxEvent({ topic: 'orders', headers: { 'x-tenant': 'from-event' } })
    class OrderCreated {
      constructor(readonly orderId: number) {}
    }
    const nothing: OutboxPublisher = {
      publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
    };

    it("adds its headers under the message's own, to events and plain messages alike", async () => {
      const h = await openOutbox(nothing, () => ({
        'x-tenant': 'from-provider',
        'x-region': 'eu',
      }));
      const [plain, event] = await scope.ds.transaction((m) =>
        h.outbox.enqueue(
          [{ topic: 'orders', payload: {}, headers: { 'x-tenant': 'own' } }, new OrderCreated(1)],
          m,
        ),
      );
      const rows = await readOutbox(scope.ds, h.table);
      expect(rows.find((r) => r.messageId === plain)?.headers).toEqual({
        'x-tenant': 'own',
        'x-region': 'eu',
      });
      expect(rows.find((r) => r.messageId === event)?.headers).toEqual({
        'x-tenant': 'from-event',
        'x-region': 'eu',
      });
    });

    it.each([
      ['x-outbox-message-id', () => ({ 'x-outbox-message-id': 'forged' })],
      // An own property, as JSON.parse makes it: copied by assignment, it would be lost.
      ['__proto__', () => JSON.parse('{"__proto__": "v"}') as Record<string, string>],
    ])(
      'a reserved header (%s) from the provider fails the enqueue and rolls the business write back',
      async (_name, provider) => {
        const h = await openOutbox(nothing, provider);
        // One customer's orders: the table is shared with specs in the other jest process.
        const customer = `reserved-header-${randomUUID()}`;
        await expect(
          scope.ds.transaction(async (m) => {
            await m.save(TestOrder, { customer });
            await h.outbox.enqueue({ topic: 'orders', payload: {} }, m);
          }),
        ).rejects.toMatchObject({
          constructor: OutboxInvalidMessageError,
          reason: 'invalid-header',
        });
        expect(await scope.ds.getRepository(TestOrder).countBy({ customer })).toBe(0);
        expect(await readOutbox(scope.ds, h.table)).toEqual([]);
      },
    );
  });

  describe('TracedPublisher', () => {
    const inner: OutboxPublisher = {
      publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
    };

    it('checks its options like the rest of the module', () => {
      expect(() => new TracedPublisher(inner, {} as { system: string })).toThrow(
        OutboxOptionsError,
      );
      expect(() => new TracedPublisher(inner, {} as { system: string })).toThrow(
        /"system": it is missing/,
      );
      expect(
        () => new TracedPublisher(inner, { system: 'kafka', tracr: tracer } as { system: string }),
      ).toThrow(/tracr is not an option; did you mean tracer\?/);
    });

    it("forwards the wrapped publisher's ping() and close(), and has no ping() when it has none", async () => {
      const pings: AbortSignal[] = [];
      let closed = false;
      const pingable: OutboxPublisher = {
        ...inner,
        ping: (signal) => {
          pings.push(signal);
          return Promise.reject(new Error('connect ECONNREFUSED'));
        },
        close: () => {
          closed = true;
          return Promise.resolve();
        },
      };
      const traced = new TracedPublisher(pingable, { system: 'kafka' });
      const signal = new AbortController().signal;
      await expect(traced.ping?.(signal)).rejects.toThrow('ECONNREFUSED');
      expect(pings).toEqual([signal]);
      await traced.close();
      expect(closed).toBe(true);
      expect(new TracedPublisher(inner, { system: 'kafka' }).ping).toBeUndefined();
    });
  });

  describe('ClientProxyPublisher over TCP', () => {
    it('the Nest TCP consumer gets the producer span context in the envelope headers; an untraced message starts its own trace', async () => {
      const port = await freePort();
      const topic = unique('tcp');
      const consumer = await startNestConsumer(
        { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
        [topic],
      );
      closers.push(() => consumer.close());
      const client = new ClientTCP({ host: '127.0.0.1', port });
      closers.push(() => {
        client.close();
        return Promise.resolve();
      });

      const h = await openOutbox(
        new TracedPublisher(new ClientProxyPublisher(client), { system: 'tcp' }),
      );
      const sent = await enqueueInSpan(h, {
        topic,
        type: 'order.created',
        payload: { orderId: 3 },
      });
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 2, 'the producer span');
      const [item] = await consumer.received.settle(1);
      const envelope = item?.data as OutboxEnvelope;
      expect(envelope.messageId).toBe(sent.id);
      await expectPropagated(h, sent, envelope.headers.traceparent, {
        system: 'tcp',
        destination: topic,
      });

      // Enqueued outside any span: no trace headers on the row; the producer span is a root and
      // its context still reaches the consumer.
      exporter.reset();
      const untraced = await scope.ds.transaction((m) =>
        h.outbox.enqueue({ topic, type: 'order.created', payload: { orderId: 4 } }, m),
      );
      const rows = await readOutbox(scope.ds, h.table);
      expect(rows.find((r) => r.messageId === untraced)?.headers).toEqual({});
      await drainUntil(h, () => exporter.getFinishedSpans().length >= 1, 'the root span');
      const items = await consumer.received.settle(2);
      const second = (items[1]?.data as OutboxEnvelope).headers.traceparent;
      const root = producerSpan(untraced);
      expect(root.parentSpanContext).toBeUndefined();
      expect(parseTraceparent(second)).toEqual({
        traceId: root.spanContext().traceId,
        spanId: root.spanContext().spanId,
      });
    });
  });
});
