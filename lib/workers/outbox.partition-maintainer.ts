import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { OUTBOX_OPTIONS, OUTBOX_SQL, OUTBOX_STORE } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import type { OutboxPartitionsReport } from '../store/ports/outbox-partitions.port';
import { outboxPartitions, promoteAfterDrop } from '../store/partitions/outbox-partitions';
import type { OutboxUpkeepPort } from '../store/ports/outbox-store.port';
import type { SqlPort } from '../store/ports/sql-port';
import { IntervalWorker } from './interval-worker';

/**
 * Keeps a partitioned outbox table (`partitioning` option): creates the next
 * `partitioning.premake` partitions ahead, and drops the partitions past
 * `partitioning.retention` whose every row is final, then promotes the next message of each key
 * whose dead head went with a dropped partition. One instance at a time (the others skip
 * their run); a table it does not recognise is never touched. Without the option it does
 * nothing. Runs at start, then every `partitioning.maintainIntervalMs`; `runOnce()` resolves to
 * what the run did.
 */
@Injectable()
export class OutboxPartitionMaintainer extends IntervalWorker<OutboxPartitionsReport> {
  constructor(
    @Inject(OUTBOX_OPTIONS) options: ResolvedOutboxOptions,
    @Inject(OUTBOX_SQL) private readonly sql: SqlPort,
    @Inject(OUTBOX_STORE) private readonly store: OutboxUpkeepPort,
    // The app's, when it imported ScheduleModule.forRoot(); the outbox never imports one.
    @Optional() @Inject(SchedulerRegistry) registry?: SchedulerRegistry,
  ) {
    super(options, registry, 'partitions', new Logger(OutboxPartitionMaintainer.name));
  }

  protected override intervalMs(): number | null {
    return this.options.partitioning?.maintainIntervalMs ?? null;
  }

  /**
   * An app stopped for longer than `premake` intervals comes back with no partition ahead: its
   * rows would go to the catch-all (whose rows then stop that period's partition from being made
   * on PostgreSQL) for up to an hour, the default interval, had the first run waited for it.
   */
  protected override runsAtStart(): boolean {
    return true;
  }

  protected async work(): Promise<OutboxPartitionsReport> {
    const partitioning = this.options.partitioning;
    if (partitioning === null) {
      return {
        dryRun: false,
        skipped: 'partitioning is off',
        created: [],
        dropped: [],
        kept: [],
        notCreated: [],
      };
    }
    const { tableName, schema } = this.options;
    const report = await outboxPartitions(this.sql, { tableName, schema }).maintain(
      {
        premake: partitioning.premake,
        retentionMs: partitioning.retentionMs,
        deadRetentionMs: this.options.cleaner.deadRetentionMs,
      },
      false,
    );
    if (report.skipped !== null)
      this.logger.log(`Partition maintenance skipped: ${report.skipped}`);
    if (report.created.length > 0)
      this.logger.log(`Created partitions ${report.created.join(', ')}`);
    if (report.dropped.length > 0)
      this.logger.log(`Dropped partitions ${report.dropped.join(', ')}`);
    const promoted = await promoteAfterDrop(this.store, report);
    if (promoted > 0)
      this.logger.log(`Promoted ${promoted} waiting message(s) whose dead head was dropped`);
    for (const { name, reason } of report.notCreated) {
      this.logger.warn(`Could not create partition ${name}: ${reason}`);
    }
    for (const { name, reason } of report.kept) {
      this.logger.log(`Kept partition ${name} past its retention: it ${reason}`);
    }
    return report;
  }
}
