import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { OutboxUpkeepPort, PurgeTypes } from '../store/ports/outbox-store.port';
import type { ResolvedEventPolicy } from '../options/resolve-event-policies';
import { OUTBOX_DELIVERY_PLAN, OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { DeliveryDuties } from '../options/delivery-duties';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { IntervalWorker } from './interval-worker';

// One run deletes at most this many batches, so a huge backlog of history is spread over runs
// instead of holding the database busy.
const MAX_BATCHES_PER_RUN = 100;

/** What one cleaner run deleted. */
export interface OutboxCleanReport {
  readonly delivered: number;
  readonly dead: number;
  /**
   * With `delivery: 'external'`: rows deleted by age whatever their status (then `delivered`
   * and `dead` are 0: the module does not know which the external engine delivered).
   */
  readonly expired?: number;
  /**
   * With `claimCheck`: payloads deleted because every message that sent them by reference is
   * gone from the table (and the archive). Absent without the option.
   */
  readonly claimChecks?: number;
}

/**
 * Deletes delivered rows past their retention (and dead rows, when configured) in bounded
 * batches, or moves them to the archive with `cleaner.archive`; on a partitioned table only dead
 * rows (delivered ones go with their partition). With `delivery: 'external'` it deletes every row
 * older than `cleaner.deliveredRetentionMs`, whatever its status. `runOnce()` deletes what is
 * past retention now.
 */
@Injectable()
export class OutboxCleaner extends IntervalWorker<OutboxCleanReport> {
  constructor(
    @Inject(OUTBOX_OPTIONS) options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxUpkeepPort,
    @Inject(OUTBOX_DELIVERY_PLAN) private readonly duties: DeliveryDuties,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry?: SchedulerRegistry,
  ) {
    super(options, registry, 'cleaner', new Logger(OutboxCleaner.name));
  }

  protected async work(): Promise<OutboxCleanReport> {
    const { deliveredRetentionMs, deadRetentionMs } = this.options.cleaner;
    if (this.duties.cleansBy === 'age') {
      return { delivered: 0, dead: 0, expired: await this.purgeByAge(deliveredRetentionMs) };
    }
    // On a partitioned table delivered rows leave with their partition (the maintainer drops
    // it): deleting them row by row is the cost partitioning is there to avoid.
    const delivered =
      this.options.partitioning === null
        ? await this.purgeByPolicy('delivered', deliveredRetentionMs)
        : 0;
    const dead = await this.purgeByPolicy('dead', deadRetentionMs);
    if (this.options.claimCheck === null) return { delivered, dead };
    return { delivered, dead, claimChecks: await this.sweepClaimChecks() };
  }

  /**
   * Deletes the claim-checked payloads whose messages are all gone. A row untouched for twice
   * the lease only: a publish that recorded one is over by then (its lease ended).
   */
  private async sweepClaimChecks(): Promise<number> {
    const claimCheck = this.options.claimCheck;
    if (claimCheck === null) return 0;
    const ledger = await claimCheck.ledger.get();
    const { store } = claimCheck;
    const graceMs = 2 * this.options.dispatcher.leaseMs;
    const { batchSize } = this.options.cleaner;
    let total = 0;
    for (let i = 0; i < MAX_BATCHES_PER_RUN; i++) {
      const swept = await ledger.sweep(graceMs, batchSize, async (rows) => {
        const locations = rows.filter((r) => r.external).map((r) => r.location);
        if (locations.length === 0) return;
        if (store.delete === undefined) return;
        await store.delete(locations, AbortSignal.timeout(this.options.dispatcher.dbTimeoutMs));
      });
      total += swept.length;
      if (swept.length < batchSize) break;
    }
    if (total > 0) {
      this.logger.log(`Deleted ${total} claim-checked payload(s) whose messages are gone`);
    }
    return total;
  }

  /**
   * Purges `status` rows past their retention: each event type whose policy gives it a retention
   * of its own by that retention, every other type by the module's.
   */
  private async purgeByPolicy(
    status: 'delivered' | 'dead',
    retentionMs: number | null,
  ): Promise<number> {
    const retentionOf = (p: ResolvedEventPolicy): number | null =>
      status === 'delivered' ? p.deliveredRetentionMs : p.deadRetentionMs;
    const own = [...this.options.policies.types.values()].filter(
      (p) => retentionOf(p) !== retentionMs,
    );
    if (own.length === 0) return retentionMs === null ? 0 : this.purge(status, retentionMs);
    let total =
      retentionMs === null
        ? 0
        : await this.purge(status, retentionMs, { except: own.map((p) => p.name) });
    for (const policy of own) {
      const ms = retentionOf(policy);
      if (ms !== null) total += await this.purge(status, ms, { only: policy.name });
    }
    return total;
  }

  // The external engine never marks a row delivered: rows leave by age alone, the log (and the
  // topics) having kept them since their commit.
  private async purgeByAge(olderThanMs: number): Promise<number> {
    const { batchSize } = this.options.cleaner;
    let total = 0;
    for (let i = 0; i < MAX_BATCHES_PER_RUN; i++) {
      const deleted = await this.store.purgeByAge(olderThanMs, batchSize);
      total += deleted;
      if (deleted < batchSize) break;
    }
    if (total > 0) {
      this.logger.log(
        `Deleted ${total} message(s) past their retention (delivery is external: by age, whatever their status)`,
      );
      this.safely(() => this.options.observer.onPurged?.('delivered', total));
    }
    return total;
  }

  private async purge(
    status: 'delivered' | 'dead',
    olderThanMs: number,
    types?: PurgeTypes,
  ): Promise<number> {
    const { batchSize, archive } = this.options.cleaner;
    let total = 0;
    for (let i = 0; i < MAX_BATCHES_PER_RUN; i++) {
      const deleted =
        types === undefined
          ? await this.store.purge(status, olderThanMs, batchSize, archive)
          : await this.store.purge(status, olderThanMs, batchSize, archive, types);
      total += deleted;
      if (deleted < batchSize) break;
    }
    if (total > 0) {
      // Once per pass that removed something: the only trace of retention in the app's logs.
      this.logger.log(
        `${archive ? 'Archived' : 'Deleted'} ${total} ${status} message(s) past their retention${types !== undefined && 'only' in types ? ` (policy '${types.only}')` : ''}`,
      );
      this.safely(() => this.options.observer.onPurged?.(status, total));
    }
    return total;
  }
}
