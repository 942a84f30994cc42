import { describeError } from '../../internal/describe-error';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import { claimWindowAfter } from '../../store/shared-sql/claim-window';
import type {
  ClaimedBatch,
  ClaimOptions,
  OutboxDeliveryPort,
} from '../../store/ports/outbox-store.port';
import { TenantShares } from './tenant-shares';
import { releaseSettlement } from '../pipeline/batch-outcome';
import { batchIdOf, type DispatcherLog } from '../dispatcher-log';
import type { DeliveryBatch } from '../pipeline/delivery-batch';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { pausedPast } from '../health/process-pause';
import { isUnusableHandle } from '../health/unusable-handle';
import type { RowLeases } from '../leases/row-leases';

/** A claimed batch with the hold of its leased rows. */
export type LeasedBatch = ClaimedBatch & DeliveryBatch;

/** A claim's result: a batch, nothing due, or only parked followers (look again at once). */
export type ClaimResult = LeasedBatch | 'idle' | 'parked' | 'in-flight';

/** What a claim uses of the pipeline: its gate, its outage pause and its watchdog. */
export type ClaimerPipeline = Pick<DeliveryPipeline, 'open' | 'pause' | 'watchdog' | 'dbCallMs'>;

/** What a claim uses of the row leases: the token, the hold, the claims whose answer was lost. */
export type ClaimerLeases = Pick<RowLeases, 'take' | 'lostLeases' | 'holdOf'>;

/** What a claim needs from the loop that asks for it. */
export interface ClaimLoopHooks {
  /** Retrying after other dispatchers' batches: the claim is likely to find few rows. */
  readonly likelyFew: () => boolean;
  /** The claim's statement has gone to the database (see `ClaimOptions.onSent`). */
  readonly sent: () => void;
}

/**
 * One claim at a time: its lease token, its window (wide after a claim that held rows back),
 * the parking of the followers it found, and the release of the rows of claims whose answer
 * was lost or came too late.
 */
export class Claimer {
  /**
   * Whether the last claim leased less than a full batch. The next claim then does not take a
   * turn among other dispatchers' claims (ClaimOptions.likelyFew): over a backlog of few keys,
   * claims that split the keys a settle freed each took a turn in front of the dispatcher
   * whose batches held them (bench P6 over 1 000 keys).
   */
  private lastClaimShort = false;
  /**
   * Whether the last claim held rows of its window back (keys in flight or blocked, rows another
   * claim held) or failed: the next claim then reads the wider window (`claimWindowAfter`), to
   * find the heads behind those rows. The first claim does too.
   */
  private lastClaimHeldBack = true;
  /** Shares each batch between tenants (`tenants.fair`), where the store can. */
  private readonly shares: TenantShares | undefined;

  constructor(
    private readonly options: ResolvedOutboxOptions,
    private readonly store: OutboxDeliveryPort,
    private readonly pipeline: ClaimerPipeline,
    private readonly leases: ClaimerLeases,
    private readonly log: DispatcherLog,
    private readonly loop: ClaimLoopHooks,
  ) {
    const fair = options.tenants?.fair ?? null;
    this.shares =
      fair !== null && TenantShares.supported(store) ? new TenantShares(fair, store) : undefined;
  }

  /** Whether claims share batches between tenants (`tenants.fair`), so a quiet lane can run. */
  get fair(): boolean {
    return this.shares !== undefined;
  }

  /** The store's claim, a tenant-fair one (`tenants.fair`), or the quiet lane's (`busy`). */
  private claimBatch(
    options: ClaimOptions & { readonly token: string },
    busy: ReadonlySet<string | null> | undefined,
  ): Promise<ClaimedBatch> {
    if (this.shares === undefined) return this.store.claim(options);
    return busy === undefined ? this.shares.claim(options) : this.shares.claimQuiet(options, busy);
  }

  /**
   * Whether a timer's drain should claim at all: one cheap read where the store offers it, so
   * that the polls of an idle dispatcher cost one statement each, not a claim's transaction
   * (bench P8).
   * A failed read answers yes: the claim then meets the outage and pauses as it does.
   */
  async anythingDue(): Promise<boolean> {
    if (this.store.hasDue === undefined) return true;
    const hasDue = this.store.hasDue.bind(this.store);
    try {
      return await this.pipeline.watchdog.run('due', hasDue);
    } catch {
      return true;
    }
  }

