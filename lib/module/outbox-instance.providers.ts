import type { Provider } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { OutboxAdmin } from './admin/outbox.admin';
import { makeOutboxAdmin, OUTBOX_ADMIN_INJECT } from './admin/outbox-admin.provider';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { OutboxStore } from '../store/ports/outbox-store.port';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { SqlPort } from '../store/ports/sql-port';
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
} from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';
import { OutboxService } from '../outbox.service';
import { getOutboxToken, type OutboxProviderType } from './outbox.tokens';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { OutboxCleaner } from '../workers/outbox.cleaner';
import { CommitWatcher } from '../dispatch/poll/commit-watcher';
import { OutboxDispatcher } from '../dispatch/outbox.dispatcher';
import type { DeadLetterFallbackLookup } from '../dispatch/fallback/dead-letter-fallbacks';
import type { DeliveryPlan } from '../dispatch/delivery-source.provider';
import { OutboxUnlocker } from '../workers/outbox.unlocker';
import { OutboxPartitionMaintainer } from '../workers/outbox.partition-maintainer';

// What makes one OutboxModule instance distinct from another in the same app: its name, checked
// and unique, and, for a named instance, providers under tokens of its own.

// Letters, digits, '_' and '-': the name becomes part of injection tokens and timer names.
const INSTANCE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The instance name given to forRoot()/forRootAsync(), checked; 'default' when left out. */
export function checkInstanceName(name: unknown): string {
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
export function checkSoleInstance(moduleRef: ModuleRef, name: string): void {
  const found: unknown = moduleRef.get(OUTBOX_INSTANCE_NAME, { strict: false, each: true });
  const names = Array.isArray(found) ? found : [found];
  if (names.filter((other) => other === name).length > 1) {
    throw new OutboxOptionsError(OutboxMessages.duplicateInstance(name), 'name');
  }
}

/**
 * The providers of a named instance, under `getOutboxToken(name, Class)` only: under their
 * classes too, `app.get(OutboxService)` (which Nest answers with the provider registered last,
 * in whatever module) could return a named instance instead of the default one. Factories,
 * because their dependencies are the instance's own tokens, not the classes.
 */
export function namedProviders(workers: boolean, name: string): Provider[] {
  const token = (type: OutboxProviderType) => getOutboxToken(name, type);
  const registry = { token: SchedulerRegistry, optional: true };
  const core: Provider[] = [
    {
      provide: token(OutboxService),
      inject: [
        OUTBOX_OPTIONS,
        OUTBOX_STORE,
        OUTBOX_CONNECTION,
        OUTBOX_COMMITS,
        OUTBOX_DELIVERY_PLAN,
      ],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        connection: OutboxConnection<unknown>,
        commits: CommitWatcher<unknown>,
        plan: DeliveryPlan,
      ) => new OutboxService(options, store, connection, commits, plan),
    },
    { provide: token(OutboxAdmin), inject: [...OUTBOX_ADMIN_INJECT], useFactory: makeOutboxAdmin },
  ];
  if (!workers) return core;
  return [
    ...core,
    {
      provide: token(OutboxDispatcher),
      inject: [
        OUTBOX_OPTIONS,
        OUTBOX_STORE,
        registry,
        OUTBOX_COMMITS,
        OUTBOX_SQL,
        OUTBOX_DELIVERY_PLAN,
        OUTBOX_DEAD_LETTER_FALLBACKS,
      ],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        scheduler: SchedulerRegistry | undefined,
        commits: CommitWatcher<unknown>,
        sql: SqlPort,
        plan: DeliveryPlan,
        fallbacks: DeadLetterFallbackLookup,
      ) => new OutboxDispatcher(options, store, scheduler, commits, sql, plan, fallbacks),
    },
    {
      provide: token(OutboxUnlocker),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, OUTBOX_DELIVERY_PLAN, registry],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        plan: DeliveryPlan,
        scheduler: SchedulerRegistry | undefined,
      ) => new OutboxUnlocker(options, store, plan, scheduler),
    },
    {
      provide: token(OutboxCleaner),
      inject: [OUTBOX_OPTIONS, OUTBOX_STORE, OUTBOX_DELIVERY_PLAN, registry],
      useFactory: (
        options: ResolvedOutboxOptions,
        store: OutboxStore,
        plan: DeliveryPlan,
        scheduler: SchedulerRegistry | undefined,
      ) => new OutboxCleaner(options, store, plan, scheduler),
    },
    {
      provide: token(OutboxPartitionMaintainer),
      inject: [OUTBOX_OPTIONS, OUTBOX_SQL, OUTBOX_STORE, registry],
      useFactory: (
        options: ResolvedOutboxOptions,
        sql: SqlPort,
        store: OutboxStore,
        scheduler: SchedulerRegistry | undefined,
      ) => new OutboxPartitionMaintainer(options, sql, store, scheduler),
    },
  ];
}
