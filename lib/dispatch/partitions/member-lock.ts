import { describeError } from '../../internal/describe-error';
import type { EndingMember } from '../../store/ports/outbox-store.port';
import type { SqlSession } from '../../store/ports/sql-port';
import type { DispatcherLog } from '../dispatcher-log';
import {
  OWNER_LOCK_GRACE_MS,
  OWNER_LOCK_HEARTBEAT_MS,
  OWNER_LOCK_LOOK_GAP_MS,
  OWNER_LOCK_LOOK_MS,
  OWNER_LOCK_VALID_MS,
  OwnerLockSession,
  Repeating,
  type OwnerLockLapse,
  type OwnerLockSessionParts,
} from '../owner-lock-session';

/** What the member lock needs: sessions, the owner lock on one, and the look at the others. */
export interface MemberLockParts extends Pick<OwnerLockSessionParts, 'session' | 'lock'> {
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
  /** The lock counts again (its session answered after a silence): beat now to take back. */
  readonly answered: () => void;
  /** Others' heartbeats were ended: their partitions are free `afterMs` from now. */
  readonly gone: (afterMs: number) => void;
}

/**
 * Takeover after a crash for delivery partitions (docs/delivery.md, "Partitions"): as the
 * `'leases'` mode's owner lock does for leases. The process holds an owner lock on a session of
 * its own and names its key in each heartbeat; the database frees the lock when the session
 * ends, which a killed process's does at once. Every process looks for others whose lock is free
 * and ends their heartbeat a grace later, so that their partitions are taken over in about two
 * seconds instead of their `partitionTimeoutMs`. A process whose session ends while it lives (a
 * cut connection) drops what it holds within OWNER_LOCK_VALID_MS, before the grace ends, and
 * beats again under a new key (never the old one) or, without one, under its heartbeat alone.
 *
 * A session that only stops answering for a while (this process or the server stalled under
 * load) is kept: what the process holds is dropped as for a lost one, but the lock stays held,
 * so no other process takes its partitions over for the stall, and once the session answers
 * again the same key counts and the process takes back what the table still names it for. A
 * frozen process keeps its session, and its lock: it is judged by its heartbeat as before.
 */
export class MemberLock {
  private readonly lock: OwnerLockSession;
  private readonly heartbeats: Repeating;
  private readonly looks: Repeating;
  private stopped = true;
  private acquiring: Promise<void> | undefined;
  private lookFailing: string | undefined;

  constructor(private readonly parts: MemberLockParts) {
    this.lock = new OwnerLockSession({
      session: parts.session,
      lock: parts.lock,
      unlock: parts.unlock,
      lapsed: (_lock, why) => this.lapsed(why),
      keepOnSilence: true,
      answered: (_lock, silentMs) => this.answered(silentMs),
    });
    this.heartbeats = new Repeating(() => this.lock.ask(), OWNER_LOCK_HEARTBEAT_MS);
    this.looks = new Repeating(() => this.look(), OWNER_LOCK_LOOK_MS, OWNER_LOCK_LOOK_GAP_MS);
  }

  /** Starts asking the session and looking at the others; the lock is taken by `ensure`. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.heartbeats.start(OWNER_LOCK_HEARTBEAT_MS);
    this.looks.start();
  }

  /** Takes a lock where none counts (before a heartbeat names it); waits for a try under way. */
  async ensure(): Promise<void> {
    // key() drops one past its validity (its session closed) before another is taken.
    if (this.stopped || this.key() !== null) return;
    this.acquiring ??= this.acquire().finally(() => {
      this.acquiring = undefined;
    });
    await this.acquiring;
  }

  /** The key a heartbeat names: the lock's while it counts (else it lapses here), else null. */
  key(): number | null {
    const held = this.lock.current;
    return held !== undefined && this.lock.counts(held) ? held.key : null;
  }

  /**
   * Whether the lock of `key` still counts, read on the clock: a process held up past the
   * lock's validity (its expiry timer could not fire) must not publish before it knows.
   */
  holds(key: number): boolean {
    const held = this.lock.current;
    return held?.key === key && this.lock.counts(held);
  }

  /** Stops looking and gives the lock up: call once the heartbeat naming it is gone. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.heartbeats.stop();
    this.looks.stop();
    await this.acquiring;
    await this.lock.giveUp();
  }

  private async acquire(): Promise<void> {
    try {
      await this.lock.take(() => this.stopped);
    } catch (error) {
      this.parts.log.warn(
        `Delivery partitions: could not take an owner lock (after a crash this process's partitions wait out its partitionTimeoutMs until it can): ${describeError(error)}`,
      );
    }
  }

  private lapsed(why: OwnerLockLapse): void {
    if (!this.stopped) {
      this.parts.log.warn(
        why.kind === 'failed'
          ? `Delivery partitions: its lock's session was lost (${describeError(why.error)}); what this process holds is dropped, and its next heartbeat names a new lock`
          : `Delivery partitions: its lock's session did not answer for ${OWNER_LOCK_VALID_MS} ms (this process or the database stalled); what this process holds is dropped until the session answers again (the lock is kept meanwhile, so no other process takes its partitions over)`,
      );
    }
    this.parts.lost();
  }

  private answered(silentMs: number): void {
    if (this.stopped) return;
    this.parts.log.log(
      `Delivery partitions: its lock's session answered again after ${Math.round(silentMs)} ms without counting; taking back what the table still names this process for`,
    );
    this.parts.answered();
  }

  private async look(): Promise<void> {
    try {
      const ending = await this.parts.endGone(OWNER_LOCK_GRACE_MS);
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
          `Delivery partitions: the owner lock of ${cut.join(', ')} was released (its process ended or its lock connection was lost): its partitions are taken over in ${OWNER_LOCK_GRACE_MS} ms`,
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
