import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxUpkeepPort } from '../store/ports/outbox-store.port';
import { OUTBOX_DELIVERY_PLAN, OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { DeliveryDuties } from '../options/delivery-duties';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { IntervalWorker } from './interval-worker';

const ORPHANS_PER_RUN = 1_000;

/**
 * Clears the expired leases of dispatchers that crashed or stalled (claims already treat an
 * expired lease as free; the unlocker makes the table tell the truth and reports the count),
 * and promotes waiting messages left with nothing ahead of them, e.g. after
 * `ordering.onDeadLetter` or `ordering.enabled` changed between deployments. `runOnce()`
 * resolves to the number of leases released.
 */
@Injectable()
export class OutboxUnlocker extends IntervalWorker<number> {
  constructor(
    @Inject(OUTBOX_OPTIONS) options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxUpkeepPort,
    @Inject(OUTBOX_DELIVERY_PLAN) private readonly duties: DeliveryDuties,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry?: SchedulerRegistry,
  ) {
    super(options, registry, 'unlocker', new Logger(OutboxUnlocker.name));
  }

  // Where no dispatcher leases rows (see DeliveryDuties.unlocks), there is nothing to unlock.
  protected override intervalMs(): number | null {
    return this.duties.unlocks ? super.intervalMs() : null;
  }

  protected async work(): Promise<number> {
    if (!this.duties.unlocks) return 0;
    const promoted = await this.store.promoteOrphans(ORPHANS_PER_RUN);
    if (promoted > 0) {
      this.logger.warn(`Promoted ${promoted} waiting message(s) that nothing was holding back`);
    }
    const count = await this.store.releaseExpired();
    if (count > 0) {
      this.logger.warn(`Released ${count} expired lease(s) of a crashed or stalled dispatcher`);
      this.safely(() => this.options.observer.onLeasesReleased?.(count));
    }
    return count;
  }
}
