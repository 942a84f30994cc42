import type { Provider } from '@nestjs/common';
import type { OutboxStore } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  OUTBOX_DELIVERY_PLAN,
  OUTBOX_OPTIONS,
  OUTBOX_SQL,
  OUTBOX_STORE,
} from '../../outbox.constants';
import type { DeliveryPlan } from '../../dispatch/delivery-source.provider';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { OutboxAdmin, type OutboxAdminOptions } from './outbox.admin';

/**
 * What the admin reads of the module's options, and only that: the admin refuses a key it does
 * not read, and the resolved options hold every other group of the module.
 */
export function adminOptionsOf(
  options: ResolvedOutboxOptions,
  plan: Pick<DeliveryPlan, 'claims'>,
): OutboxAdminOptions {
  const { ordering, cleaner, erasure } = options;
  return {
    tableName: options.tableName,
    schema: options.schema,
    delivery: options.delivery,
    ordering: {
      enabled: ordering.enabled,
      onDeadLetter: ordering.onDeadLetter,
      sequence: ordering.sequence,
      deadLetterExceptions: ordering.deadLetterExceptions,
    },
    policies: options.policies,
    dispatcher: { claims: plan.claims },
    cleaner: { archive: cleaner.archive },
    tenants: options.tenants,
    erasure: erasure === null ? null : { keyWrapper: erasure.keyWrapper },
  };
}

/** What the admin's factory injects, in the order `makeOutboxAdmin` takes them. */
export const OUTBOX_ADMIN_INJECT = [
  OUTBOX_SQL,
  OUTBOX_STORE,
  OUTBOX_OPTIONS,
  OUTBOX_DELIVERY_PLAN,
] as const;

/**
 * `OutboxAdmin` built from the module's store, SQL port and options, for the default instance
 * and for named ones. A factory rather than constructor injection, so that the class stays free
 * of Nest and the CLI can build it alone.
 */
export function makeOutboxAdmin(
  sql: SqlPort,
  store: OutboxStore,
  options: ResolvedOutboxOptions,
  plan: DeliveryPlan,
): OutboxAdmin {
  return new OutboxAdmin(sql, store, adminOptionsOf(options, plan));
}

export const OUTBOX_ADMIN_PROVIDER: Provider = {
  provide: OutboxAdmin,
  inject: [...OUTBOX_ADMIN_INJECT],
  useFactory: makeOutboxAdmin,
};
