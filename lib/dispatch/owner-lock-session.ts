import { AsyncResource } from 'node:async_hooks';
import type { SqlSession } from '../store/ports/sql-port';
import { newOwnerKey } from '../store/shared-sql/owner-leases';
import { within } from './sleep';

/** How often the lock's session is asked whether it is still there. */
export const OWNER_LOCK_HEARTBEAT_MS = 250;
/**
 * How long after sending its last answered question the process still counts on its lock: past
 * that, what it holds under the lock stops publishing.
 */
export const OWNER_LOCK_VALID_MS = 1_000;
/**
 * How long after another process's lock is found free what it held ends. Longer than
 * OWNER_LOCK_VALID_MS: a process that only lost its lock's session has stopped publishing by then.
 */
export const OWNER_LOCK_GRACE_MS = 1_250;
/**
 * How often a process looks for others whose lock is free, from one look's start to the next:
 * the one part of a takeover's time (look + OWNER_LOCK_GRACE_MS + take) that is not a safety
 * margin, so kept short. On a loaded machine the server frees a killed process's lock only some
 * hundreds of milliseconds after the kill (bench T1), which leaves a look every 250 ms too little
 * of the two seconds.
 */
export const OWNER_LOCK_LOOK_MS = 100;
/** The least pause between two looks, when one took longer than the period (a slow server). */
export const OWNER_LOCK_LOOK_GAP_MS = 25;
/**
 * How long a lock whose session stopped answering is kept (`keepOnSilence`) before its session
 * is closed and a new lock taken: a stall of the process or the server ends well before this.
 */
export const OWNER_LOCK_SILENCE_MAX_MS = 10_000;
/** How long to wait before asking for a session again after failing to get one. */
const RETRY_MS = 1_000;
/** How many fresh keys one take tries: a key another session holds is passed over. */
const KEY_TRIES = 3;

/**
 * An owner lock held: its session, its key, and until when (monotonic clock) it counts, moved on
 * by each answer.
 */
export interface HeldOwnerLock {
  readonly session: SqlSession;
  readonly key: number;
  readonly validUntil: number;
}

/** Why a held lock stopped counting. */
export type OwnerLockLapse =
  /** No answer came in time, found by the expiry timer. */
  | { readonly kind: 'silent' }
  /** Found past its validity on the clock (the event loop was held up). */
  | { readonly kind: 'overdue' }
  /** The question failed or took longer than the validity. */
  | { readonly kind: 'failed'; readonly error: unknown };

/** What an owner lock session needs of the database. */
export interface OwnerLockSessionParts {
  /** A connection of its own, kept for as long as the lock is held. */
  readonly session: () => Promise<SqlSession>;
  /** Tries the owner lock of `key` on `session` (false: another session holds that key). */
  readonly lock: (session: SqlSession, key: number) => Promise<boolean>;
  /** Gives every lock of `session` up before it goes back to the pool; absent: it is closed. */
  readonly unlock?: (session: SqlSession) => Promise<void>;
  /**
   * The lock stopped counting: it is forgotten and its session closed before this is called
   * (with `keepOnSilence`, a silent lock's session is kept: see there; called again when it is
   * closed).
   */
  readonly lapsed: (lock: HeldOwnerLock, why: OwnerLockLapse) => void;
  /**
   * Keeps the session of a lock whose question went unanswered past its validity (this process
   * or the server stalled) instead of closing it. The lock stops counting all the same, and
   * `lapsed` is called, but while the session lives the database holds the lock, so no other
   * process can find it free and take over what was held under it; an answer to a question sent
   * afterwards makes it count again under the same key (`answered`). A question that fails, or
   * silence for OWNER_LOCK_SILENCE_MAX_MS, closes the session as without it.
   */
  readonly keepOnSilence?: boolean;
  /** A silent lock (`keepOnSilence`) counts again, after `silentMs` without counting. */
  readonly answered?: (lock: HeldOwnerLock, silentMs: number) => void;
}

/** The lock as kept here: callers see its validity move as answers come. */
interface Held {
  readonly lock: { readonly session: SqlSession; readonly key: number; validUntil: number };
  expiry: NodeJS.Timeout | undefined;
  /** Since when (monotonic clock) the lock has not counted, its session kept (keepOnSilence). */
  silentSince: number | undefined;
  /** A question is on the session, not answered yet: no other is sent behind it. */
  asking: boolean;
}

