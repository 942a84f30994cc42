import { Module, type DynamicModule } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { OUTBOX_HANDLERS_OPTIONS } from '../../outbox.constants';
import { LocalPublisher } from './local.publisher';
import { OutboxHandlersExplorer } from './outbox-handlers.explorer';
import {
  resolveOutboxHandlersOptions,
  type OutboxHandlersOptions,
} from './outbox-handlers.options';

/**
 * In-process delivery: provides {@link LocalPublisher}, which finds the app's
 * `@OnOutboxMessage()` handlers at bootstrap and delivers messages to them. Give it to the
 * outbox as its publisher (alone, or per topic with `routePublishers()`):
 *
 * @example
 * imports: [
 *   OutboxHandlersModule.forRoot(),
 *   OutboxModule.forRootAsync({
 *     inject: [DataSource, LocalPublisher],
 *     useFactory: (dataSource: DataSource, local: LocalPublisher) => ({ dataSource, publisher: local }),
 *   }),
 * ]
 */
@Module({})
export class OutboxHandlersModule {
  static forRoot(options: OutboxHandlersOptions = {}): DynamicModule {
    const resolved = resolveOutboxHandlersOptions(options);
    return {
      module: OutboxHandlersModule,
      global: options.isGlobal ?? true,
      imports: [DiscoveryModule],
      providers: [
        { provide: OUTBOX_HANDLERS_OPTIONS, useValue: resolved },
        OutboxHandlersExplorer,
        LocalPublisher,
      ],
      exports: [LocalPublisher],
    };
  }
}
