/** First wait after a claim held back only by other dispatchers' batches (doubles, see `retryAfterOthers`). */
const IN_FLIGHT_RETRY_MS = 50;

/**
 * `quiet`: no wake-up since the last drain began. `woken`: a wake-up (a commit here or
 * elsewhere) asked for the next drain, which claims without asking first. `retry-scheduled`:
 * a wake-up is due after other dispatchers' batches held a claim back.
 */
export type WakeState = 'quiet' | 'woken' | 'retry-scheduled';

/** The dispatcher's wake-ups: commits, notifications, and the retry after others' batches. */
export class WakeUps {
  private woken = false;
  /** Set while a drain waits on a batch in flight that a wake-up should cut short. */
  private onWake: (() => void) | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryMs = 0;

  /** `wake` asks the dispatcher's runner for a drain. */
  constructor(
    private readonly wake: () => void,
    private readonly maxRetryMs: number,
  ) {}

  get state(): WakeState {
    if (this.retryTimer !== undefined) return 'retry-scheduled';
    return this.woken ? 'woken' : 'quiet';
  }

  /** Whether claims are being retried after other dispatchers' batches (they find few rows). */
  get retrying(): boolean {
    return this.retryMs > 0;
  }

  /** A wake-up came: the next drain claims at once, and a drain waiting on a batch looks again. */
  woke(): void {
    this.woken = true;
    this.onWake?.();
  }

  /** Whether a wake-up came since the last call (the drain starting now claims at once). */
  takeWoken(): boolean {
    const woken = this.woken;
    this.woken = false;
    return woken;
  }

  /**
   * After a claim held back only by other dispatchers' batches in flight: a wake-up once those
   * have likely settled, sooner than the next poll, backing off while it keeps finding them
   * (up to the poll interval) so that idle dispatchers of a busy table claim little.
   */
  retryAfterOthers(): void {
    if (this.retryTimer !== undefined) return;
    this.retryMs = Math.min(
      this.maxRetryMs,
      this.retryMs === 0 ? IN_FLIGHT_RETRY_MS : this.retryMs * 2,
    );
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.wake();
    }, this.retryMs);
    this.retryTimer.unref();
  }

  /** A claim found work: the next retry after others starts short again. */
  claimedWork(): void {
    this.retryMs = 0;
  }

  cancel(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  /**
   * Whether a wake-up comes before `batch` settles (false at once without a batch); with
   * `tickMs`, a tick that long after the call counts as one (the poll's, during a drain).
   */
  async before(batch: Promise<unknown> | undefined, tickMs?: number): Promise<boolean> {
    if (batch === undefined) return false;
    let timer: NodeJS.Timeout | undefined;
    const woken = new Promise<true>((resolve) => {
      this.onWake = () => resolve(true);
      if (tickMs !== undefined) timer = setTimeout(() => resolve(true), tickMs);
    });
    try {
      return await Promise.race([
        batch.then(
          () => false,
          () => false,
        ),
        woken,
      ]);
    } finally {
      clearTimeout(timer);
      this.onWake = undefined;
    }
  }
}
