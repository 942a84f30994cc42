import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import type { OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_ADMIN_PROVIDER } from './admin/outbox-admin.provider';
import { OutboxAdmin } from './admin/outbox.admin';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { resolveNamedDataSource } from './internal/named-data-source';
import { OptionChecks } from './internal/option-checks';
import {
  DEFAULT_OUTBOX_NAME,
  OUTBOX_DATA_SOURCE,
  OUTBOX_INSTANCE_NAME,
  OUTBOX_OPTIONS,
  OUTBOX_STORE,
} from './outbox.constants';
import {
  ConfigurableOutboxModule,
  OUTBOX_ASYNC_OPTIONS_TYPE,
  OUTBOX_MODULE_OPTIONS,
  OUTBOX_OPTIONS_TYPE,
} from './outbox.module-definition';
import type { OutboxModuleOptions } from './outbox.options';
import { OutboxService } from './outbox.service';
import { getOutboxToken, type OutboxProviderType } from './outbox.tokens';
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
  name: true,
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

// Letters, digits, '_' and '-': the name becomes part of injection tokens and timer names.
const INSTANCE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

function checkInstanceName(name: unknown): string {
  if (name === undefined) return DEFAULT_OUTBOX_NAME;
  if (typeof name !== 'string' || !INSTANCE_NAME.test(name)) {
    throw new OutboxOptionsError(
      OutboxMessages.optionInvalid(
        'name',
        `${JSON.stringify(name)} is not a valid instance name`,
        "Use 1 to 64 letters, digits, '_' or '-', or leave it out for the default instance.",
      ),
      'name',
    );
  }
  return name;
}

/**
 * Refuses a second instance under the same name: both would register the same tokens, and the
 * app would silently use whichever Nest resolved last. Every instance provides its name under
 * `OUTBOX_INSTANCE_NAME`; value providers exist before any factory runs, so all are seen here.
 */
function checkSoleInstance(moduleRef: ModuleRef, name: string): void {
  const found: unknown = moduleRef.get(OUTBOX_INSTANCE_NAME, { strict: false, each: true });
  const names = Array.isArray(found) ? found : [found];
  if (names.filter((other) => other === name).length > 1) {
    throw new OutboxOptionsError(OutboxMessages.duplicateInstance(name), 'name');
  }
}

function coreProviders(workers: boolean, name: string): Provider[] {
  return [
    { provide: OUTBOX_INSTANCE_NAME, useValue: name },
    {
      provide: OUTBOX_OPTIONS,
      inject: [OUTBOX_MODULE_OPTIONS, ModuleRef],
      useFactory: (options: OutboxModuleOptions, moduleRef: ModuleRef) => {
        checkSoleInstance(moduleRef, name);
        return resolveOutboxOptions(options, workers, name);
      },
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
    ...(name === DEFAULT_OUTBOX_NAME
      ? [OutboxService, OUTBOX_ADMIN_PROVIDER, ...(workers ? WORKERS : [])]
      : namedProviders(workers, name)),
    ...(workers ? [ShutdownHooksCheck] : []),
  ];
}

/**
 * The providers of a named instance, under `getOutboxToken(name, Class)` only: under their
 * classes too, `app.get(OutboxService)` (which Nest answers with the provider registered last,
 * in whatever module) could return a named instance instead of the default one. Factories,
 * because their dependencies are the instance's own tokens, not the classes.
 */
function namedProviders(workers: boolean, name: string): Provider[] {
  const token = (type: OutboxProviderType) => getOutboxToken(name, type);
  const registry = { token: SchedulerRegistry, optional: true };
  const core: Provider[] = [
    {
      provide: token(OutboxService),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, OUTBOX_DATA_SOURCE],
      useFactory: (options: ResolvedOutboxOptions, store: OutboxStore, dataSource: DataSource) =>
        new OutboxService(options, store, dataSource),
    },
    {
      provide: token(OutboxAdmin),
      inject: [OUTBOX_DATA_SOURCE, OUTBOX_STORE, OUTBOX_OPTIONS],
      useFactory: (dataSource: DataSource, store: OutboxStore, options: ResolvedOutboxOptions) =>
        new OutboxAdmin(dataSource, store, options),
    },
  ];
  if (!workers) return core;
  return [
    ...core,
    {
      provide: token(OutboxDispatcher),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, registry, token(OutboxService)],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        scheduler: SchedulerRegistry | undefined,
        service: OutboxService,
      ) => new OutboxDispatcher(options, store, scheduler, service),
    },
    {
      provide: token(OutboxUnlocker),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, registry],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        scheduler: SchedulerRegistry | undefined,
      ) => new OutboxUnlocker(options, store, scheduler),
    },
    {
      provide: token(OutboxCleaner),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, registry],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        scheduler: SchedulerRegistry | undefined,
      ) => new OutboxCleaner(options, store, scheduler),
    },
  ];
}

/**
 * The transactional outbox. `forRoot()` / `forRootAsync()` take {@link OutboxModuleOptions};
 * the extras `isGlobal` (default true), `workers` (default true) and `name` (default
 * `'default'`) decide which providers exist and under which tokens.
 *
 * Each instance has its own table, publisher, dispatcher and timers. The default instance
 * exports `OutboxService`, `OutboxAdmin` and the workers under their classes; a named one under
 * `getOutboxToken(name, Class)`, which `@InjectOutbox(name)` and `@InjectOutboxAdmin(name)`
 * inject. Two instances under one name fail the app start.
 */
@Module({})
export class OutboxModule extends ConfigurableOutboxModule {
  static forRoot(options: typeof OUTBOX_OPTIONS_TYPE): DynamicModule {
    return OutboxModule.withProviders(
      super.forRoot(options),
      options.workers ?? true,
      checkInstanceName(options.name),
    );
  }

  static forRootAsync(options: typeof OUTBOX_ASYNC_OPTIONS_TYPE): DynamicModule {
    checkAsyncOptions(options);
    return OutboxModule.withProviders(
      super.forRootAsync(options),
      options.workers ?? true,
      checkInstanceName(options.name),
    );
  }

  private static withProviders(
    module: DynamicModule,
    workers: boolean,
    name: string,
  ): DynamicModule {
    const types = [OutboxService, OutboxAdmin, ...(workers ? WORKERS : [])];
    const exported =
      name === DEFAULT_OUTBOX_NAME
        ? [...types, OUTBOX_STORE]
        : types.map((type) => getOutboxToken(name, type));
    return {
      ...module,
      providers: [...(module.providers ?? []), ...coreProviders(workers, name)],
      exports: [...(module.exports ?? []), ...exported],
    };
  }
}
