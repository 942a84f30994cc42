import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { describeError } from '../../internal/describe-error';
import type { DispatcherLog } from '../dispatcher-log';
import type { OutagePause } from './outage-pause';
import { sleep } from '../sleep';

/** `idle`: no probe running. `probing`: a probe asks the publisher while claims are paused. */
export type ProbeState = 'idle' | 'probing';

/** What a probe needs from the dispatcher. */
export interface ProbeTarget {
  /** The publisher's `ping()`, or undefined when it has none (then nothing is probed). */
  readonly ping: ((signal: AbortSignal) => Promise<void>) | undefined;
  readonly stopping: () => boolean;
  /** Asks for a drain. */
  readonly wake: () => void;
  /** When the rows the outage handed back become due again (wall clock). */
  readonly releasedDueAt: () => number;
}

/**
 * While claims are paused by a broker outage, asks the publisher every `intervalMs`, one probe
 * at a time, and resumes as soon as the broker answers: the pause may have grown long, the
 * return should not wait for it.
 */
export class OutageProbe {
  private probing = false;

  constructor(
    private readonly pause: OutagePause,
    private readonly target: ProbeTarget,
    private readonly timeoutMs: number,
    private readonly intervalMs: number,
    private readonly log: DispatcherLog,
  ) {}

  get state(): ProbeState {
    return this.probing ? 'probing' : 'idle';
  }

  /** Starts probing unless a probe is running or the publisher has no `ping()`. */
  start(): void {
    const ping = this.target.ping;
    if (ping === undefined || this.probing) return;
    this.probing = true;
    this.run(ping)
      .catch((error: unknown) => this.log.warn(`Broker probe failed: ${describeError(error)}`))
      .finally(() => {
        this.probing = false;
      });
  }

  private async run(ping: (signal: AbortSignal) => Promise<void>): Promise<void> {
    const { stopping } = this.target;
    while (!stopping() && this.pause.paused) {
      await sleep(this.intervalMs, true);
      if (stopping() || !this.pause.paused) return;
      const controller = new AbortController();
      const timer = setTimeout(
        () => controller.abort(new PublishTimeoutError(this.timeoutMs)),
        this.timeoutMs,
      );
      try {
        await ping(controller.signal);
        this.pause.probeAnswered();
        this.target.wake();
        // The batch the outage handed back becomes due a moment later: look again then.
        const dueIn = this.target.releasedDueAt() - Date.now();
        if (dueIn > 0) setTimeout(() => this.target.wake(), dueIn + 10).unref();
        return;
      } catch {
        // Still down: keep waiting, quietly (the pause was logged once).
      } finally {
        clearTimeout(timer);
      }
    }
  }
}
