/**
 * Claims whose answer never reached the dispatcher: the database may have committed them (the
 * connection failed between the COMMIT and its answer), leaving rows leased, with an attempt
 * counted, that nobody will publish. Their token, made by the dispatcher before the claim, lets
 * them be given back (`OutboxStore.releaseClaim`) once the call has ended either way, instead of
 * waiting out the lease and charging an attempt that published nothing.
 */
export class LostClaims {
  private readonly claims = new Map<string, { until: number; ended: boolean }>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  get size(): number {
    return this.claims.size;
  }

  /**
   * A claim call that failed (or was given up on) with `token`. Its rows, if it committed, are
   * leased for `leaseMs` at most: past that the lease has ended and there is nothing to give back.
   */
  add(token: string, call: Promise<unknown> | undefined, leaseMs: number): void {
    const claim = { until: this.now() + leaseMs, ended: call === undefined };
    this.claims.set(token, claim);
    // Released while still running, it could still commit afterwards; a call that answers late
    // is released by the dispatcher from its answer, and one that fails is released here.
    const ended = (): void => {
      claim.ended = true;
    };
    void call?.then(ended, ended);
  }

  /**
   * Gives back the rows of each ended lost claim with `release`; answers how many rows. Stops at
   * the first failure (the database is still away): those claims are tried again next time.
   */
  async releaseEnded(release: (token: string) => Promise<number>): Promise<number> {
    let released = 0;
    for (const [token, claim] of this.claims) {
      if (this.now() > claim.until) {
        this.claims.delete(token);
        continue;
      }
      if (!claim.ended) continue;
      released += await release(token);
      this.claims.delete(token);
    }
    return released;
  }
}
