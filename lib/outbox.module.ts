import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { DataSource } from 'typeorm';
import { OUTBOX_ADMIN_PROVIDER } from './admin/outbox-admin.provider';
import { OutboxAdmin } from './admin/outbox.admin';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { resolveNamedDataSource } from './internal/named-data-source';
import { OptionChecks } from './internal/option-checks';
import { OUTBOX_DATA_SOURCE, OUTBOX_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import {
  ConfigurableOutboxModule,
  OUTBOX_ASYNC_OPTIONS_TYPE,
  OUTBOX_MODULE_OPTIONS,
  OUTBOX_OPTIONS_TYPE,
} from './outbox.module-definition';
import type { OutboxModuleOptions } from './outbox.options';
import { OutboxService } from './outbox.service';
import { OutboxMessages } from './outbox.messages';
import {
  OUTBOX_OPTION_KEYS,
  resolveOutboxOptions,
  type ResolvedOutboxOptions,
} from './resolve-outbox-options';
import { createOutboxStore } from './store/create-outbox-store';
import { OutboxCleaner } from './workers/outbox.cleaner';
import { OutboxDispatcher } from './workers/outbox.dispatcher';
import { OutboxUnlocker } from './workers/outbox.unlocker';
import { ShutdownHooksCheck } from './workers/shutdown-hooks.check';

const WORKERS = [OutboxDispatcher, OutboxUnlocker, OutboxCleaner];

const ASYNC_OPTION_KEYS = {
  imports: true,
  inject: true,
  useFactory: true,
  useClass: true,
  useExisting: true,
  provideInjectionTokensFrom: true,
  isGlobal: true,
  workers: true,
} satisfies Record<keyof typeof OUTBOX_ASYNC_OPTIONS_TYPE, true>;

const asyncChecks = new OptionChecks('OutboxModule.forRootAsync()');

/**
 * Rejects unknown keys beside the factory when the module is defined: a module option given
 * there (`dataSource`, `retry` …) or a misspelt `workers` would otherwise be silently ignored.
 */
function checkAsyncOptions(options: object): void {
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(ASYNC_OPTION_KEYS, key) && Object.hasOwn(OUTBOX_OPTION_KEYS[''], key)) {
      throw new OutboxOptionsError(OutboxMessages.moduleOptionBesideFactory(key), key);
    }
  }
  asyncChecks.knownKeys(options, { '': ASYNC_OPTION_KEYS });
}

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
      useFactory: (options: ResolvedOutboxOptions, moduleRef: ModuleRef): Promise<DataSource> =>
        typeof options.dataSource === 'string'
          ? resolveNamedDataSource(
              moduleRef,
              options.dataSource,
              (problem, fix) =>
                new OutboxOptionsError(
                  OutboxMessages.optionInvalid('dataSource', problem, fix),
                  'dataSource',
                ),
            )
          : Promise.resolve(options.dataSource),
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
    OUTBOX_ADMIN_PROVIDER,
    ...(workers ? [...WORKERS, ShutdownHooksCheck] : []),
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
    checkAsyncOptions(options);
    return OutboxModule.withProviders(super.forRootAsync(options), options.workers ?? true);
  }

  private static withProviders(module: DynamicModule, workers: boolean): DynamicModule {
    const exported = [OutboxService, OutboxAdmin, OUTBOX_STORE, ...(workers ? WORKERS : [])];
    return {
      ...module,
      providers: [...(module.providers ?? []), ...coreProviders(workers)],
      exports: [...(module.exports ?? []), ...exported],
    };
  }
}
