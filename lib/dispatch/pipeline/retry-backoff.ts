/** The retry policy's delay inputs. */
export interface BackoffPolicy {
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly factor: number;
  readonly jitter: number;
}

/**
 * Delay before retry number `attempt` (1 for the first retry): exponential, capped, and
 * randomised downwards by up to `jitter` of itself so that messages failed together do not
 * come back together.
 */
export function retryDelay(
  attempt: number,
  policy: BackoffPolicy,
  random: () => number = Math.random,
): number {
  // With unlimited retries the power overflows to Infinity, and 0 × Infinity is NaN: a zero
  // initial delay stays zero however many attempts came before.
  const exponential =
    policy.initialDelayMs === 0
      ? 0
      : policy.initialDelayMs * Math.pow(policy.factor, Math.max(0, attempt - 1));
  const capped = Math.min(policy.maxDelayMs, exponential);
  return Math.max(0, Math.round(capped * (1 - policy.jitter * random())));
}
