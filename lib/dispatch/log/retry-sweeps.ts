/** A little past a due time: the database clock decides, and a wake-up early finds nothing. */
const MARGIN_MS = 20;
/** Due times closer than this share one sweep. */
const BUCKET_MS = 10;

/**
 * Retries go out through the table's sweep; without LISTEN and commit nudges, a log source's
 * sweep would find them up to a sweep interval late. This asks for a sweep when each retry it
 * was told of is due: one timer, armed for the earliest due time still ahead. A sweep finds only
 * what is due when it runs, so a later retry gets a sweep of its own rather than waiting for
 * the periodic one.
 */
export class RetrySweeps {
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  /** The due times (wall clock, in buckets) not swept for yet, earliest first. */
  private dueAts: number[] = [];
  private stopped = false;

  /** `sweep` asks the table's sweep to look now. */
  constructor(private readonly sweep: () => void) {}

  /** Sweeps when each of `delaysMs` is due. */
  due(delaysMs: readonly number[]): void {
    if (delaysMs.length === 0 || this.stopped) return;
    const now = Date.now();
    const known = new Set(this.dueAts);
    for (const delayMs of delaysMs) {
      known.add(Math.ceil((now + Math.max(0, delayMs)) / BUCKET_MS) * BUCKET_MS);
    }
    this.dueAts = [...known].sort((a, b) => a - b);
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.dueAts = [];
  }

  private arm(): void {
    const next = this.dueAts[0];
    if (next === undefined || this.stopped) return;
    if (this.timer !== undefined && this.timerAt <= next) return;
    clearTimeout(this.timer);
    this.timerAt = next;
    this.timer = setTimeout(() => this.fire(), Math.max(0, next - Date.now()) + MARGIN_MS);
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    const now = Date.now();
    // Every due time passed by now is covered by this sweep.
    this.dueAts = this.dueAts.filter((at) => at > now);
    this.sweep();
    this.arm();
  }
}
