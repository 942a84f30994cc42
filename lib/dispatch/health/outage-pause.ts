import { describeError } from '../../internal/describe-error';
import type { DispatcherLog } from '../dispatcher-log';

/**
 * `clear`: no outage. `paused`: an outage paused claims until `pausedUntil`. `resuming`: the
 * pause has run out and claims go on, but nothing has yet shown the outage over; a failure now
 * pauses for twice as long.
 */
export type OutageState = 'clear' | 'paused' | 'resuming';

/**
 * The pause of claims after an outage of the broker or the database: doubling from the poll
 * interval up to `maxMs` while the outage lasts, logged once when it begins and once when it
 * ends.
 */
export class OutagePause {
  private pauseMs = 0;
  private until = 0;
  /** When the current outage began (wall clock), or undefined outside one. */
  private since: number | undefined;

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
    private readonly log: DispatcherLog,
    private readonly now: () => number = Date.now,
  ) {}

  get state(): OutageState {
    if (this.now() < this.until) return 'paused';
    return this.since === undefined ? 'clear' : 'resuming';
  }

  /** Claims wait until then (wall clock); 0 or past when they do not. */
  get pausedUntil(): number {
    return this.until;
  }

  get paused(): boolean {
    return this.now() < this.until;
  }

  /** The length of the current (or, after a probe ended the outage, the last) pause. */
  get currentPauseMs(): number {
    return this.pauseMs;
  }

  /** Pauses claims for twice the last pause (the poll interval at first); answers how long. */
  pause(error: unknown, what: string, counted: string): number {
    this.pauseMs = Math.min(this.maxMs, this.pauseMs === 0 ? this.baseMs : this.pauseMs * 2);
    this.until = this.now() + this.pauseMs;
    // Once per outage at warn level; its later, longer pauses at debug.
    const message = `${what}: ${describeError(error)}; pausing claims for ${this.pauseMs} ms (${counted})`;
    if (this.since === undefined) {
      this.since = this.now();
      this.log.warn(`Outage begun (${this.log.label}): ${message}`);
    } else this.log.debug(message);
    return this.pauseMs;
  }

  /** A publish reached the broker: the outage (if any) is over and the next pause starts short. */
  publishWentThrough(): void {
    this.pauseMs = 0;
    this.end('a publish went through');
  }

  /**
   * The broker answered a probe: claims resume at once. The next pause still doubles the last,
   * as nothing has been published yet.
   */
  probeAnswered(): void {
    this.end('the broker answered a probe');
    this.until = 0;
  }

  /** Logs the end of an outage once, with how long it lasted. */
  private end(how: string): void {
    if (this.since === undefined) return;
    const lasted = this.now() - this.since;
    this.since = undefined;
    this.log.log(`Outage over after ${lasted} ms (${this.log.label}): ${how}; claiming again`);
  }
}