/**
 * One owner lock on a pooled connection of its own, the base of fast takeover in both delivery
 * modes (ARCHITECTURE.md, "Takeover after a crash"): the database frees the lock when the
 * session ends, which a killed process's does at once, so others may take what it held a grace
 * after finding the lock free. Its holder counts on it only while the session answers: a lock
 * whose question went unanswered for OWNER_LOCK_VALID_MS lapses (before the others' grace ends),
 * and the next lock taken has a new key, never the old one. Who holds what under the lock, and
 * what a lapse stops, is the caller's.
 */
export class OwnerLockSession {
  private held: Held | undefined;
  private nextTakeAt = 0;
  /** Set by keepUnwatched: answers renew nothing and failures lapse nothing until a new take. */
  private unwatched = false;

  constructor(private readonly parts: OwnerLockSessionParts) {}

  /** The lock held now, whether or not it still counts. */
  get current(): HeldOwnerLock | undefined {
    return this.held?.lock;
  }

  /**
   * Whether `lock` is the one held and still counts, read on the clock: the expiry timer cannot
   * fire while the event loop is held up, and what runs first on waking must not act under a lock
   * whose answer is overdue. One found past its validity lapses here, as the timer would.
   */
  counts(lock: HeldOwnerLock): boolean {
    const held = this.held;
    if (held?.lock !== lock || held.silentSince !== undefined) return false;
    if (performance.now() < lock.validUntil) return true;
    this.lapse(held, { kind: 'overdue' });
    return false;
  }

  /**
   * Takes a lock under a fresh key on a session of its own; undefined when every key tried was
   * held elsewhere, `stopped()` said so meanwhile, or the last failure is under a second old.
   * Rejects with the database's error (the session given back first). While a lock is held it
   * answers that one: a second lock would leave the first's session open.
   */
  async take(stopped: () => boolean): Promise<HeldOwnerLock | undefined> {
    if (this.held !== undefined) return this.held.lock;
    if (performance.now() < this.nextTakeAt || stopped()) return undefined;
    let session: SqlSession | undefined;
    try {
      session = await this.parts.session();
      for (let tries = 0; tries < KEY_TRIES && !stopped(); tries++) {
        const key = newOwnerKey();
        const sentAt = performance.now();
        if (!(await this.parts.lock(session, key))) continue;
        const held: Held = {
          lock: { session, key, validUntil: sentAt + OWNER_LOCK_VALID_MS },
          expiry: undefined,
          silentSince: undefined,
          asking: false,
        };
        this.held = held;
        this.unwatched = false;
        this.armExpiry(held);
        return held.lock;
      }
      await session.release(true);
      return undefined;
    } catch (error) {
      this.nextTakeAt = performance.now() + RETRY_MS;
      if (session !== undefined) await session.release(true).catch(() => undefined);
      throw error;
    }
  }

  /**
   * Asks the session of the lock held now whether it is still there: an answer within the
   * validity renews it from the question's sending, a failure or none lapses it. `before` runs
   * first on the same session (its failure counts as the question's). With `keepOnSilence` one
   * question at a time is on the session, and a late answer is waited for rather than a failure:
   * the expiry timer says when the lock stops counting.
   */
  async ask(before?: (lock: HeldOwnerLock) => Promise<void>): Promise<void> {
    const held = this.held;
    if (held === undefined || held.asking) return;
    const sentAt = performance.now();
    held.asking = true;
    const question = (async () => {
      if (before !== undefined) await before(held.lock);
      await held.lock.session.query('SELECT 1');
    })();
    const settled = question.then(
      () => ({ failure: undefined }),
      (error: unknown) => ({ failure: error ?? new Error('the question failed') }),
    );
    void settled.then(() => {
      held.asking = false;
    });
    const inTime = await within(settled, OWNER_LOCK_VALID_MS);
    if (inTime === undefined && this.parts.keepOnSilence === true) {
      // Not past the silence's end: the lock is closed then, and the heartbeats go on.
      const late = await within(settled, OWNER_LOCK_SILENCE_MAX_MS);
      if (late !== undefined) this.answer(held, sentAt, late.value.failure);
      return;
    }
    this.answer(
      held,
      sentAt,
      inTime === undefined
        ? new Error(`no answer within ${OWNER_LOCK_VALID_MS} ms`)
        : inTime.value.failure,
    );
  }

