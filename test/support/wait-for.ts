/**
 * Bounded waits on conditions, for tests that must not order events by sleeping. The bound is
 * only a failure deadline: a test never claims that something happened within it, only that it
 * happened at all (or, for `expectNever`, that it did not happen while the window was open).
 */

export interface WaitOptions {
  /** Give up (and fail) after this long. @default 10000 */
  readonly timeoutMs?: number;
  /** Time between probes. @default 25 */
  readonly intervalMs?: number;
  /**
   * Added to the timeout's message: the state that explains it, where the last probe's value
   * (often `false`) does not.
   */
  readonly describeState?: () => string;
}

/** Waits `ms`: for pacing a test (a poll, a load), never for ordering events (see waitFor). */
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Probes until `probe` returns something truthy and resolves to it; rejects after `timeoutMs`
 * with `what` and the last value probed. An error thrown by the probe fails the wait at once.
 */
export async function waitFor<T>(
  what: string,
  probe: () => T | Promise<T>,
  options: WaitOptions = {},
): Promise<Exclude<T, false | null | undefined | 0 | ''>> {
  const { timeoutMs = 10_000, intervalMs = 25, describeState } = options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as Exclude<T, false | null | undefined | 0 | ''>;
    if (Date.now() >= deadline) {
      const state = describeState === undefined ? '' : `; ${describeState()}`;
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what} (last probe: ${describe(value)}${state})`,
      );
    }
    await sleep(Math.min(intervalMs, Math.max(1, deadline - Date.now())));
  }
}

/**
 * Probes for `windowMs` and fails as soon as `probe` returns something truthy. Only for
 * asserting that nothing can happen in the window, never for waiting for something to happen.
 */
export async function expectNever(
  what: string,
  probe: () => unknown,
  windowMs: number,
  intervalMs = 25,
): Promise<void> {
  const end = Date.now() + windowMs;
  for (;;) {
    const value = await probe();
    if (value) throw new Error(`${what} happened (${describe(value)})`);
    if (Date.now() >= end) return;
    await sleep(Math.min(intervalMs, Math.max(1, end - Date.now())));
  }
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Resolves with `promise`, or rejects once `timeoutMs` pass without it settling: a failure
 * deadline for an operation that would otherwise hang the test, not a claim about its speed.
 */
export async function resolvesWithin<T>(
  what: string,
  promise: Promise<T>,
  timeoutMs: number,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not finish within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
