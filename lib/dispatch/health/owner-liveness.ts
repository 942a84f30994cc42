import { AsyncResource } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { describeError } from '../../internal/describe-error';
import type { OutboxDeliveryPort } from '../../store/ports/outbox-store.port';
import type { SqlPort, SqlSession } from '../../store/ports/sql-port';
import { newOwnerKey, ownerToken } from '../../store/shared-sql/owner-leases';
import type { DispatcherLog } from '../dispatcher-log';
import { within } from '../sleep';

/** How often the owner asks its session whether it is still there. */
const HEARTBEAT_MS = 250;
/**
 * How long after sending its last answered heartbeat the owner still counts on its lock: past
 * that, it stops publishing what it leased under the lock (see OwnerLease.fence).
 */
const VALID_MS = 1_000;
/**
 * How long after finding an owner's lock free its leases end (on the database clock). Longer
 * than VALID_MS: an owner that only lost its session has stopped publishing by then.
 */
export const TAKEOVER_GRACE_MS = 1_250;
/**
 * How often the dispatcher looks for leases whose owner went, from one look's start to the
 * next: the one part of the takeover's time (look + TAKEOVER_GRACE_MS + claim) that is not a
 * safety margin, so kept short. On a loaded machine the server frees a killed process's lock
 * only some hundreds of milliseconds after the kill (bench T1), which leaves a look every 250 ms
 * too little of the two seconds.
 */
const WATCH_MS = 100;
/** The least pause between two looks, when a look took longer than WATCH_MS (a slow server). */
const WATCH_GAP_MS = 25;
/** Every how many looks (30 s) one reads every owner with a lease, not only those seen alive. */
const FULL_LOOK_EVERY = 300;
/** How long `start()` waits for the first owner lock before claims begin without it. */
const START_WAIT_MS = 2_000;
/** How long to wait before asking for a session again after failing to get one. */
const RETRY_MS = 1_000;

/** The token a claim writes, and what ends the right to publish under it. */
export interface OwnerLease {
  readonly token: string;
  /**
   * Aborted when the owner lock the token names is lost (its session ended, or stopped
   * answering): the batch stops publishing and goes back. Absent for a plain token.
   */
  readonly fence?: AbortSignal;
}

/** The lock held now: its session, key, and until when (monotonic clock) it counts. */
interface HeldLock {
  readonly session: SqlSession;
  readonly key: number;
  readonly fence: AbortController;
  validUntil: number;
  expiry: NodeJS.Timeout | undefined;
}

/**
 * Fast takeover after a crash (ARCHITECTURE.md, "Takeover after a crash"). The dispatcher holds
 * an owner lock on a session of its own and writes lease tokens naming it; the database frees the
 * lock when the session ends, which a killed process's does at once. Every dispatcher looks for
 * leases whose owner lock is free and ends them a short grace later, so another claims their
 * rows in about two seconds instead of `leaseMs`. An owner whose session ends while it lives
 * (a network cut) stops publishing under that lock within VALID_MS, before the grace ends, and
 * takes a new lock with a new key; it never takes the old key again.
 *
 * Where the store or the SQL port lacks it (SQLite, a port without sessions), tokens are plain
 * and nothing is watched: leases end after `leaseMs` as before.
 */
export class OwnerLiveness {
  private held: HeldLock | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private watchTimer: NodeJS.Timeout | undefined;
  private wakeTimer: NodeJS.Timeout | undefined;
  private stopped = true;
  private looks = 0;
  private lastWatchError: string | undefined;
  private nextAcquireAt = 0;
  // Bound where the dispatcher is built, not where start() is called (a request's context).
  private readonly heartbeat = AsyncResource.bind(() => this.beat());
  private readonly watch = AsyncResource.bind(() => this.look());

  constructor(
    private readonly sql: SqlPort | undefined,
    private readonly store: OutboxDeliveryPort,
    private readonly log: DispatcherLog,
    /** Asks the claim loop for a claim now. */
    private readonly wake: () => void,
  ) {}

  private get supported(): boolean {
    return (
      this.sql?.session !== undefined &&
      this.store.lockOwner !== undefined &&
      this.store.shortenOrphanedLeases !== undefined
    );
  }

  /**
   * Takes the owner lock (waiting for it a moment, so that the first claims already name it)
   * and starts the heartbeats and the watch.
   */
  async start(): Promise<void> {
    if (!this.supported || !this.stopped) return;
    this.stopped = false;
    const first = this.acquire();
    // A slow database holds the start up no longer than this; the lock comes when it comes.
    await within(first, START_WAIT_MS);
    if (this.stopped) return;
    this.heartbeatTimer = this.schedule(() => {
      void first.finally(this.heartbeat);
    }, 0);
    this.watchTimer = this.schedule(this.watch, 0);
  }

  /**
   * Stops the heartbeats, the watch for others' leases and the taking of new locks, but keeps
   * the lock held now (shutdown, while a batch still publishes under it): the database frees it
   * when `stop()` gives it up or the session ends.
   */
  stopWatching(): void {
    this.stopped = true;
    clearTimeout(this.heartbeatTimer);
    clearTimeout(this.watchTimer);
    clearTimeout(this.wakeTimer);
    // Without heartbeats it would otherwise count as lost, and be given up, a second from now.
    clearTimeout(this.held?.expiry);
  }

