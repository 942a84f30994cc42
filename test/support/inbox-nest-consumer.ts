import { Controller, Inject, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Ctx,
  EventPattern,
  Payload,
  RmqContext,
  type BaseRpcContext,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import type { Channel, ConsumeMessage } from 'amqplib';
import { InboxModule, InboxService, messageIdFromRpcContext } from 'nestjs-outbox/inbox';
import type { DataSource } from 'typeorm';
import { writeEffect } from './inbox-fixtures';
import { Collector } from './transports/collector';

export interface NestInboxSeen {
  readonly messageId: string;
  readonly handled: boolean;
  readonly context: string;
}

export interface NestInboxConsumer {
  readonly seen: Collector<NestInboxSeen>;
  readonly errors: unknown[];
  close(): Promise<void>;
}

/**
 * A real Nest microservice whose `@EventPattern(pattern)` handler is the one the README shows:
 * the message id from `@Ctx()` (and `@Payload()` for envelope transports), `InboxService` from
 * `InboxModule`, the business write in the inbox transaction, and an explicit ack on RabbitMQ.
 */
export async function startNestInboxConsumer(args: {
  readonly transport: MicroserviceOptions;
  readonly pattern: string;
  readonly dataSource: DataSource;
  readonly inboxTable: string;
  readonly businessTable: string;
  readonly consumer: string;
}): Promise<NestInboxConsumer> {
  const seen = new Collector<NestInboxSeen>();
  const errors: unknown[] = [];

  @Controller()
  class OrderEventsController {
    constructor(@Inject(InboxService) private readonly inbox: InboxService) {}

    @EventPattern(args.pattern)
    async onOrderEvent(@Payload() data: unknown, @Ctx() context: BaseRpcContext): Promise<void> {
      try {
        const messageId = messageIdFromRpcContext(context, data);
        const outcome = await this.inbox.handleOnce(
          this.inbox.dataSource,
          { messageId, consumer: args.consumer },
          (manager) =>
            writeEffect(
              manager,
              args.businessTable,
              args.consumer,
              messageId,
              JSON.stringify(data),
            ),
        );
        seen.push({ messageId, handled: outcome.handled, context: context.constructor.name });
        if (context instanceof RmqContext) {
          // Acked only after the inbox transaction committed (handled or duplicate).
          (context.getChannelRef() as Channel).ack(context.getMessage() as ConsumeMessage);
        }
      } catch (error) {
        errors.push(error);
        throw error;
      }
    }
  }

  @Module({
    imports: [
      InboxModule.forRoot({
        dataSource: args.dataSource,
        tableName: args.inboxTable,
        isGlobal: false,
      }),
    ],
    controllers: [OrderEventsController],
  })
  class ConsumerModule {}

  const app: INestMicroservice = await NestFactory.createMicroservice<MicroserviceOptions>(
    ConsumerModule,
    { ...args.transport, logger: false },
  );
  await app.listen();
  return { seen, errors, close: () => app.close() };
}
