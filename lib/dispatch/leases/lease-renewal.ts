import { describeError } from '../../internal/describe-error';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type { ClaimedRecord, OutboxDeliveryPort } from '../../store/ports/outbox-store.port';
import { batchIdOf, type DispatcherLog } from '../dispatcher-log';
import type { DatabaseWatchdog } from '../health/database-watchdog';

/** What renewing a batch's lease needs of the pipeline. */
export interface LeaseRenewalParts {
  /**
   * One fenced renewal (`OutboxStore.renewLease`, run under the watchdog): how many of the
   * batch's rows still held its token and were renewed.
   */
  readonly renew: (ids: readonly string[], token: string, leaseMs: number) => Promise<number>;
  readonly leaseMs: number;
  /** How long after the last renewal was sent (or the lease began) the next is sent. */
  readonly intervalMs: number;
  /** The longest one database call may take: the settle's room at the end of the lease. */
  readonly dbCallMs: number;
  readonly log: DispatcherLog;
  /** Called once when the lease is lost (for the observer). */
  readonly onLost?: (reason: string, rows: number) => void;
  /** The monotonic clock. @default performance.now */
  readonly now?: () => number;
}

/** After a renewal that failed, the next try comes this much later (or sooner: the interval). */
const RETRY_AFTER_FAILURE_MS = 250;

/**
 * The lease of one batch while it publishes (docs/delivery.md, "Lease renewal"). Every
 * `intervalMs` it renews the batch's rows with one statement fenced by the batch's token; the
 * lease's end on this process's clock moves only by a renewal that succeeded, to `leaseMs` after
 * the renewal was *sent* (the database wrote its end after that, on its own clock, so this end is
 * never later than the database's). The publish may run until one database call before that end
 * (`publishBy`); past it without a renewal, or when a renewal finds fewer rows than the batch
 * (another dispatcher took them over after the lease expired, or they were released), the lease
 * is lost: `fence` aborts, the publish stops, and the settle is refused by the token as for any
 * lapsed lease. A batch settled before the first interval sends no renewal.
 */
export class BatchLease {
  private end: number;
  private readonly lost = new AbortController();
  private renewTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly now: () => number;
  private readonly onOwnerLost = (): void => this.lose('the owner lock was lost');

  constructor(
    private readonly parts: LeaseRenewalParts,
    private readonly token: string,
    private readonly ids: readonly string[],
    /** The lease's end as the claim left it (monotonic). */
    leaseEnd: number,
    /** The owner lock's fence: losing it ends the lease too, and renewals with it. */
    private readonly ownerFence?: AbortSignal,
    /** The owner lock's validity read on the clock (OwnerLiveness.holds). */
    private readonly ownerHolds?: () => boolean,
  ) {
    this.now = parts.now ?? (() => performance.now());
    this.end = leaseEnd;
    if (ownerFence?.aborted === true) this.lose('the owner lock was lost');
    else ownerFence?.addEventListener('abort', this.onOwnerLost, { once: true });
    // The first renewal comes an interval after the lease began (its end less leaseMs).
    if (!this.lost.signal.aborted) {
      this.armRenewal(leaseEnd - parts.leaseMs + parts.intervalMs);
      this.armExpiry();
    }
  }

  /** The lease's end on this process's clock, as the last successful renewal left it. */
  get leaseEnd(): number {
    return this.end;
  }

  /** Past this, nothing more may be published: the settle needs one database call. */
  get publishBy(): number {
    return this.end - this.parts.dbCallMs;
  }

  /** Aborted once the lease is lost (or the owner lock it was taken under). */
  get fence(): AbortSignal {
    return this.lost.signal;
  }

  /**
   * Whether the lease still holds, read on the clock: a timer cannot fire while the process is
   * paused, so a publisher reads this before every send; past `publishBy` it loses the lease.
   */
  holds(): boolean {
    // Once stopped, the publish is over: a call still running sends nothing more under it.
    if (this.stopped || this.lost.signal.aborted) return false;
    // A lock found overdue is dropped, which aborts its fence and so this lease.
    if (this.ownerHolds?.() === false) {
      this.lose('the owner lock was lost');
      return false;
    }
    if (this.now() < this.publishBy) return true;
    this.lose('its end came without a renewal');
    return false;
  }

  /**
   * Ends renewing (the publish is over): no renewal is sent after this. One already sent is not
   * waited for: landing after the settle, it changes nothing (the settle cleared the token or
   * the row is no longer pending), and waiting would eat into the settle's time.
   */
  stop(): void {
    this.stopped = true;
    this.clearTimers();
    this.ownerFence?.removeEventListener('abort', this.onOwnerLost);
  }

