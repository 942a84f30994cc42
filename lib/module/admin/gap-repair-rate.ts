/**
 * The gap repair's rate limit on one instance: a token bucket of `burst` tokens refilled at
 * `ratePerSecond`. In memory: each instance answering requests has its own, so N instances
 * answer up to N times the rate (docs/gap-repair.md).
 */
export class GapRepairRate {
  private tokens: number;
  private last: number;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = burst;
    this.last = now();
  }

  /** Takes a token: 0 when one was free, else the ms until the next one is. */
  take(): number {
    const now = this.now();
    this.tokens = Math.min(
      this.burst,
      this.tokens + ((now - this.last) * this.ratePerSecond) / 1000,
    );
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - this.tokens) * 1000) / this.ratePerSecond);
  }
}
