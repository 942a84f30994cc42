import {
  Controller,
  Module,
  type DynamicModule,
  type ModuleMetadata,
  type Provider,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getOutboxToken } from '../../module/outbox.tokens';
import { OutboxAdmin } from '../../module/admin/outbox.admin';
import {
  resolveConsoleOutbox,
  resolveConsolePath,
  type OutboxConsoleModuleExtras,
  type OutboxConsoleOptions,
} from './console.options';
import { ConsoleAccessGuard } from './console-access.guard';
import { OutboxConsoleAssetsController } from './console-assets.controller';
import { ConsoleExceptionFilter } from './console-exception.filter';
import { ConsoleRuntime } from './console.runtime';
import { OutboxConsoleController } from './outbox-console.controller';

const CONSOLE_OPTIONS = Symbol('OUTBOX_CONSOLE_OPTIONS');

/** `OutboxConsoleModule.forRootAsync()`: the options from a factory, the path and outbox beside it. */
export interface OutboxConsoleAsyncOptions
  extends OutboxConsoleModuleExtras, Pick<ModuleMetadata, 'imports'> {
  readonly inject?: readonly (
    string | symbol | (abstract new (...args: never[]) => unknown) | Provider
  )[];
  readonly useFactory: (...args: never[]) => OutboxConsoleOptions | Promise<OutboxConsoleOptions>;
}

/**
 * A web console for the outbox's operators, served by the app's own HTTP server under `path`:
 * the backlog, dead letters (filter, inspect, retry, purge), blocked keys, stuck leases and the
 * message explainer, all through `OutboxAdmin`. It refuses to start without an access check
 * (`guard` or `authorize`) unless `unsafeAllowAnonymous: true`.
 *
 * @example
 * OutboxConsoleModule.forRoot({ path: '/ops/outbox', guard: AdminGuard })
 */
@Module({})
export class OutboxConsoleModule {
  static forRoot(options: OutboxConsoleOptions & OutboxConsoleModuleExtras): DynamicModule {
    const { path, outbox, ...rest } = options;
    return OutboxConsoleModule.define({ path, outbox }, [], [], () => rest);
  }

  static forRootAsync(options: OutboxConsoleAsyncOptions): DynamicModule {
    const { path, outbox, imports = [], inject = [], useFactory } = options;
    return OutboxConsoleModule.define({ path, outbox }, imports, inject, useFactory);
  }

  private static define(
    extras: OutboxConsoleModuleExtras,
    imports: NonNullable<ModuleMetadata['imports']>,
    inject: OutboxConsoleAsyncOptions['inject'] & object,
    useFactory: OutboxConsoleAsyncOptions['useFactory'],
  ): DynamicModule {
    const path = resolveConsolePath(extras.path);
    const outbox = resolveConsoleOutbox(extras.outbox);
    // One controller class per mounted console, so that two consoles (two outboxes, two paths)
    // never share route metadata.
    @Controller(path)
    class MountedOutboxConsoleController extends OutboxConsoleController {}
    @Controller(path)
    class MountedOutboxConsoleAssetsController extends OutboxConsoleAssetsController {}
    return {
      module: OutboxConsoleModule,
      imports,
      controllers: [MountedOutboxConsoleAssetsController, MountedOutboxConsoleController],
      providers: [
        { provide: CONSOLE_OPTIONS, inject: [...inject] as never[], useFactory },
        {
          provide: ConsoleRuntime,
          inject: [getOutboxToken(outbox, OutboxAdmin), CONSOLE_OPTIONS, ModuleRef],
          useFactory: (admin: OutboxAdmin, opts: OutboxConsoleOptions, moduleRef: ModuleRef) =>
            new ConsoleRuntime(path, outbox, admin, opts, moduleRef),
        },
        ConsoleAccessGuard,
        ConsoleExceptionFilter,
      ],
    };
  }
}
