import { attachClaimCheckLedger, withClaimCheckPublisher } from './module/claim-check.wiring';
import { Logger, Module, type DynamicModule, type Provider } from '@nestjs/common';
import { DiscoveryModule, DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import { DeadLetterFallbacks } from './dispatch/fallback/dead-letter-fallbacks';
import type { DeliveryPlan } from './dispatch/delivery-source.provider';
import { OUTBOX_DELIVERY_PLAN_PROVIDER } from './module/delivery-plan.provider';
import { OUTBOX_ADMIN_PROVIDER } from './module/admin/outbox-admin.provider';
import { OutboxAdmin } from './module/admin/outbox.admin';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { resolveNamedDataSource } from './module/named-data-source';
import { OptionChecks } from './options/option-checks';
import {
  DEFAULT_OUTBOX_NAME,
  OUTBOX_COMMITS,
  OUTBOX_CONNECTION,
  OUTBOX_DEAD_LETTER_FALLBACKS,
  OUTBOX_DELIVERY_PLAN,
  OUTBOX_INSTANCE_NAME,
  OUTBOX_OPTIONS,
  OUTBOX_SQL,
  OUTBOX_STORE,
} from './outbox.constants';
import {
  ConfigurableOutboxModule,
  OUTBOX_ASYNC_OPTIONS_TYPE,
  OUTBOX_MODULE_OPTIONS,
  OUTBOX_OPTIONS_TYPE,
} from './module/outbox.module-definition';
import type { OutboxModuleOptions } from './options/outbox.options';
import { OutboxService } from './outbox.service';
import { getOutboxToken } from './module/outbox.tokens';
import {
  checkInstanceName,
  checkSoleInstance,
  namedProviders,
} from './module/outbox-instance.providers';
import { OutboxMessages } from './outbox.messages';
import {
  OUTBOX_OPTION_KEYS,
  resolveOutboxOptions,
  type ResolvedOutboxOptions,
} from './options/resolve-outbox-options';
import { createOutboxStore } from './store/create-outbox-store';
import type { OutboxStore } from './store/ports/outbox-store.port';
import type { OutboxConnection } from './store/ports/outbox-connection';
import type { SqlPort } from './store/ports/sql-port';
import { typeormConnection } from './typeorm/typeorm.connection';
import { OutboxCleaner } from './workers/outbox.cleaner';
import { CommitWatcher } from './dispatch/poll/commit-watcher';
import { OutboxDispatcher } from './dispatch/outbox.dispatcher';
import { OutboxUnlocker } from './workers/outbox.unlocker';
import { OutboxPartitionMaintainer } from './workers/outbox.partition-maintainer';
import { ShutdownHooksCheck } from './module/shutdown-hooks.check';

const WORKERS = [OutboxDispatcher, OutboxUnlocker, OutboxCleaner, OutboxPartitionMaintainer];

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

/** The instance's `@OnOutboxDeadLetter()` fallbacks, found on the app's providers. */
function deadLetterFallbacksProvider(name: string): Provider {
  return {
    provide: OUTBOX_DEAD_LETTER_FALLBACKS,
    inject: [DiscoveryService, MetadataScanner],
    useFactory: (discovery: DiscoveryService, scanner: MetadataScanner) =>
      new DeadLetterFallbacks(discovery, scanner, name),
  };
}

function coreProviders(workers: boolean, name: string): Provider[] {
  return [
    { provide: OUTBOX_INSTANCE_NAME, useValue: name },
    {
      provide: OUTBOX_OPTIONS,
      inject: [OUTBOX_MODULE_OPTIONS, ModuleRef],
      useFactory: (options: OutboxModuleOptions, moduleRef: ModuleRef) => {
        checkSoleInstance(moduleRef, name);
        const resolved = resolveOutboxOptions(options, workers, name);
        // The 0.2 spelling of the delivery mode still works for one release, said once here.
        if (resolved.deprecation !== null) new Logger('OutboxModule').warn(resolved.deprecation);
        return withClaimCheckPublisher(resolved);
      },
    },
    {
      provide: OUTBOX_CONNECTION,
      inject: [OUTBOX_OPTIONS, ModuleRef],
      useFactory: connectionOf,
    },
    {
      provide: OUTBOX_COMMITS,
      inject: [OUTBOX_CONNECTION, OUTBOX_STORE],
      useFactory: (connection: OutboxConnection<unknown>, store: OutboxStore) =>
        new CommitWatcher(connection, store),
    },
    {
      provide: OUTBOX_SQL,
      inject: [OUTBOX_CONNECTION],
      useFactory: (connection: OutboxConnection<unknown>): SqlPort => connection.sql,
    },
    {
      provide: OUTBOX_STORE,
      inject: [OUTBOX_OPTIONS, OUTBOX_CONNECTION, OUTBOX_DELIVERY_PLAN],
      useFactory: (
        options: ResolvedOutboxOptions,
        connection: OutboxConnection<unknown>,
        plan: DeliveryPlan,
      ) => {
        attachClaimCheckLedger(options, connection.sql);
        // The mode the plan decided: the store checks the table for it and builds its reads.
        const dispatcher = { ...options.dispatcher, claims: plan.claims };
        return createOutboxStore(
          connection.sql,
          { ...options, dispatcher },
          {
            enabled: workers,
            notify: plan.notifies,
            // Where the connection reports its commits, the NOTIFY leaves the app's transaction.
            afterCommit: connection.afterCommit !== undefined,
          },
        );
      },
    },
    OUTBOX_DELIVERY_PLAN_PROVIDER,
    ...(workers ? [deadLetterFallbacksProvider(name)] : []),
    ...(name === DEFAULT_OUTBOX_NAME
      ? [OutboxService, OUTBOX_ADMIN_PROVIDER, ...(workers ? WORKERS : [])]
      : namedProviders(workers, name)),
    ...(workers ? [ShutdownHooksCheck] : []),
  ];
}

/**
 * The instance's connection: the one given, or TypeORM's over the DataSource (waited for when
 * given by name). Only this path touches @nestjs/typeorm's tokens.
 */
async function connectionOf(
  options: ResolvedOutboxOptions,
  moduleRef: ModuleRef,
): Promise<OutboxConnection<unknown>> {
  if (options.connection !== undefined) return options.connection;
  const given = options.dataSource;
  // resolveOutboxOptions lets exactly one of the two through.
  if (given === undefined) throw new Error('OutboxModule: no dataSource nor connection');
  const dataSource =
    typeof given === 'string'
      ? await resolveNamedDataSource(
          moduleRef,
          given,
          (problem, fix) =>
            new OutboxOptionsError(
              OutboxMessages.optionInvalid('dataSource', problem, fix),
              'dataSource',
            ),
        )
      : given;
  return typeormConnection(dataSource);
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
      // The dispatcher finds the app's @OnOutboxDeadLetter() methods through discovery.
      imports: [...(module.imports ?? []), ...(workers ? [DiscoveryModule] : [])],
      providers: [...(module.providers ?? []), ...coreProviders(workers, name)],
      exports: [...(module.exports ?? []), ...exported],
    };
  }
}
