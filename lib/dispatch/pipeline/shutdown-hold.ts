import { randomUUID } from 'node:crypto';
import { describeError } from '../../internal/describe-error';
import { batchIdOf, type DispatcherLog } from '../dispatcher-log';

/** After a renewal that failed, the next try comes this much later (or sooner: the interval). */
const RETRY_AFTER_FAILURE_MS = 250;

/** What holding a batch's messages at shutdown needs of the pipeline. */
export interface ShutdownHoldParts {
  /**
   * One fenced statement (`OutboxStore.renewLease` under the watchdog): the rows `ids` still
   * leased with `token` get `leaseMs` from now, and `newToken` if given; answers how many.
   * Undefined where the store cannot renew: the lease is then left as the claim wrote it.
   */
  readonly renew:
    | ((
        ids: readonly string[],
        token: string,
        leaseMs: number,
        newToken?: string,
      ) => Promise<number>)
    | undefined;
  readonly leaseMs: number;
  /** How often the held lease is renewed while the call runs; undefined: never (no renewal). */
  readonly intervalMs: number | undefined;
  readonly log: DispatcherLog;
  /** Called when the hold's state changes (the pipeline then looks whether the owner lock is still needed). */
  readonly onChange: () => void;
  /** The monotonic clock. @default performance.now */
  readonly now?: () => number;
}

/**
 * The lease of a batch whose publish did not answer the shutdown's abort (docs/delivery.md,
 * "Graceful shutdown"). The call may still write its messages to the broker, so no other
 * dispatcher may claim them while it runs, even after this process gives up its owner lock and
 * the application closes its database: in one fenced statement the rows move to a lease token
 * of their own, a plain one that names no owner lock (so no takeover shortens it), leased for
 * `leaseMs` from now, and that lease is renewed while the call runs and the database answers.
 * When the call returns, its answer is settled under that token; if the process or its database
 * is gone by then, the lease ends on its own and the messages are claimed again (the claim's
 * attempt stays counted: the broker may have them).
 *
 * Where the statement fails, the rows keep the claim's lease, and the pipeline keeps the owner
 * lock while the call runs, so that no takeover shortens a lease that names it.
 */
export class ShutdownHold {
  private state: 'moving' | 'moved' | 'kept' | 'gone' = 'moving';
  private current: string;
  private end: number;
  private why = '';
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private failing = false;
  private readonly now: () => number;
  /** Resolves once the move answered, whichever way; never rejects. */
  readonly moved: Promise<void>;

  constructor(
    private readonly parts: ShutdownHoldParts,
    token: string,
    private readonly ids: readonly string[],
    /** The lease's end as it stands (monotonic): kept if the move fails. */
    leaseEnd: number,
  ) {
    this.now = parts.now ?? (() => performance.now());
    this.current = token;
    this.end = leaseEnd;
    this.moved = this.move();
  }

  /** The token the batch's rows are leased with now: the settle's fence. */
  get token(): string {
    return this.current;
  }

  /** The lease's end on this process's clock (monotonic), as the last statement that landed left it. */
  get leaseEnd(): number {
    return this.end;
  }

  /** Whether the rows may still carry the claim's token (the move has not landed). */
  get onClaimToken(): boolean {
    return this.state === 'moving' || this.state === 'kept';
  }

  /** For the shutdown's warning: what holds the batch's messages, and until when. */
  describe(): string {
    const unanswered = 'its publish did not answer the abort';
    const until = new Date(Date.now() + (this.end - this.now())).toISOString();
    const renewed =
      this.parts.intervalMs === undefined
        ? ''
        : ', renewed while the call runs and the database answers';
    switch (this.state) {
      case 'moving':
        return `${unanswered}; moving its lease to a token of its own`;
      case 'moved':
        return `${unanswered}; its messages stay leased until about ${until}${renewed}`;
      case 'kept':
        return `${unanswered}, and its lease could not be moved (${this.why}): it ends about ${until}, and the owner lock is kept while the call runs`;
      case 'gone':
        return `${unanswered}, and its messages had left its lease already (${this.why})`;
    }
  }

  /** The call returned and its outcome was settled (or given up on): no more renewals. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async move(): Promise<void> {
    const { renew, leaseMs } = this.parts;
    if (renew === undefined) {
      this.settle('kept', 'the store cannot renew leases');
      return;
    }
    // A version-4 token names no owner lock, so no takeover ever shortens its lease. It ends
    // as the claim's did: the batch keeps its name in log lines and the table.
    const token = `${randomUUID().slice(0, 24)}${this.current.slice(24)}`;
    const sentAt = this.now();
    try {
      const moved = await renew(this.ids, this.current, leaseMs, token);
      if (moved === 0) {
        this.settle('gone', 'taken over after its lease ended, or released');
        return;
      }
      this.current = token;
      this.end = sentAt + leaseMs;
      if (moved < this.ids.length) {
        this.parts.log.warn(
          `${this.ids.length - moved} of the ${this.ids.length} message(s) of a batch whose publish did not answer the shutdown's abort had left its lease already (taken over after it ended): they may be published twice`,
          { batch: batchIdOf(this.current) },
        );
      }
      this.settle('moved');
      this.arm(sentAt + (this.parts.intervalMs ?? 0));
    } catch (error) {
      this.settle('kept', describeError(error));
    }
  }

  private settle(state: 'moved' | 'kept' | 'gone', why = ''): void {
    this.state = state;
    this.why = why;
    this.parts.onChange();
  }

  private arm(at: number): void {
    if (this.stopped || this.parts.intervalMs === undefined) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.renew(), Math.max(0, at - this.now()));
    // Never what keeps a stopping process alive: when it ends, the lease ends on its own.
    this.timer.unref();
  }

  private async renew(): Promise<void> {
    const { renew, leaseMs, intervalMs = 0, log } = this.parts;
    if (this.stopped || renew === undefined) return;
    const sentAt = this.now();
    let renewed: number;
    try {
      renewed = await renew(this.ids, this.current, leaseMs);
    } catch (error) {
      if (this.stopped) return;
      // Once per streak: after the application closed its database, every try fails alike.
      if (!this.failing) {
        log.warn(
          `Renewing the lease of a batch whose publish did not answer the shutdown's abort failed (${describeError(error)}); trying again while the call runs. Unless a renewal lands, its messages are claimed again once the lease ends`,
          { batch: batchIdOf(this.current) },
        );
      }
      this.failing = true;
      this.arm(this.now() + Math.min(RETRY_AFTER_FAILURE_MS, intervalMs));
      return;
    }
    if (this.stopped) return;
    this.failing = false;
    // Settled meanwhile by nobody but this batch: rows that left the lease are not ours to hold.
    if (renewed === 0) {
      this.settle('gone', 'its lease ended before a renewal landed');
      return;
    }
    this.end = Math.max(this.end, sentAt + leaseMs);
    this.arm(sentAt + intervalMs);
  }
}
