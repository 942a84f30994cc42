import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type { OutboxDeliveryPort } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import type { DispatcherLog } from '../dispatcher-log';
import type { WatchdogCallOptions } from '../health/database-watchdog';
import type { BatchHold } from '../pipeline/batch-hold';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { PipelineWorker } from '../pipeline/pipeline-worker';
import { LeaseHold, type LeaseHoldParts, type LeasedRows } from './lease-hold';
import { leaseRenewal } from './lease-renewal';
import { LostClaims } from './lost-claims';
import { OwnerLiveness, type OwnerLease } from './owner-liveness';

/** What the row leases use of the pipeline: its watchdog, its gate and its workers. */
export type LeasesPipeline = Pick<
  DeliveryPipeline,
  'watchdog' | 'dbCallMs' | 'addGate' | 'addWorker' | 'wakeSources' | 'notifyObserver'
>;

/** What the row leases are made of besides the pipeline. */
export interface RowLeasesParts {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxDeliveryPort;
  /** The instance's SQL port: the owner lock's session. */
  readonly sql: SqlPort | undefined;
  readonly log: DispatcherLog;
}

/**
 * The `'leases'` mode's side of delivery, shared by the sources that lease rows (the claim loop
 * and the log reader's lease by id): the token each lease writes, fenced by the owner lock
 * (`dispatcher.ownerLock`) with its heartbeat and takeover look, the holds of leased batches
 * (renewed while they publish, settled by token), and the leases whose answer was lost. Made
 * once per pipeline by the mode's source factory; it adds its gate (the table's mode lock) and
 * its worker (the owner lock) to the pipeline, which knows neither.
 */
export class RowLeases implements PipelineWorker {
  /**
   * Leases and claims whose answer was lost: given back by token before the claim loop claims
   * again, whichever source made them.
   */
  readonly lostLeases = new LostClaims();
  private readonly liveness: OwnerLiveness;
  private readonly holdParts: LeaseHoldParts;

  constructor(
    private readonly pipeline: LeasesPipeline,
    private readonly parts: RowLeasesParts,
  ) {
    const { options, store, sql, log } = parts;
    this.liveness = new OwnerLiveness(
      options.dispatcher.ownerLock ? sql : undefined,
      store,
      log,
      () => pipeline.wakeSources(),
    );
    this.holdParts = {
      store,
      renewal: leaseRenewal(
        options,
        store,
        pipeline.watchdog,
        pipeline.dbCallMs,
        log,
        (reason, n) => pipeline.notifyObserver((observer) => observer.onLeaseLost?.(n, reason)),
      ),
      ownerHolds: (fence) => this.liveness.holds(fence),
      deleteDelivered: options.cleaner.deliveredRetentionMs === 0,
      dbCallMs: pipeline.dbCallMs,
    };
    // Not while the other delivery mode works the table (the owner lock's mode gate).
    pipeline.addGate(() => this.liveness.delivers);
    pipeline.addWorker(this);
  }

  /** The lease token to write, fenced by the owner lock when it is held. */
  lease(): OwnerLease {
    return this.liveness.lease();
  }

  /**
   * One lease's statement (the claim loop's claim, the log reader's lease by id) under a new
   * token, through the watchdog: answers the token, its fence and what the statement answered.
   * One that fails or is given up on may still commit, its answer lost with the connection: its
   * rows are given back by token (`lostLeases`), their attempt with them, before the next
   * claim; the error is thrown on for the caller to judge.
   */
  async take<T>(
    lease: (token: string) => Promise<T>,
    options?: WatchdogCallOptions<T>,
  ): Promise<OwnerLease & { readonly taken: T }> {
    const { token, fence } = this.lease();
    let call: Promise<T> | undefined;
    try {
      const taken = await this.pipeline.watchdog.run('claim', () => (call = lease(token)), options);
      return { token, ...(fence && { fence }), taken };
    } catch (error) {
      this.lostLease(token, call);
      throw error;
    }
  }

  /**
   * A lease or claim that failed or was given up on while `call` may still commit: its rows are
   * given back by token, their attempt with them, before the claim loop's next claim.
   */
  lostLease(token: string, call: Promise<unknown> | undefined): void {
    this.lostLeases.add(token, call, this.parts.options.dispatcher.leaseMs);
  }

  /** What holds a batch of rows leased under a token, for the pipeline to deliver it under. */
  holdOf(leased: LeasedRows): BatchHold {
    return new LeaseHold(this.holdParts, leased);
  }

  /** Takes the owner lock, when the port and options allow, and starts watching for takeovers. */
  start(): Promise<void> {
    return this.liveness.start();
  }

  stopWatching(): void {
    this.liveness.stopWatching();
  }

  /** Gives up the owner lock: the pipeline calls it once no batch publishes under it. */
  stop(): Promise<void> {
    return this.liveness.stop();
  }
}
