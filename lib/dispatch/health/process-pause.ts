/**
 * How late a timer must fire for this process to count as paused: ordinary timer jitter and
 * event-loop lag stay far below it, a SIGSTOP, a long GC or a debugger does not.
 */
export const PAUSE_THRESHOLD_MS = 1_000;

/**
 * How long this process did not run past `dueAt` (`performance.now()` at which a timer was due),
 * or 0 when less than `PAUSE_THRESHOLD_MS`: a lower bound of the pause, which may have begun
 * before the timer was due.
 */
export function pausedPast(dueAt: number, now = performance.now()): number {
  const late = now - dueAt;
  return late >= PAUSE_THRESHOLD_MS ? Math.round(late) : 0;
}