  /**
   * One claim, then parking of the followers it found queued behind their key's head. With
   * `busy` (the quiet lane, `tenants.fair` only): a claim of the due tenants other than those.
   */
  async claim(busy?: ReadonlySet<string | null>): Promise<ClaimResult> {
    if (busy !== undefined && this.shares === undefined) return 'idle';
    if (!this.pipeline.open) return 'idle';
    const { dispatcher } = this.options;
    if (this.leases.lostLeases.size > 0 && !(await this.releaseLostClaims())) return 'idle';
    const claimStarted = performance.now();
    let token: string;
    let fence: AbortSignal | undefined;
    let claimed: ClaimedBatch;
    try {
      ({
        token,
        fence,
        taken: claimed,
      } = await this.leases.take(
        (leaseToken) =>
          this.claimBatch(
            {
              limit: dispatcher.batchSize,
              owner: this.options.instanceId,
              leaseMs: dispatcher.leaseMs,
              // The lane's claim takes few rows: it takes no turn among full claims (PostgreSQL).
              likelyFew: busy !== undefined || this.loop.likelyFew() || this.lastClaimShort,
              window: claimWindowAfter(dispatcher.batchSize, this.lastClaimHeldBack),
              onSent: () => this.loop.sent(),
              token: leaseToken,
            },
            busy,
          ),
        // A claim given up on may still commit: hand its rows straight back with their attempt,
        // or database stalls alone could dead-letter messages that were never published.
        { onLateResult: (late) => this.releaseLate(late) },
      ));
    } catch (error) {
      this.lastClaimHeldBack = true;
      // A call answers or is given up on within dbCallMs (or twice that after a pause, see
      // DatabaseWatchdog): one that ended later lived through a pause of this process, which
      // can fail it (the server ends a transaction left idle too long) with nothing wrong.
      const paused = pausedPast(claimStarted + this.pipeline.dbCallMs);
      if (paused > 0) {
        this.log.warn(
          `This process was paused for at least ${paused} ms (its event loop did not run: a long GC, SIGSTOP, a debugger, or blocking code) during a claim, which failed meanwhile: ${describeError(error)}. Not a database outage: claiming again at the next poll (${this.log.label})`,
        );
        return 'idle';
      }
      if (isUnusableHandle(error)) {
        this.log.error(
          `Claim failed on a transaction or connection that had already ended, a fault of the SQL port rather than an outage (claims not paused): ${describeError(error)}`,
        );
      } else this.pipeline.pause(error, 'claim failed (database unavailable?)');
      return 'idle';
    }
    // A lane's claim takes a few tenants' rows: it says nothing of what the next claim finds.
    if (busy === undefined) {
      this.lastClaimShort = claimed.records.length < dispatcher.batchSize;
      this.lastClaimHeldBack =
        claimed.blockedKeys.length > 0 || claimed.inFlightKeys > 0 || (claimed.contended ?? 0) > 0;
    }
    let parked = 0;
    if (claimed.blockedKeys.length > 0) {
      try {
        parked = await this.pipeline.watchdog.run('park', () =>
          this.store.park(claimed.blockedKeys),
        );
      } catch (error) {
        // Parking only keeps claims cheap; the next claim finds those rows again.
        this.log.warn(`Parking queued messages failed: ${describeError(error)}`);
      }
    }
    // An empty claim says nothing about the broker: the outage backoff only resets when a
    // publish gets through.
    // The lease's end on this process's monotonic clock: the claim started before the database
    // wrote the lease, so this end is never later than the lease's own.
    if (claimed.records.length > 0) {
      const leaseEnd = claimStarted + dispatcher.leaseMs;
      const { records } = claimed;
      const hold = this.leases.holdOf({ token, records, leaseEnd, ...(fence && { fence }) });
      return { ...claimed, claimedAt: claimStarted, hold };
    }
    if (parked > 0) return 'parked';
    return claimed.inFlightKeys > 0 || (claimed.contended ?? 0) > 0 ? 'in-flight' : 'idle';
  }

  /**
   * Gives back the rows of claims whose answer was lost (see LostClaims), before claiming again;
   * false while the database still fails, and the claim waits as in an outage.
   */
  private async releaseLostClaims(): Promise<boolean> {
    try {
      const released = await this.leases.lostLeases.releaseEnded((token) =>
        this.pipeline.watchdog.run('release of a lost claim', () => this.store.releaseClaim(token)),
      );
      if (released > 0) {
        this.log.warn(
          `A claim committed while its answer was lost (a database connection failed); released its ${released} message(s) unpublished, their attempt given back (${this.log.label})`,
          { released, reason: 'lost-claim' },
        );
      }
      return true;
    } catch (error) {
      this.pipeline.pause(error, 'releasing a lost claim failed (database unavailable?)');
      return false;
    }
  }

  /** Gives back the rows of a claim that answered after the watchdog gave up on it. */
  private releaseLate({ token, records }: ClaimedBatch): void {
    if (records.length === 0) return;
    this.store.settle(token, releaseSettlement(records), false).then(
      (released) =>
        this.log.warn(
          `A claim answered after it was given up on; released its ${released} message(s) unpublished`,
          { batch: batchIdOf(token), released, reason: 'late-claim' },
        ),
      (error: unknown) =>
        this.log.warn(
          `Releasing the messages of a late claim failed; they return when their lease expires: ${describeError(error)}`,
        ),
    );
  }
}
