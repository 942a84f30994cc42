import { Module, type DynamicModule } from '@nestjs/common';
import { EventEmitter2 } from '@nestjs/event-emitter';
import { getOutboxToken } from '../../module/outbox.tokens';
import { OutboxService } from '../../outbox.service';
import {
  resolveOutboxBridgeOptions,
  type OutboxBridgeOptions,
} from '../bridge/outbox-bridge.options';
import { OutboxEventEmitterBridge } from './outbox-event-emitter.bridge';

/**
 * Turns `await eventEmitter.emitAsync(name, event)` of an `@OutboxEvent` inside a transaction
 * into an outbox write in that transaction (the ambient one of `@nestjs-cls/transactional`,
 * through the `ambientTransaction` option of `OutboxModule`); other emits reach their listeners
 * as before. Import it beside `EventEmitterModule.forRoot()` and `OutboxModule`; options are
 * checked here, at bootstrap.
 *
 * @example
 * imports: [EventEmitterModule.forRoot(), OutboxModule.forRootAsync({ … }), OutboxEventEmitterModule.forRoot()]
 */
@Module({})
export class OutboxEventEmitterModule {
  static forRoot(options: OutboxBridgeOptions = {}): DynamicModule {
    const resolved = resolveOutboxBridgeOptions('OutboxEventEmitterModule', options);
    return {
      module: OutboxEventEmitterModule,
      providers: [
        {
          provide: OutboxEventEmitterBridge,
          inject: [EventEmitter2, getOutboxToken(resolved.outbox, OutboxService)],
          useFactory: (emitter: EventEmitter2, outbox: OutboxService<unknown>) =>
            new OutboxEventEmitterBridge(emitter, outbox, resolved),
        },
      ],
      exports: [OutboxEventEmitterBridge],
    };
  }
}
