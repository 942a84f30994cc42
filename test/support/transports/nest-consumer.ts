import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, MessagePattern, type MicroserviceOptions } from '@nestjs/microservices';
import { Collector } from './collector';

export interface NestReceived {
  readonly pattern: string;
  readonly data: unknown;
}

export interface NestConsumer {
  readonly received: Collector<NestReceived>;
  close(): Promise<void>;
}

/** What a `@MessagePattern` handler answers; it may throw (an `RpcException`) or never settle. */
export type NestAnswer = (pattern: string, data: unknown) => unknown;

/**
 * A real Nest microservice (any transport) with one handler per pattern that records what it
 * gets: `@EventPattern` handlers by default, `@MessagePattern` handlers with `kind: 'message'`
 * (for the publisher's `mode: 'send'`), answering `'ack'` unless `answer` says otherwise.
 */
export async function startNestConsumer(
  options: MicroserviceOptions,
  patterns: readonly string[],
  kind: 'event' | 'message' = 'event',
  answer: NestAnswer = () => 'ack',
): Promise<NestConsumer> {
  const received = new Collector<NestReceived>();

  class ConsumerController {}
  patterns.forEach((pattern, i) => {
    const name = `handle${i}`;
    Object.defineProperty(ConsumerController.prototype, name, {
      value: (data: unknown) => {
        received.push({ pattern, data });
        return kind === 'message' ? answer(pattern, data) : undefined;
      },
      writable: true,
      configurable: true,
    });
    const descriptor = Object.getOwnPropertyDescriptor(
      ConsumerController.prototype,
      name,
    ) as PropertyDescriptor;
    (kind === 'message' ? MessagePattern(pattern) : EventPattern(pattern))(
      ConsumerController.prototype,
      name,
      descriptor,
    );
  });
  Controller()(ConsumerController);

  class ConsumerModule {}
  Module({ controllers: [ConsumerController] })(ConsumerModule);

  const app: INestMicroservice = await NestFactory.createMicroservice<MicroserviceOptions>(
    ConsumerModule,
    { ...options, logger: false },
  );
  await app.listen();
  return { received, close: () => app.close() };
}
