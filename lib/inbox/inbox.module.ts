import { Module, type DynamicModule, type FactoryProvider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import { resolveNamedDataSource } from '../module/named-data-source';
import { InboxMessages } from './inbox.messages';
import {
  ConfigurableInboxModule,
  INBOX_ASYNC_OPTIONS_TYPE,
  INBOX_MODULE_OPTIONS,
  INBOX_OPTIONS_TYPE,
} from './inbox.module-definition';
import type { InboxModuleOptions } from './inbox.options';
import { InboxService } from './inbox.service';
import { refuseUnknownInboxModuleOptions } from './inbox-option-keys';

/** The token of a DataSource given by name; refuses an empty name. */
function namedDataSourceToken(name: string): string | typeof DataSource {
  if (name.trim() === '') {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        'dataSource',
        'the name is empty',
        'Pass the DataSource, or the name it was registered under with @nestjs/typeorm.',
      ),
      'dataSource',
    );
  }
  // Loaded only for a DataSource (by name, or the default one): it loads TypeORM, which an app
  // whose inbox runs on a connection need not have installed.
  type Tokens = typeof import('../module/data-source-token');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const tokens = require('../module/data-source-token') as Tokens;
  return tokens.dataSourceToken(name);
}

function createService(
  options: InboxModuleOptions,
  source: DataSource | OutboxConnection<unknown>,
): InboxService {
  return new InboxService(source, {
    tableName: options.tableName,
    schema: options.schema,
    sequence: options.sequence,
  });
}

/** The connection to build on, when the options give one (and not a DataSource too). */
function connectionOf(options: InboxModuleOptions): OutboxConnection<unknown> | undefined {
  if (options.connection === undefined) return undefined;
  if (options.dataSource !== undefined) {
    throw new OutboxOptionsError(InboxMessages.dataSourceAndConnection(), 'connection');
  }
  return options.connection;
}

/**
 * Provides `InboxService` for consumers. Optional: `new Inbox(dataSource, options)` works
 * without Nest. `forRoot(options)` or `forRootAsync({ imports, inject, useFactory })`; the extra
 * `isGlobal` (default true) is given beside the factory.
 */
@Module({})
export class InboxModule extends ConfigurableInboxModule {
  static forRoot(options: typeof INBOX_OPTIONS_TYPE = {}): DynamicModule {
    refuseUnknownInboxModuleOptions('InboxModule.forRoot()', options);
    const connection = connectionOf(options);
    if (connection !== undefined) {
      return InboxModule.withService(super.forRoot(options), {
        provide: InboxService,
        inject: [INBOX_MODULE_OPTIONS],
        useFactory: (resolved: InboxModuleOptions) => createService(resolved, connection),
      });
    }
    const { dataSource = 'default' } = options;
    // A DataSource given by name is injected by its token, so Nest creates it first (and says
    // clearly when it is not registered).
    const provider: FactoryProvider<InboxService> =
      typeof dataSource === 'string'
        ? {
            provide: InboxService,
            inject: [INBOX_MODULE_OPTIONS, namedDataSourceToken(dataSource)],
            useFactory: createService,
          }
        : {
            provide: InboxService,
            inject: [INBOX_MODULE_OPTIONS],
            useFactory: (resolved: InboxModuleOptions) => createService(resolved, dataSource),
          };
    return InboxModule.withService(super.forRoot(options), provider);
  }

  static forRootAsync(options: typeof INBOX_ASYNC_OPTIONS_TYPE): DynamicModule {
    return InboxModule.withService(super.forRootAsync(options), {
      provide: InboxService,
      inject: [INBOX_MODULE_OPTIONS, ModuleRef],
      useFactory: async (resolved: InboxModuleOptions, moduleRef: ModuleRef) => {
        refuseUnknownInboxModuleOptions('InboxModule.forRootAsync() factory', resolved);
        const connection = connectionOf(resolved);
        if (connection !== undefined) return createService(resolved, connection);
        const { dataSource = 'default' } = resolved;
        if (typeof dataSource !== 'string') return createService(resolved, dataSource);
        // Known only once the factory ran, so taken through the injector rather than injected.
        namedDataSourceToken(dataSource);
        return createService(
          resolved,
          await resolveNamedDataSource(
            moduleRef,
            dataSource,
            (problem, fix) =>
              new OutboxOptionsError(
                InboxMessages.optionInvalid('dataSource', problem, fix),
                'dataSource',
              ),
          ),
        );
      },
    });
  }

  private static withService(
    module: DynamicModule,
    provider: FactoryProvider<InboxService>,
  ): DynamicModule {
    return {
      ...module,
      providers: [...(module.providers ?? []), provider],
      exports: [...(module.exports ?? []), InboxService],
    };
  }
}
