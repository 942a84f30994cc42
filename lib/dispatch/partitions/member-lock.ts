import { AsyncResource } from 'node:async_hooks';
import { describeError } from '../../internal/describe-error';
import type { EndingMember } from '../../store/ports/outbox-store.port';
import type { SqlSession } from '../../store/ports/sql-port';
import { newOwnerKey } from '../../store/shared-sql/owner-leases';
import type { DispatcherLog } from '../dispatcher-log';
import { within } from '../sleep';

/** How often the lock's session is asked whether it is still there. */
const HEARTBEAT_MS = 250;
/**
 * How long after sending its last answered question the process still counts on its lock: past
 * that, what it holds under the lock is dropped and its publishes stop.
 */
const VALID_MS = 1_000;
/**
 * How long after another process's lock is found free its heartbeat ends. Longer than
 * VALID_MS: a process that only lost its lock's session has stopped publishing by then.
 */
export const MEMBER_GRACE_MS = 1_250;
/** How often this process looks for others whose lock is free, from one look's start to the next. */
const LOOK_MS = 100;
/** The least pause between two looks, when a look took longer than LOOK_MS (a slow server). */
const LOOK_GAP_MS = 25;
/** How long to wait before asking for a session again after failing to get one. */
const RETRY_MS = 1_000;

/** What the member lock needs: sessions, the owner lock on one, and the look at the others. */
export interface MemberLockParts {
  /** A connection of its own, kept for as long as the lock is held. */
  readonly session: () => Promise<SqlSession>;
  /** Tries the owner lock of `key` on `session` (false: another session holds that key). */
  readonly lock: (session: SqlSession, key: number) => Promise<boolean>;
  /** Gives every lock of `session` up, before it goes back to the pool. */
  readonly unlock: (session: SqlSession) => Promise<void>;
  /**
   * Ends the heartbeat of the others whose lock is free `graceMs` from now; answers them, and
   * the others whose heartbeat ends within it anyway.
   */
  readonly endGone: (graceMs: number) => Promise<readonly EndingMember[]>;
  readonly log: DispatcherLog;
  /** The lock stopped counting: what was held under it is dropped now. */
  readonly lost: () => void;
  /** Others' heartbeats were ended: their partitions are free `afterMs` from now. */
  readonly gone: (afterMs: number) => void;
}

interface HeldLock {
  readonly session: SqlSession;
  readonly key: number;
  validUntil: number;
  expiry: NodeJS.Timeout | undefined;
}

/**
 * Takeover after a crash for delivery partitions (docs/delivery.md, "Partitions"): as the
 * `'leases'` mode's owner lock does for leases. The process holds an owner lock on a session of
 * its own and names its key in each heartbeat; the database frees the lock when the session
 * ends, which a killed process's does at once. Every process looks for others whose lock is free
 * and ends their heartbeat a grace later, so that their partitions are taken over in about two
 * seconds instead of their `partitionTimeoutMs`. A process whose session ends while it lives (a
 * cut connection) drops what it holds within VALID_MS, before the grace ends, and beats again
 * under a new key (never the old one) or, without one, under its heartbeat alone.
 *
 * A frozen process keeps its session, and its lock: it is judged by its heartbeat as before.
 */
export class MemberLock {
  private held: HeldLock | undefined;
  private stopped = true;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private lookTimer: NodeJS.Timeout | undefined;
  private nextAcquireAt = 0;
  private acquiring: Promise<void> | undefined;
  private lookFailing: string | undefined;
  // Bound where the dispatcher is built, not where start() is called (a request's context).
  private readonly heartbeat = AsyncResource.bind(() => this.beat());
  private readonly watch = AsyncResource.bind(() => this.look());

  constructor(private readonly parts: MemberLockParts) {}

  /** Starts asking the session and looking at the others; the lock is taken by `ensure`. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.heartbeatTimer = this.schedule(this.heartbeat, HEARTBEAT_MS);
    this.lookTimer = this.schedule(this.watch, 0);
  }

  /** Takes a lock where none counts (before a heartbeat names it); waits for a try under way. */
  async ensure(): Promise<void> {
    const held = this.held;
    // One past its validity is dropped (its session closed) before another is taken.
    if (held !== undefined) this.holds(held.key);
    if (this.stopped || this.key() !== null) return;
    this.acquiring ??= this.acquire().finally(() => {
      this.acquiring = undefined;
    });
    await this.acquiring;
  }

  /** The key a heartbeat names: the lock's while it counts, else null. */
  key(): number | null {
    const held = this.held;
    if (held === undefined || performance.now() >= held.validUntil) return null;
    return held.key;
  }

  /**
   * Whether the lock of `key` still counts, read on the clock: a process held up past the
   * lock's validity (its expiry timer could not fire) must not publish before it knows.
   */
  holds(key: number): boolean {
    const held = this.held;
    if (held === undefined || held.key !== key) return false;
    if (performance.now() < held.validUntil) return true;
    this.drop(held, `its lock's session did not answer for ${VALID_MS} ms`);
    return false;
  }

