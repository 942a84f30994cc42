/**
 * Retries go out through the table's sweep; without LISTEN and commit nudges, a log source's
 * sweep would find them up to a sweep interval late. This asks for a sweep when the first retry
 * it was told of is due: one timer, moved earlier for an earlier retry, never later.
 */
export class RetrySweeps {
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  private stopped = false;

  /** `sweep` asks the table's sweep to look now. */
  constructor(private readonly sweep: () => void) {}

  /** Sweeps when the first of `delaysMs` is due. */
  due(delaysMs: readonly number[]): void {
    if (delaysMs.length === 0 || this.stopped) return;
    const delayMs = Math.min(...delaysMs);
    const at = Date.now() + delayMs;
    if (this.timer !== undefined && this.timerAt <= at) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    // A little past the due time: the database clock decides, and a wake-up early finds nothing.
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sweep();
    }, delayMs + 20);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
