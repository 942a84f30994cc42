import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { DataSource } from 'typeorm';
import { OUTBOX_DATA_SOURCE, OUTBOX_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import {
  ConfigurableOutboxModule,
  OUTBOX_ASYNC_OPTIONS_TYPE,
  OUTBOX_MODULE_OPTIONS,
  OUTBOX_OPTIONS_TYPE,
} from './outbox.module-definition';
import type { OutboxModuleOptions } from './outbox.options';
import { OutboxService } from './outbox.service';
import { resolveOutboxOptions, type ResolvedOutboxOptions } from './resolve-outbox-options';
import { createOutboxStore } from './store/create-outbox-store';
import { OutboxCleaner } from './workers/outbox.cleaner';
import { OutboxDispatcher } from './workers/outbox.dispatcher';
import { OutboxUnlocker } from './workers/outbox.unlocker';

const WORKERS = [OutboxDispatcher, OutboxUnlocker, OutboxCleaner];

function coreProviders(workers: boolean): Provider[] {
  return [
    {
      provide: OUTBOX_OPTIONS,
      inject: [OUTBOX_MODULE_OPTIONS],
      useFactory: (options: OutboxModuleOptions) => resolveOutboxOptions(options, workers),
    },
    {
      provide: OUTBOX_DATA_SOURCE,
      inject: [OUTBOX_OPTIONS, ModuleRef],
      useFactory: (options: ResolvedOutboxOptions, moduleRef: ModuleRef): DataSource => {
        if (typeof options.dataSource !== 'string') return options.dataSource;
        // The tokens @nestjs/typeorm registers DataSources under (getDataSourceToken).
        const token =
          options.dataSource === 'default' ? DataSource : `${options.dataSource}DataSource`;
        return moduleRef.get<DataSource>(token, { strict: false });
      },
    },
    {
      provide: OUTBOX_STORE,
      inject: [OUTBOX_OPTIONS, OUTBOX_DATA_SOURCE],
      useFactory: (options: ResolvedOutboxOptions, dataSource: DataSource) =>
        createOutboxStore(dataSource, options, {
          enabled: workers,
          notify: options.dispatcher.listen,
        }),
    },
    OutboxService,
    ...(workers ? WORKERS : []),
  ];
}

/**
 * The transactional outbox. `forRoot()` / `forRootAsync()` take {@link OutboxModuleOptions};
 * the extras `isGlobal` (default true) and `workers` (default true) decide which providers exist.
 */
@Module({})
export class OutboxModule extends ConfigurableOutboxModule {
  static forRoot(options: typeof OUTBOX_OPTIONS_TYPE): DynamicModule {
    return OutboxModule.withProviders(super.forRoot(options), options.workers ?? true);
  }

  static forRootAsync(options: typeof OUTBOX_ASYNC_OPTIONS_TYPE): DynamicModule {
    return OutboxModule.withProviders(super.forRootAsync(options), options.workers ?? true);
  }

  private static withProviders(module: DynamicModule, workers: boolean): DynamicModule {
    const exported = [OutboxService, OUTBOX_STORE, ...(workers ? WORKERS : [])];
    return {
      ...module,
      imports: [...(module.imports ?? []), ...(workers ? [ScheduleModule.forRoot()] : [])],
      providers: [...(module.providers ?? []), ...coreProviders(workers)],
      exports: [...(module.exports ?? []), ...exported],
    };
  }
}
