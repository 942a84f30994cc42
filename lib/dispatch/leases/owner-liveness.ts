import { randomUUID } from 'node:crypto';
import { describeError } from '../../internal/describe-error';
import type { OutboxDeliveryPort, TakeoverLook } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import { ownerToken } from '../../store/shared-sql/owner-leases';
import type { DispatcherLog } from '../dispatcher-log';
import {
  OWNER_LOCK_GRACE_MS,
  OWNER_LOCK_HEARTBEAT_MS,
  OWNER_LOCK_LOOK_GAP_MS,
  OWNER_LOCK_LOOK_MS,
  OWNER_LOCK_VALID_MS,
  OwnerLockSession,
  Repeating,
  type HeldOwnerLock,
  type OwnerLockLapse,
} from '../owner-lock-session';
import { within } from '../sleep';

/**
 * Every how many looks (1 s) one reads which owners hold their lock now (PostgreSQL: a read of
 * the server's lock table, 1.3 ms idle and 3.8 ms with 2 000 advisory locks held); the looks
 * between try only the owners seen then, each by its lock, so a known owner's end is still
 * found within a look.
 */
const LIST_EVERY = 10;
/**
 * Every how many looks (10 s) one reads every owner with a lease in the table, not only those
 * listed alive: an owner that took its lock after one list and ended before the next.
 */
const FULL_LOOK_EVERY = 100;
/** How long `start()` waits for the first owner lock before claims begin without it. */
const START_WAIT_MS = 2_000;

/** The token a claim writes, and what ends the right to publish under it. */
export interface OwnerLease {
  readonly token: string;
  /**
   * Aborted when the owner lock the token names is lost (its session ended, or stopped
   * answering): the batch stops publishing and goes back. Absent for a plain token.
   */
  readonly fence?: AbortSignal;
}

/** The lock held now, and what this mode keeps beside it. */
interface HeldLock {
  readonly lock: HeldOwnerLock;
  readonly fence: AbortController;
  /**
   * Whether this session holds the table's `'leases'` mode lock: claims wait until it does (a
   * `'partitions'` dispatcher delivers from the table meanwhile). True where the store has no
   * other mode.
   */
  modeHeld: boolean;
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
  private readonly locks: OwnerLockSession | undefined;
  private readonly heartbeats: Repeating;
  private readonly watch: Repeating;
  private wakeTimer: NodeJS.Timeout | undefined;
  private stopped = true;
  private looks = 0;
  private lastWatchError: string | undefined;
  /** Who the claims wait for, as last said (a streak is logged once). */
  private waitingFor: string | undefined;
  private taking: Promise<void> | undefined;

  constructor(
    sql: SqlPort | undefined,
    private readonly store: OutboxDeliveryPort,
    private readonly log: DispatcherLog,
    /** Asks the claim loop for a claim now. */
    private readonly wake: () => void,
  ) {
    // Built only where the database can hold one (not SQLite, nor a port without sessions).
    const session = sql?.session?.bind(sql);
    const lock = store.lockOwner?.bind(store);
    if (session !== undefined && lock !== undefined && store.shortenOrphanedLeases !== undefined) {
      this.locks = new OwnerLockSession({
        session,
        lock,
        unlock: store.unlockOwner?.bind(store),
        lapsed: (lapsed, why) => this.lapsed(lapsed, why),
      });
    }
    this.heartbeats = new Repeating(() => this.beat(), OWNER_LOCK_HEARTBEAT_MS);
    this.watch = new Repeating(() => this.look(), OWNER_LOCK_LOOK_MS, OWNER_LOCK_LOOK_GAP_MS);
  }

  private get supported(): boolean {
    return this.locks !== undefined;
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
    this.heartbeats.start();
    this.watch.start();
  }

  /**
   * Stops the heartbeats, the watch for others' leases and the taking of new locks, but keeps
   * the lock held now (shutdown, while a batch still publishes under it): the database frees it
   * when `stop()` gives it up or the session ends.
   */
  stopWatching(): void {
    this.stopped = true;
    this.heartbeats.stop();
    this.watch.stop();
    clearTimeout(this.wakeTimer);
    // Without heartbeats it would otherwise count as lost, and be given up, a second from now.
    this.locks?.keepUnwatched();
  }

  /** Stops watching and gives the lock up (the session goes back to the pool, lock released). */
  async stop(): Promise<void> {
    this.stopWatching();
    // A take under way gives its lock up itself when it ends (stopped); not waited for long.
    if (this.taking !== undefined) await within(this.taking, OWNER_LOCK_VALID_MS);
    const held = this.held;
    if (held === undefined) return;
    this.held = undefined;
    held.fence.abort(new Error('owner lock lost'));
    // Unlocked before the connection goes back to the pool, or closed with it.
    await this.locks?.giveUp().catch(() => undefined);
  }

  /**
   * Whether claims may be made: always where the owner lock is not used (or not started: a
   * dispatcher driven by hand takes none); else while the lock's session holds the table's
   * `'leases'` mode lock (no `'partitions'` dispatcher delivers from the table). Without a lock
   * (the first one not taken yet, or lost), a store with such a mode waits for one.
   */
  get delivers(): boolean {
    if (!this.supported || this.stopped || this.store.enterLeasesMode === undefined) return true;
    return this.held?.modeHeld === true;
  }

