/**
 * The deadline of a publish on the dispatcher's monotonic clock, kept beside its abort signal.
 *
 * The signal is aborted by a timer, and a timer cannot fire while the process is paused (SIGSTOP,
 * a long GC, a blocked event loop): on waking, the promise jobs queued before the pause run
 * first, so a publisher that only read `signal.aborted` went on writing messages whose lease had
 * ended and which another dispatcher may already have sent. `pastPublishDeadline` reads the
 * clock itself, and aborts the signal when the deadline has passed.
 */
interface PublishDeadline {
  /** `performance.now()` past which nothing more may be sent. */
  readonly at: number;
  readonly abort: () => void;
  /** A renewed lease (lease renewal): read on the clock too, and losing it aborts the signal. */
  readonly lease?: PublishLease;
}

/** A lease that moves while the publish runs: false once it no longer holds (it is then lost). */
export interface PublishLease {
  holds(): boolean;
}

// Keyed by the signal of one publish: an entry lives as long as its signal, and no two apps
// share one, so this holds no state of any app.
const deadlines = new WeakMap<AbortSignal, PublishDeadline>();

/** Gives `controller`'s signal a deadline at `at` (monotonic), past which `abort` is called. */
export function setPublishDeadline(
  controller: AbortController,
  at: number,
  reason: () => unknown,
  lease?: PublishLease,
): void {
  deadlines.set(controller.signal, { at, abort: () => controller.abort(reason()), lease });
}

/**
 * Whether nothing more may be sent under `signal`: it aborted, or its deadline passed (the
 * signal is then aborted at once). Call it right before every write, after every await.
 */
export function pastPublishDeadline(signal: AbortSignal): boolean {
  if (signal.aborted) return true;
  const deadline = deadlines.get(signal);
  if (deadline === undefined) return false;
  if (performance.now() >= deadline.at) {
    deadline.abort();
    return true;
  }
  // A lease lost aborts the publish through its fence (BatchPublish), so the signal is aborted.
  return deadline.lease !== undefined && !deadline.lease.holds();
}
