import { Module, type DynamicModule } from '@nestjs/common';
import { EventBus } from '@nestjs/cqrs';
import { getOutboxToken } from '../../module/outbox.tokens';
import { OutboxService } from '../../outbox.service';
import {
  resolveOutboxBridgeOptions,
  type OutboxBridgeOptions,
} from '../bridge/outbox-bridge.options';
import { OutboxEventBusBridge } from './outbox-event-bus.bridge';

/**
 * Turns `EventBus.publish()` / `publishAll()` of an `@OutboxEvent` inside a transaction into an
 * outbox write in that transaction (the ambient one of `@nestjs-cls/transactional`, through the
 * `ambientTransaction` option of `OutboxModule`); other events reach their handlers as before.
 * Import it beside `CqrsModule.forRoot()` and `OutboxModule`; options are checked here, at
 * bootstrap.
 *
 * @example
 * imports: [CqrsModule.forRoot(), OutboxModule.forRootAsync({ … }), OutboxCqrsModule.forRoot()]
 */
@Module({})
export class OutboxCqrsModule {
  static forRoot(options: OutboxBridgeOptions = {}): DynamicModule {
    const resolved = resolveOutboxBridgeOptions('OutboxCqrsModule', options);
    return {
      module: OutboxCqrsModule,
      providers: [
        {
          provide: OutboxEventBusBridge,
          inject: [EventBus, getOutboxToken(resolved.outbox, OutboxService)],
          useFactory: (eventBus: EventBus, outbox: OutboxService<unknown>) =>
            new OutboxEventBusBridge(eventBus, outbox, resolved),
        },
      ],
      exports: [OutboxEventBusBridge],
    };
  }
}