  /**
   * Whether the owner lock `fence` was taken under still counts, read on the clock: the expiry
   * timer cannot fire while the event loop is held up, and what runs first on waking (a publish
   * awaiting its turn) must not send under a lock whose heartbeat is overdue, since its session
   * may have ended meanwhile and another dispatcher taken its rows over (ARCHITECTURE.md,
   * "Takeover after a crash", 6). Past its validity the lock is dropped here, as the timer would.
   * During shutdown the heartbeats have stopped: the fence alone counts, as the lock is kept
   * until the last batch publishing under it has settled.
   */
  holds(fence: AbortSignal): boolean {
    if (fence.aborted) return false;
    const held = this.held;
    if (held === undefined || held.fence.signal !== fence || this.stopped) return true;
    return this.locks?.counts(held.lock) ?? true;
  }

  /** The token for the next claim; names the owner lock while it counts. */
  lease(): OwnerLease {
    const held = this.held;
    if (
      held === undefined ||
      held.fence.signal.aborted ||
      performance.now() >= held.lock.validUntil
    ) {
      return { token: randomUUID() };
    }
    return { token: ownerToken(held.lock.key), fence: held.fence.signal };
  }

  private async beat(): Promise<void> {
    if (this.held === undefined) return this.acquire();
    await this.locks?.ask(async () => {
      const held = this.held;
      if (held !== undefined && !held.modeHeld) await this.enterMode(held);
    });
  }

  /** The lock stopped counting: its batches' fence is aborted; the next beat takes a new one. */
  private lapsed(lock: HeldOwnerLock, why: OwnerLockLapse): void {
    const held = this.held;
    if (held?.lock !== lock) return;
    this.held = undefined;
    held.fence.abort(new Error('owner lock lost'));
    const then = 'batches leased under it stop publishing and go back; taking a new owner lock';
    this.log.warn(
      why.kind === 'failed'
        ? `Lost the owner lock's database session (${describeError(why.error)}): ${then}`
        : why.kind === 'overdue'
          ? `The owner lock's session did not answer for ${OWNER_LOCK_VALID_MS} ms (was this process paused?): ${then}`
          : `The owner lock's session did not answer for ${OWNER_LOCK_VALID_MS} ms: ${then}`,
    );
  }

  /** Takes a lock where none is held; waits for a take under way rather than starting another. */
  private acquire(): Promise<void> {
    this.taking ??= this.acquireOnce().finally(() => {
      this.taking = undefined;
    });
    return this.taking;
  }

  private async acquireOnce(): Promise<void> {
    const locks = this.locks;
    if (locks === undefined || this.stopped || this.held !== undefined) return;
    try {
      const lock = await locks.take(() => this.stopped);
      if (lock === undefined) return;
      if (this.stopped) {
        await locks.giveUp();
        return;
      }
      const held: HeldLock = {
        lock,
        fence: new AbortController(),
        modeHeld: this.store.enterLeasesMode === undefined,
      };
      this.held = held;
      // A failure here is the session's: the heartbeats find it and take a new lock.
      await this.enterMode(held).catch(() => undefined);
    } catch (error) {
      this.log.warn(
        `Could not take an owner lock (leases wait out leaseMs after a crash until it can): ${describeError(error)}`,
      );
    }
  }

  /**
   * Takes the table's `'leases'` mode lock on the owner lock's session unless `'partitions'`
   * dispatchers deliver from the table; says once a streak who the claims wait for, and when
   * they may go again.
   */
  private async enterMode(held: HeldLock): Promise<void> {
    const enter = this.store.enterLeasesMode?.bind(this.store);
    if (enter === undefined || held.modeHeld) return;
    const others = await enter(held.lock.session);
    if (this.held !== held) return;
    if (others.length === 0) {
      held.modeHeld = true;
      if (this.waitingFor !== undefined) {
        this.log.log(
          "No dispatcher of the 'partitions' mode delivers from this table any more: claiming",
        );
        this.waitingFor = undefined;
      }
      this.wake();
      return;
    }
    const who = others.join(', ');
    if (this.waitingFor === undefined) {
      this.log.log(
        `Claiming nothing while dispatchers of the 'partitions' mode deliver from this table (${who}): a rolling deploy switching the mode; claims start here once they are gone`,
      );
    }
    this.waitingFor = who;
  }

  private async look(): Promise<void> {
    const shorten = this.store.shortenOrphanedLeases?.bind(this.store);
    if (shorten === undefined) return;
    const n = this.looks++;
    const look: TakeoverLook =
      n % FULL_LOOK_EVERY === 0 ? 'full' : n % LIST_EVERY === 0 ? 'list' : 'probe';
    try {
      const count = await shorten(OWNER_LOCK_GRACE_MS, look);
      this.lastWatchError = undefined;
      if (count === 0) return;
      this.log.warn(
        // A free owner lock says only that its session ended: with its process, or alone (a
        // cut connection; the owner then fenced itself and lives on under a new lock). Nothing
        // here tells the two apart, so the line claims neither.
        `${count} message(s) leased by a dispatcher whose owner lock was released (its process ended or its lock connection was lost): their leases end in ${OWNER_LOCK_GRACE_MS} ms and they are claimed again then`,
      );
      clearTimeout(this.wakeTimer);
      this.wakeTimer = setTimeout(() => {
        if (!this.stopped) this.wake();
      }, OWNER_LOCK_GRACE_MS + 50);
      this.wakeTimer.unref();
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