  /** Stops watching and gives the lock up (the session goes back to the pool, lock released). */
  async stop(): Promise<void> {
    this.stopWatching();
    const held = this.held;
    if (held === undefined) return;
    this.drop(held, false);
    // Unlocked before the connection goes back to the pool, or closed with it.
    const unlock = this.store.unlockOwner?.bind(this.store);
    // A store without it: the connection is closed rather than pooled with the lock.
    const unlocked =
      unlock !== undefined &&
      (await within(unlock(held.session), VALID_MS).then(
        (answer) => answer !== undefined,
        () => false,
      ));
    await within(held.session.release(!unlocked), VALID_MS).catch(() => undefined);
  }

  /** The token for the next claim; names the owner lock while it counts. */
  lease(): OwnerLease {
    const held = this.held;
    if (held === undefined || held.fence.signal.aborted || performance.now() >= held.validUntil) {
      return { token: randomUUID() };
    }
    return { token: ownerToken(held.key), fence: held.fence.signal };
  }

  private schedule(run: () => void, ms: number): NodeJS.Timeout {
    const timer = setTimeout(run, ms);
    timer.unref();
    return timer;
  }

  private beat(): void {
    void this.beatOnce().finally(() => {
      if (!this.stopped) this.heartbeatTimer = this.schedule(this.heartbeat, HEARTBEAT_MS);
    });
  }

  private async beatOnce(): Promise<void> {
    const held = this.held;
    if (held === undefined) return this.acquire();
    const sentAt = performance.now();
    try {
      const answer = await within(held.session.query('SELECT 1'), VALID_MS);
      if (answer === undefined) throw new Error(`no answer within ${VALID_MS} ms`);
      // Stopped meanwhile: a lock kept through shutdown is not watched any more.
      if (this.held !== held || this.stopped) return;
      held.validUntil = sentAt + VALID_MS;
      this.armExpiry(held);
    } catch (error) {
      if (this.held !== held || this.stopped) return;
      this.log.warn(
        `Lost the owner lock's database session (${describeError(error)}): batches leased under it stop publishing and go back; taking a new owner lock`,
      );
      this.drop(held, true);
    }
  }

  /** Fences the lock when it stops counting, whether or not a heartbeat is still pending. */
  private armExpiry(held: HeldLock): void {
    clearTimeout(held.expiry);
    const expiry = setTimeout(
      () => {
        if (this.held !== held) return;
        this.log.warn(
          `The owner lock's session did not answer for ${VALID_MS} ms: batches leased under it stop publishing and go back; taking a new owner lock`,
        );
        this.drop(held, true);
      },
      Math.max(0, held.validUntil - performance.now()),
    );
    expiry.unref();
    held.expiry = expiry;
  }

  /** Stops counting on `held`: its batches' fence is aborted, its session closed if broken. */
  private drop(held: HeldLock, broken: boolean): void {
    if (this.held === held) this.held = undefined;
    clearTimeout(held.expiry);
    held.fence.abort(new Error('owner lock lost'));
    if (broken) void held.session.release(true).catch(() => undefined);
  }

  private async acquire(): Promise<void> {
    const { sql, store } = this;
    if (this.stopped || sql?.session === undefined || store.lockOwner === undefined) return;
    if (performance.now() < this.nextAcquireAt) return;
    let session: SqlSession | undefined;
    try {
      session = await sql.session();
      // A key another session holds (a chance in 2^31) is passed over: keys are never shared.
      for (let tries = 0; tries < 3; tries++) {
        const key = newOwnerKey();
        const sentAt = performance.now();
        if (!(await store.lockOwner(session, key))) continue;
        if (this.stopped) break;
        const held: HeldLock = {
          session,
          key,
          fence: new AbortController(),
          validUntil: sentAt + VALID_MS,
          expiry: undefined,
        };
        this.held = held;
        this.armExpiry(held);
        return;
      }
      await session.release(true);
    } catch (error) {
      this.nextAcquireAt = performance.now() + RETRY_MS;
      if (session !== undefined) await session.release(true).catch(() => undefined);
      this.log.warn(
        `Could not take an owner lock (leases wait out leaseMs after a crash until it can): ${describeError(error)}`,
      );
    }
  }

  private look(): void {
    const startedAt = performance.now();
    void this.lookOnce().finally(() => {
      // Timed from the look's start: a slow look does not add its own length to the next wait.
      const wait = Math.max(WATCH_GAP_MS, startedAt + WATCH_MS - performance.now());
      if (!this.stopped) this.watchTimer = this.schedule(this.watch, wait);
    });
  }

  private async lookOnce(): Promise<void> {
    const shorten = this.store.shortenOrphanedLeases?.bind(this.store);
    if (shorten === undefined) return;
    const full = this.looks++ % FULL_LOOK_EVERY === 0;
    try {
      const count = await shorten(TAKEOVER_GRACE_MS, full);
      this.lastWatchError = undefined;
      if (count === 0) return;
      this.log.warn(
        // A free owner lock says only that its session ended: with its process, or alone (a
        // cut connection; the owner then fenced itself and lives on under a new lock). Nothing
        // here tells the two apart, so the line claims neither.
        `${count} message(s) leased by a dispatcher whose owner lock was released (its process ended or its lock connection was lost): their leases end in ${TAKEOVER_GRACE_MS} ms and they are claimed again then`,
      );
      clearTimeout(this.wakeTimer);
      this.wakeTimer = this.schedule(() => {
        if (!this.stopped) this.wake();
      }, TAKEOVER_GRACE_MS + 50);
    } catch (error) {
      // Once per streak: the claims meet the same outage and say so.
      const text = describeError(error);
      if (this.lastWatchError === undefined) {
        this.log.warn(`Looking for the leases of ended dispatchers failed: ${text}`);
      }
      this.lastWatchError = text;
    }
  }
}
