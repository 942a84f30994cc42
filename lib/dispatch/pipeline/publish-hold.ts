/**
 * The longest a claimed batch's publish waits for the next claim to be sent: sending one takes
 * a connection and a round trip, about 1 ms on a local database; a claim that takes longer is
 * waiting for something else.
 */
const PUBLISH_HOLD_MAX_MS = 5;

/** `open`: no publish waits. `holding`: the batch claimed last waits for the next claim to go out. */
export type PublishHoldState = 'open' | 'holding';

/**
 * Holds the publish of the batch just claimed until the next claim has gone to the database
 * (`ClaimOptions.onSent`), or the loop waits on something else. A publish begins with
 * synchronous work (the broker client encodes the whole batch: about 10 ms for 500 messages
 * to Kafka) that, started first, kept the next claim from being sent until it was done; the
 * claim then ran after the encoding instead of beside it, and the drain went at the pace of
 * the two in a row. Held for `maxMs` at most: a claim waiting its turn behind another
 * dispatcher's (PostgreSQL) is sent only after it, and the publish need not wait so.
 */
export class PublishHold {
  private releaseHeld: (() => void) | undefined;

  constructor(private readonly maxMs = PUBLISH_HOLD_MAX_MS) {}

  get state(): PublishHoldState {
    return this.releaseHeld === undefined ? 'open' : 'holding';
  }

  /** Releases any publish held, then holds the next: resolves when it may start. */
  hold(): Promise<void> {
    this.release();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.release(), this.maxMs);
      timer.unref();
      this.releaseHeld = () => {
        this.releaseHeld = undefined;
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Lets the held publish start; a no-op when none waits. */
  release(): void {
    this.releaseHeld?.();
  }
}