  /** Stops looking and gives the lock up: call once the heartbeat naming it is gone. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.heartbeatTimer);
    clearTimeout(this.lookTimer);
    await this.acquiring;
    const held = this.held;
    if (held === undefined) return;
    this.held = undefined;
    clearTimeout(held.expiry);
    const unlocked = await within(this.parts.unlock(held.session), VALID_MS);
    // Not unlocked: the connection is closed rather than pooled with the lock.
    await within(held.session.release(unlocked === undefined), VALID_MS);
  }

  private schedule(run: () => void, ms: number): NodeJS.Timeout {
    const timer = setTimeout(run, ms);
    timer.unref();
    return timer;
  }

  private async acquire(): Promise<void> {
    if (performance.now() < this.nextAcquireAt) return;
    let session: SqlSession | undefined;
    try {
      session = await this.parts.session();
      // A key another session holds is passed over: keys are never shared.
      for (let tries = 0; tries < 3 && !this.stopped; tries++) {
        const key = newOwnerKey();
        const sentAt = performance.now();
        if (!(await this.parts.lock(session, key))) continue;
        const held: HeldLock = { session, key, validUntil: sentAt + VALID_MS, expiry: undefined };
        this.held = held;
        this.armExpiry(held);
        return;
      }
      await session.release(true);
    } catch (error) {
      this.nextAcquireAt = performance.now() + RETRY_MS;
      if (session !== undefined) await session.release(true).catch(() => undefined);
      this.parts.log.warn(
        `Delivery partitions: could not take an owner lock (after a crash this process's partitions wait out its partitionTimeoutMs until it can): ${describeError(error)}`,
      );
    }
  }

  private beat(): void {
    void this.beatOnce().finally(() => {
      if (!this.stopped) this.heartbeatTimer = this.schedule(this.heartbeat, HEARTBEAT_MS);
    });
  }

  private async beatOnce(): Promise<void> {
    const held = this.held;
    if (held === undefined) return;
    const sentAt = performance.now();
    const answer = await within(held.session.query('SELECT 1'), VALID_MS);
    if (this.held !== held) return;
    if (answer === undefined) {
      this.drop(held, `its lock's session was lost or did not answer within ${VALID_MS} ms`);
      return;
    }
    held.validUntil = sentAt + VALID_MS;
    this.armExpiry(held);
  }

  /** Drops the lock when it stops counting, whether or not a question is still pending. */
  private armExpiry(held: HeldLock): void {
    clearTimeout(held.expiry);
    held.expiry = this.schedule(
      () => {
        if (this.held === held) {
          this.drop(held, `its lock's session did not answer for ${VALID_MS} ms`);
        }
      },
      Math.max(0, held.validUntil - performance.now()),
    );
  }

  private drop(held: HeldLock, reason: string): void {
    if (this.held !== held) return;
    this.held = undefined;
    clearTimeout(held.expiry);
    if (!this.stopped) {
      this.parts.log.warn(
        `Delivery partitions: ${reason}; what this process holds is dropped, and its next heartbeat names a new lock`,
      );
    }
    void held.session.release(true).catch(() => undefined);
    this.parts.lost();
  }

  private look(): void {
    const startedAt = performance.now();
    void this.lookOnce().finally(() => {
      // Timed from the look's start: a slow look does not add its own length to the next wait.
      const wait = Math.max(LOOK_GAP_MS, startedAt + LOOK_MS - performance.now());
      if (!this.stopped) this.lookTimer = this.schedule(this.watch, wait);
    });
  }

  private async lookOnce(): Promise<void> {
    try {
      const ending = await this.parts.endGone(MEMBER_GRACE_MS);
      if (this.lookFailing !== undefined) {
        this.parts.log.log('Delivery partitions: looking for ended dispatchers works again');
        this.lookFailing = undefined;
      }
      if (ending.length === 0 || this.stopped) return;
      const cut = ending.filter((m) => m.cut).map((m) => m.label);
      if (cut.length > 0) {
        // A free lock says only that its session ended: with its process, or alone (a cut
        // connection; that process then dropped what it held). The line claims neither.
        this.parts.log.warn(
          `Delivery partitions: the owner lock of ${cut.join(', ')} was released (its process ended or its lock connection was lost): its partitions are taken over in ${MEMBER_GRACE_MS} ms`,
        );
      }
      // Every process takes its share when they end, whoever's look ended them.
      for (const m of ending) this.parts.gone(m.endsInMs + 50);
    } catch (error) {
      // Once per streak: the heartbeats meet the same outage and say so.
      const text = describeError(error);
      if (this.lookFailing === undefined) {
        this.parts.log.warn(`Delivery partitions: looking for ended dispatchers failed: ${text}`);
      }
      this.lookFailing = text;
    }
  }
}
