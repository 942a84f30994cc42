/** A Nest TCP microservice in a process of its own that counts the events it receives (P3). */
import 'reflect-metadata';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Transport, type MicroserviceOptions } from '@nestjs/microservices';
import { childSide } from './child';

interface TcpConsumerConfig {
  readonly port: number;
  readonly pattern: string;
}

let received = 0;

async function main(): Promise<void> {
  const { config, send } = childSide<TcpConsumerConfig>();

  @Controller()
  class CountingController {
    @EventPattern(config.pattern)
    handle(): void {
      received++;
    }
  }

  @Module({ controllers: [CountingController] })
  class ConsumerModule {}

  const app = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port: config.port },
    logger: false,
  });
  await app.listen();
  process.on('message', (m: { type: string; reset?: boolean }) => {
    if (m.type === 'count') {
      send({ type: 'count', received });
      if (m.reset === true) received = 0;
    } else if (m.type === 'exit') {
      void app.close().finally(() => process.exit(0));
    }
  });
  send({ type: 'ready' });
}

main().catch((error: unknown) => {
  console.error('tcp consumer failed:', error);
  process.exit(1);
});
