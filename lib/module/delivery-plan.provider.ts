import { Logger, type Provider } from '@nestjs/common';
import { planDelivery } from '../dispatch/delivery-source.provider';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { OUTBOX_CONNECTION, OUTBOX_DELIVERY_PLAN, OUTBOX_OPTIONS } from '../outbox.constants';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import { decideClaims } from './delivery-claims';

/**
 * The instance's plan, made once at bootstrap (see `planDelivery`), with the way its
 * dispatchers share the table decided first (`decideClaims`: a mode left out is the table's).
 */
export const OUTBOX_DELIVERY_PLAN_PROVIDER: Provider = {
  provide: OUTBOX_DELIVERY_PLAN,
  inject: [OUTBOX_OPTIONS, OUTBOX_CONNECTION],
  useFactory: async (options: ResolvedOutboxOptions, connection: OutboxConnection<unknown>) =>
    planDelivery(options, await decideClaims(options, connection.sql, new Logger('OutboxModule'))),
};