  /**
   * Stops the expiry timer and keeps the lock as it is (shutdown, while the last batches still
   * publish under it with no questions asked): `giveUp` ends it.
   */
  keepUnwatched(): void {
    this.unwatched = true;
    clearTimeout(this.held?.expiry);
  }

  /**
   * Gives the lock held now up: unlocked and pooled again where the unlock answers, else its
   * connection closed. No lapse is reported.
   */
  async giveUp(): Promise<void> {
    const held = this.held;
    if (held === undefined) return;
    this.held = undefined;
    clearTimeout(held.expiry);
    const { unlock } = this.parts;
    const unlocked =
      unlock !== undefined &&
      (await within(unlock(held.lock.session), OWNER_LOCK_VALID_MS)) !== undefined;
    await within(held.lock.session.release(!unlocked), OWNER_LOCK_VALID_MS);
  }

  /** What the answer to a question sent at `sentAt` says of the lock. */
  private answer(held: Held, sentAt: number, failure: unknown): void {
    if (this.held !== held || this.unwatched) return;
    if (failure !== undefined) {
      this.lapse(held, { kind: 'failed', error: failure });
      return;
    }
    const validUntil = sentAt + OWNER_LOCK_VALID_MS;
    // A late answer says nothing of now: a silent lock waits for the next question's.
    if (held.silentSince !== undefined && performance.now() >= validUntil) return;
    held.lock.validUntil = validUntil;
    if (held.silentSince !== undefined) {
      const silentMs = performance.now() - held.silentSince;
      held.silentSince = undefined;
      this.parts.answered?.(held.lock, silentMs);
    }
    this.armExpiry(held);
  }

  /** Lapses the lock when it stops counting, whether or not a question is still pending. */
  private armExpiry(held: Held): void {
    clearTimeout(held.expiry);
    const expiry = setTimeout(
      () => this.lapse(held, { kind: 'silent' }),
      Math.max(0, held.lock.validUntil - performance.now()),
    );
    expiry.unref();
    held.expiry = expiry;
  }

  private lapse(held: Held, why: OwnerLockLapse): void {
    if (this.held !== held) return;
    clearTimeout(held.expiry);
    if (this.parts.keepOnSilence === true && why.kind !== 'failed') {
      if (held.silentSince !== undefined) return;
      held.silentSince = performance.now();
      const closing = setTimeout(
        () =>
          this.lapse(held, {
            kind: 'failed',
            error: new Error(`no answer for ${OWNER_LOCK_SILENCE_MAX_MS} ms`),
          }),
        OWNER_LOCK_SILENCE_MAX_MS,
      );
      closing.unref();
      held.expiry = closing;
      this.parts.lapsed(held.lock, why);
      return;
    }
    this.held = undefined;
    void held.lock.session.release(true).catch(() => undefined);
    this.parts.lapsed(held.lock, why);
  }
}

/**
 * Runs `once` again and again, `everyMs` from one start to the next (a slow run does not add
 * its own length to the wait) and at least `gapMs` apart, on timers that keep no process alive.
 * Bound where it is made, not where `start()` is called (a request's context).
 */
export class Repeating {
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private readonly run = AsyncResource.bind(() => this.tick());

  constructor(
    private readonly once: () => Promise<void>,
    private readonly everyMs: number,
    private readonly gapMs = everyMs,
  ) {}

  /** The first run `inMs` from now. */
  start(inMs = 0): void {
    if (this.running) return;
    this.running = true;
    this.schedule(inMs);
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
  }

  private schedule(ms: number): void {
    const timer = setTimeout(this.run, ms);
    timer.unref();
    this.timer = timer;
  }

  private tick(): void {
    const startedAt = performance.now();
    void this.once()
      .catch(() => undefined)
      .finally(() => {
        if (!this.running) return;
        this.schedule(Math.max(this.gapMs, startedAt + this.everyMs - performance.now()));
      });
  }
}
