import { randomUUID } from 'node:crypto';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload, Transport, type MicroserviceOptions } from '@nestjs/microservices';
import type { OutboxRecord } from '../../lib';
import { RabbitMqOutboxDeserializer, RabbitMqPublisher } from '../../lib/rabbitmq';
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
}

@Module({ controllers: [OrdersConsumer] })
class ConsumerModule {}

describeWith(['rabbitmq'], 'RabbitMqOutboxDeserializer in a Nest RMQ microservice', () => {
  it('routes each message RabbitMqPublisher sends to the handler of its event type', async () => {
    const queue = `q-nest-consumer-${randomUUID()}`;
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
    const publisher = new RabbitMqPublisher({
      url: RABBITMQ_URL,
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
  });
});