  private armRenewal(at: number): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, at - this.now()));
  }

  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(() => this.holds(), Math.max(0, this.publishBy - this.now()));
  }

  private async renew(): Promise<void> {
    // Read on the clock first: woken from a pause past the lease's end, it is lost, not renewed.
    if (this.stopped || !this.holds()) return;
    const { leaseMs, intervalMs, log } = this.parts;
    const sentAt = this.now();
    let renewed: number;
    try {
      renewed = await this.parts.renew(this.ids, this.token, leaseMs);
    } catch (error) {
      if (this.stopped || this.lost.signal.aborted) return;
      log.warn(
        `Renewing the lease of a batch still publishing failed (${describeError(error)}); trying again until its lease ends`,
        { batch: batchIdOf(this.token) },
      );
      this.armRenewal(this.now() + Math.min(RETRY_AFTER_FAILURE_MS, intervalMs));
      return;
    }
    // Answered after the publish ended: the settle may have cleared the rows' lease already.
    if (this.stopped || this.lost.signal.aborted) return;
    if (renewed < this.ids.length) {
      this.lose(
        `${this.ids.length - renewed} of its ${this.ids.length} message(s) no longer hold its lease (taken over after it expired, or released)`,
      );
      return;
    }
    // Measured from the send: the database wrote its end later than that, never earlier.
    this.end = Math.max(this.end, sentAt + leaseMs);
    if (!this.holds()) return;
    log.debug(`Renewed the lease of ${renewed} message(s) still publishing`, {
      batch: batchIdOf(this.token),
    });
    this.armExpiry();
    this.armRenewal(sentAt + intervalMs);
  }

  private lose(reason: string): void {
    if (this.lost.signal.aborted) return;
    this.clearTimers();
    this.ownerFence?.removeEventListener('abort', this.onOwnerLost);
    const ownerLost = this.ownerFence?.aborted === true;
    // The owner lock's loss is logged where it is found (OwnerLiveness).
    if (!ownerLost) {
      this.parts.log.warn(
        `Lost the lease of a batch still publishing: ${reason}. Its publish stops, and its outcome is not recorded over another dispatcher's`,
        { batch: batchIdOf(this.token), messages: this.ids.length },
      );
      this.parts.onLost?.(reason, this.ids.length);
    }
    this.lost.abort(ownerLost ? this.ownerFence?.reason : new Error(`lease lost: ${reason}`));
  }

  private clearTimers(): void {
    clearTimeout(this.renewTimer);
    clearTimeout(this.expiryTimer);
    this.renewTimer = undefined;
    this.expiryTimer = undefined;
  }
}

/** Starts renewing the lease of a batch about to publish. */
export type BeginLease = (
  token: string,
  records: readonly ClaimedRecord[],
  leaseEnd: number,
  ownerFence: AbortSignal | undefined,
  ownerHolds?: () => boolean,
) => BatchLease;

/**
 * The pipeline's lease renewal: undefined when `dispatcher.leaseRenewal` is off, the store
 * cannot renew, or no renewal could land in time (then a lease ends after `leaseMs`, as it
 * always did).
 */
export function leaseRenewal(
  options: ResolvedOutboxOptions,
  store: OutboxDeliveryPort,
  watchdog: DatabaseWatchdog,
  dbCallMs: number,
  log: DispatcherLog,
  onLost: (reason: string, rows: number) => void,
): BeginLease | undefined {
  const { leaseRenewal: renewal, leaseMs } = options.dispatcher;
  const renewLease = store.renewLease?.bind(store);
  if (renewal === false || renewLease === undefined) return undefined;
  // No renewal could land before the lease's end less one call: the options then hold the
  // publish and the settle in the lease (checked at bootstrap), and it stays unrenewed, its
  // publish cut at that end as always (a publish that hangs counts its attempt).
  if (renewal.intervalMs + dbCallMs >= leaseMs) return undefined;
  const parts: LeaseRenewalParts = {
    // Even while another call is stalled, as a settle: a publish in flight depends on it.
    renew: (ids, token, ms) =>
      watchdog.run('lease renewal', () => renewLease(ids, token, ms), { evenWhileStalled: true }),
    leaseMs,
    intervalMs: renewal.intervalMs,
    dbCallMs,
    log,
    onLost,
  };
  return (token, records, leaseEnd, ownerFence, ownerHolds) =>
    new BatchLease(
      parts,
      token,
      records.map((r) => r.id),
      leaseEnd,
      ownerFence,
      ownerHolds,
    );
}
