import { randomUUID } from 'node:crypto';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  Ctx,
  EventPattern,
  MessagePattern,
  Payload,
  RmqContext,
  Transport,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import type { OutboxRecord } from '../../lib';
import { messageIdFromRpcContext, sequenceOf } from '../../lib/inbox';
import { cloudEvents } from '../../lib/integrations/cloudevents';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { RabbitMqOutboxDeserializer, RabbitMqPublisher } from '../../lib/publishers/rabbitmq';
import { describeWith, SERVICES } from '../support/services';
import { waitFor } from '../support/wait-for';

// A Nest RMQ microservice consumes what RabbitMqPublisher sends (the bare event as the body, the
// event type as the AMQP `type`) with the deserializer the package ships: no copy-paste needed.

const RABBITMQ_URL =
  process.env.RABBITMQ_URL ??
  `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

const received: unknown[] = [];

@Controller()
class OrdersConsumer {
  @EventPattern<string>('order.created')
  onOrderCreated(@Payload() order: unknown): void {
    received.push(order);
  }

  @EventPattern<string>('orders.audit')
  onAudit(@Payload() envelope: unknown): void {
    received.push(envelope);
  }

  // What a CloudEvent's handler gets, and what the inbox's readers find on its AMQP message.
  @EventPattern<string>('order.shipped')
  onShipped(@Payload() data: unknown, @Ctx() context: RmqContext): void {
    received.push({
      data,
      messageId: messageIdFromRpcContext(context, data),
      sequence: sequenceOf(context, data),
    });
  }

  @MessagePattern<string>('sum')
  sum(@Payload() numbers: number[]): number {
    return numbers.reduce((a, b) => a + b, 0);
  }
}

@Module({ controllers: [OrdersConsumer] })
class ConsumerModule {}

/** The Nest RMQ microservice on `queue`, reading it with the deserializer the package ships. */
async function startConsumer(queue: string): Promise<INestMicroservice> {
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    logger: false,
    transport: Transport.RMQ,
    options: {
      urls: [RABBITMQ_URL],
      queue,
      queueOptions: { durable: true },
      deserializer: new RabbitMqOutboxDeserializer(),
    },
  });
  await app.listen();
  return app;
}

describeWith(['rabbitmq'], 'RabbitMqOutboxDeserializer in a Nest RMQ microservice', () => {
  beforeEach(() => {
    received.length = 0;
  });

  // With outboxHeaders: false the message has no headers at all; the deserializer knows it by
  // its correlation id.
  it.each([
    ['with the x-outbox-* headers', true],
    ['without them (outboxHeaders: false)', false],
  ])(
    'routes each message RabbitMqPublisher sends %s to the handler of its event type',
    async (_name, outboxHeaders) => {
      const queue = `q-nest-consumer-${randomUUID()}`;
      const app = await startConsumer(queue);
      const publisher = new RabbitMqPublisher({
        url: RABBITMQ_URL,
        outboxHeaders,
        assertTopology: async (channel) => {
          await channel.assertQueue(queue, { durable: true });
        },
      });
      try {
        const record: OutboxRecord = {
          id: '1',
          messageId: randomUUID(),
          topic: queue,
          key: 'o-1',
          type: 'order.created',
          payload: JSON.stringify({ orderId: 'o-1', total: 42 }),
          headers: {},
          attempts: 1,
          createdAt: new Date(),
        };
        const outcomes = await publisher.publish([record], new AbortController().signal);
        expect(outcomes).toEqual([{ ok: true }]);
        await waitFor('the handler to receive the event', () => received.length > 0);
        expect(received).toEqual([{ orderId: 'o-1', total: 42 }]);
      } finally {
        await publisher.close();
        await app.close();
      }
    },
  );

  // The queue may also carry Nest's own packets: ClientProxyPublisher over ClientRMQ (which sets
  // the AMQP type to the event type too) and a plain ClientRMQ request. Taking their pattern from
  // `type` would hand the handler the whole packet and drop the request's id, so send() would
  // never be answered.
  it('passes what a Nest ClientRMQ emits or sends as Nest packets', async () => {
    const queue = `q-nest-consumer-${randomUUID()}`;
    const app = await startConsumer(queue);
    const client = ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: { durable: true } },
    });
    const publisher = new ClientProxyPublisher(client);
    try {
      const answer = await firstValueFrom(client.send<number, number[]>('sum', [1, 2, 3]));
      expect(answer).toBe(6);
      const messageId = randomUUID();
      const record: OutboxRecord = {
        id: '2',
        messageId,
        topic: 'orders.audit',
        key: null,
        type: 'order.audited',
        payload: JSON.stringify({ orderId: 'o-2' }),
        headers: {},
        attempts: 1,
        createdAt: new Date(),
      };
      expect(await publisher.publish([record], new AbortController().signal)).toEqual([
        { ok: true },
      ]);
      await waitFor('the audit handler to receive the event', () => received.length > 0);
      expect(received).toEqual([{ orderId: 'o-2' }]);
    } finally {
      await client.close();
      await app.close();
    }
  });

  // RabbitMqPublisher's cloudEvents option: the handler of the event's type gets its data in
  // either content mode (in structured mode, not the envelope), bytes as a Buffer.
  it.each(['binary', 'structured'] as const)(
    'routes CloudEvents in %s mode to the handler of their type, with their data',
    async (mode) => {
      const queue = `q-nest-consumer-${randomUUID()}`;
      const app = await startConsumer(queue);
      const publisher = new RabbitMqPublisher({
        url: RABBITMQ_URL,
        cloudEvents: cloudEvents({ source: '/orders', mode }),
        assertTopology: async (channel) => {
          await channel.assertQueue(queue, { durable: true });
        },
      });
      const base = {
        topic: queue,
        key: 'o-3',
        type: 'order.shipped',
        attempts: 1,
        createdAt: new Date(),
      };
      const records: OutboxRecord[] = [
        {
          ...base,
          id: '3',
          messageId: randomUUID(),
          payload: JSON.stringify({ orderId: 'o-3', big: 12345678901234 }),
          headers: { 'x-outbox-sequence': '7' },
        },
        {
          ...base,
          id: '4',
          messageId: randomUUID(),
          encoding: 'binary',
          payload: Buffer.from([1, 2, 255]),
          contentType: 'application/octet-stream',
          headers: { 'x-outbox-sequence': '8' },
        },
      ];
      try {
        expect(await publisher.publish(records, new AbortController().signal)).toEqual([
          { ok: true },
          { ok: true },
        ]);
        await waitFor('the handler to receive both events', () => received.length === 2);
        expect(received).toEqual([
          {
            data: { orderId: 'o-3', big: 12345678901234 },
            messageId: records[0]?.messageId,
            sequence: { key: 'o-3', sequence: 7 },
          },
          {
            // Binary mode's body is the bytes, which Nest's RMQ server hands over as text;
            // structured mode's data_base64 comes back as the bytes.
            data: mode === 'structured' ? Buffer.from([1, 2, 255]) : expect.anything(),
            messageId: records[1]?.messageId,
            sequence: { key: 'o-3', sequence: 8 },
          },
        ]);
      } finally {
        await publisher.close();
        await app.close();
      }
    },
  );
});
