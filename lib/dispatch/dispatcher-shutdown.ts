import { PublisherUnavailableError } from '../errors/publisher-unavailable.error';

/**
 * `idle`: not started (a caller may still drive it with `drain()` or `runOnce()`). `running`:
 * polling and listening. `draining`: shutdown waits for the batches in flight. `aborting`:
 * they did not finish in time and their publishes were aborted. `stopped`: shut down.
 */
export type DispatcherState = 'idle' | 'running' | 'draining' | 'aborting' | 'stopped';

/**
 * How a shutdown ended: everything in flight finished (`idle`), or it was cut short and what was
 * in flight settled after the abort (`timeout`), or some of it was still running when the grace
 * after the abort ran out too (`abandoned`).
 */
export type ShutdownEnd = 'idle' | 'timeout' | 'abandoned';

/**
 * The dispatcher's start and stop: whether it runs, whether it is stopping, and the signal that
 * aborts the publishes still in flight when shutdown gives up waiting for them.
 */
export class DispatcherShutdown {
  private current: DispatcherState = 'idle';
  private readonly abort = new AbortController();

  get state(): DispatcherState {
    return this.current;
  }

  /** Started and not shutting down: polling, wake-ups and the retries of `retryAfterOthers`. */
  get running(): boolean {
    return this.current === 'running';
  }

  /** No new claim may start. */
  get stopping(): boolean {
    return this.current !== 'idle' && this.current !== 'running';
  }

  /** Aborted once shutdown gave up waiting for in-flight publishes; it stays so. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Answers whether it was not already running. */
  start(): boolean {
    const was = this.current;
    this.current = 'running';
    return was !== 'running';
  }

  /** No claim starts from now on. */
  beginStop(): void {
    this.current = 'draining';
  }

  /**
   * Waits up to `timeoutMs` for `idle()` (the batches in flight to settle); past that, aborts
   * their publishes (their batches then settle what the publishers answer) and waits up to
   * `graceMs` more for them to settle. Never longer: a source or publisher that ignores the
   * abort is left running (its batch's messages stay leased while it runs: ShutdownHold).
   */
  async finishStop(
    idle: () => Promise<void>,
    timeoutMs: number,
    graceMs: number,
  ): Promise<ShutdownEnd> {
    this.current = 'draining';
    const settled = idle().then(() => 'idle' as const);
    let end: ShutdownEnd = await raceTimer(settled, timeoutMs, 'timeout');
    if (end === 'timeout') {
      this.current = 'aborting';
      this.abort.abort(new PublisherUnavailableError('dispatcher shutting down'));
      end = (await raceTimer(settled, graceMs, 'abandoned')) === 'idle' ? 'timeout' : 'abandoned';
    }
    this.current = 'stopped';
    return end;
  }
}

/** `promise`'s value, or `late` once `ms` have passed. */
async function raceTimer<T, L>(promise: Promise<T>, ms: number, late: L): Promise<T | L> {
  // A cleared timer: a pending one would keep the process alive for the whole timeout after close().
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<L>((resolve) => {
    timer = setTimeout(() => resolve(late), Math.max(0, ms));
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
