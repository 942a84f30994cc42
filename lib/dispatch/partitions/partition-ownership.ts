import { randomBytes } from 'node:crypto';
import { describeError } from '../../internal/describe-error';
import type {
  OutboxDeliveryPartitionsPort,
  PartitionBeat,
  PartitionFence,
  PartitionMember,
} from '../../store/ports/outbox-store.port';
import type { DispatcherLog } from '../dispatcher-log';
import { partitionsFor } from './partition-assignment';

/**
 * How many beats in a row may find the `'leases'` mode lock tried by another owner before this
 * one waits as for a `'leases'` dispatcher: owners beating apart settle it in one or two.
 */
const CHECKS_MET_MAX = 5;

/** What ownership needs of its dispatcher. */
export interface OwnershipParts {
  readonly store: OutboxDeliveryPartitionsPort;
  /** The dispatcher's `instanceId`: a label; ownership belongs to this process. */
  readonly label: string;
  /**
   * How long each heartbeat holds: this process stops publishing by then unless a newer beat
   * lands, and others take its partitions only after it (stored with the heartbeat).
   */
  readonly timeoutMs: number;
  readonly log: DispatcherLog;
  /** Whether a partition has messages in flight: it is handed over only once it has none. */
  readonly busy: (partition: number) => boolean;
  /** Called when partitions were gained (read them now). */
  readonly gained: () => void;
  /**
   * This process's share among the live ones (`self` first). @default `partitionsFor`: an even
   * spread. The log's reader wants every partition while it holds the log, and none otherwise.
   */
  readonly share?: (self: string, live: readonly string[]) => readonly number[];
  /** The monotonic clock. @default performance.now */
  readonly now?: () => number;
  /**
   * The owner lock whose key each heartbeat names, so that others take this process's
   * partitions about two seconds after it dies rather than `timeoutMs` (`MemberLock`). Absent:
   * the heartbeat alone (`dispatcher.ownerLock: false`, a port without sessions).
   */
  readonly lock?: OwnershipLock;
}

/** What ownership asks of its owner lock (`MemberLock`). */
export interface OwnershipLock {
  /** Takes a lock where none counts. */
  ensure(): Promise<void>;
  /** The key a heartbeat names now, or null. */
  key(): number | null;
  /** Whether the lock of `key` still counts. */
  holds(key: number): boolean;
  start(): void;
  stop(): Promise<void>;
}

/**
 * - `idle`: not started, or stopped;
 * - `waiting`: a dispatcher of the `'leases'` mode works the table: this one holds nothing and
 *   beats until they are gone;
 * - `owning`: beating and holding partitions;
 * - `lapsed`: a heartbeat did not land within the timeout, so other dispatchers may hold this
 *   one's partitions by now: everything held is dropped (publishes fenced), taken again once a
 *   beat lands.
 */
export type OwnershipState = 'idle' | 'waiting' | 'owning' | 'lapsed';

/**
 * This dispatcher process's share of the partitions (docs/delivery.md, "Partitions"). Every
 * `timeoutMs / 5` (a fifth of that while partitions change hands) it beats on the database
 * clock (one statement: the heartbeat with the validity it promises, the processes delivering,
 * and what the owners table says it holds),
 * works out its share (`partitionsFor`), hands over the partitions another should own once
 * nothing of them is in flight, gives back what the table still names it for but it no longer
 * holds (after a lapse), and takes those it should own that are free or whose owner's own
 * validity ran out.
 *
 * What it holds is good until `timeoutMs` after the last beat that landed was sent, less a
 * margin: before then no one can take its partitions (their owner's heartbeat is fresh), after
 * it this dispatcher must not publish them (`holds`, and `fence` aborts). A settle is fenced by
 * the generations it took them at, in the database, whatever this clock says.
 */
export class PartitionOwnership {
  /** This process's id in the ownership tables: two processes never share one. */
  readonly id: string;
  private current: OwnershipState = 'idle';
  private readonly held = new Map<number, string>();
  private handingOver = new Set<number>();
  private validUntil = 0;
  /** Whether it delivered since its last beat that landed, without a lapse. */
  private working = false;
  private lost = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  /** Fires when what is held stops being valid, so that publishes under it stop then. */
  private expiry: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private readonly now: () => number;
  private readonly beatMs: number;
  /**
   * The beat while partitions change hands (this one hands some over once idle, or waits for
   * its share from a peer doing so): a fifth of `beatMs`, so that a hand-over takes a few tenths
   * of a second after the peer saw the join, not up to two more beats (bench P6P: the second of
   * two dispatchers started together published 30 % of a drain).
   */
  private readonly handOverBeatMs: number;
  /** Whether partitions are changing hands: beat at `handOverBeatMs`. */
  private handingOff = false;
  /**
   * Until when (monotonic clock) it beats at `handOverBeatMs` after its start: processes started
   * together see each other a few tenths of a second after the first took every partition,
   * rather than at its next beat (bench P6P: of two started together, the second published about
   * a fifth of a two-second drain, and the two drained 0.77 x one).
   */
  private startingUntil = 0;
  private readonly marginMs: number;
  private readonly member: PartitionMember;
  /** The last heartbeat failure logged, so that a streak is logged once. */
  private failing: string | undefined;
  private sharedLabelSaid = false;
  /** The partitions held after the previous rebalance: one held since is read from the start. */
  private readBefore = new Set<number>();
  /**
   * The lock key the last beat that landed named: while it does, what is held counts only as
   * long as that lock does (others end this heartbeat soon after finding it free).
   */
  private beatKey: number | null = null;
  /** The beat asked for when others' heartbeats end (MemberLock's look), and when it is due. */
  private takeTimer: NodeJS.Timeout | undefined;
  private takeAt = 0;
  /** A beat was asked for while one was under way: the next follows it at once. */
  private again = false;
  /**
   * Beats in a row whose check of the `'leases'` mode lock met another owner's check rather
   * than a `'leases'` dispatcher (see waitForLeasesMode); the next beat follows a moment later.
   */
  private checksMet = 0;
  /**
   * Whether the next beat that lands announces this process (`store.announce`): the first after
   * a start, so that the owners hand partitions over now rather than at their next beat.
   */
  private joining = false;

  constructor(private readonly parts: OwnershipParts) {
    this.now = parts.now ?? (() => performance.now());
    this.beatMs = Math.max(50, Math.floor(parts.timeoutMs / 5));
    this.handOverBeatMs = Math.max(50, Math.floor(this.beatMs / 5));
    this.marginMs = Math.max(50, Math.floor(parts.timeoutMs / 10));
    this.id = `${parts.label}#${randomBytes(6).toString('hex')}`;
    this.member = { id: this.id, label: parts.label, validMs: parts.timeoutMs };
  }

  get state(): OwnershipState {
    return this.current;
  }

  /** The partitions to read: held, valid, and not being handed over. */
  readable(): number[] {
    return [...this.held.keys()].filter(this.reader()).sort((a, b) => a - b);
  }

  /**
   * Whether a partition is among `readable()`, without listing them, for one pass over the
   * backlog: the holding's validity is judged once, when it is made.
   */
  reader(): (partition: number) => boolean {
    if (!this.valid()) return () => false;
    return (partition) => this.held.has(partition) && !this.handingOver.has(partition);
  }

  /** The generations of `partitions` as held now (a batch's settle fence). */
  fenceOf(partitions: Iterable<number>): PartitionFence {
    const fence = new Map<number, string>();
    for (const p of partitions) {
      const generation = this.held.get(p);
      if (generation !== undefined) fence.set(p, generation);
    }
    return fence;
  }

  /** Aborted when what is held now is lost (a lapse): publishes under it stop. */
  get fence(): AbortSignal {
    return this.lost.signal;
  }

  /** Whether `fence` (the holding it was taken under) still holds, read on the clock. */
  holds(fence: AbortSignal): boolean {
    return !fence.aborted && this.valid();
  }

  /** The first beat and take, then one every `timeoutMs / 5`. */
  async start(): Promise<void> {
    if (this.current !== 'idle') return;
    this.current = 'lapsed';
    this.startingUntil = this.now() + this.beatMs;
    this.joining = true;
    // A stop aborted the last holding's fence: what is taken from now on is a new one.
    if (this.lost.signal.aborted) this.lost = new AbortController();
    this.parts.lock?.start();
    this.ticking = this.tick();
    try {
      await this.ticking;
    } finally {
      this.ticking = undefined;
    }
    this.schedule();
  }

  /** Stops beating, hands every partition back and leaves; call once nothing is in flight. */
  async stop(): Promise<void> {
    if (this.current === 'idle') return;
    this.current = 'idle';
    clearTimeout(this.timer);
    clearTimeout(this.expiry);
    clearTimeout(this.takeTimer);
    this.takeTimer = undefined;
    this.timer = undefined;
    await this.ticking;
    const held = this.held.size;
    this.held.clear();
    this.working = false;
    this.lost.abort(new Error('the dispatcher stopped'));
    try {
      await this.parts.store.leave(this.id);
      // The other side of the hand-over logs what it takes.
      if (held > 0) {
        this.parts.log.log(
          `Delivery partitions: stopping, handed the ${held} held back for the others to take`,
        );
      }
      await this.announce();
    } catch (error) {
      this.parts.log.warn(
        `Could not hand the delivery partitions back at stop (the next dispatchers take them over once this heartbeat is ${this.parts.timeoutMs} ms old, or soon after its owner lock is released): ${describeError(error)}`,
      );
    }
    // Given up after leaving: a heartbeat still naming it would be ended once it is free.
    await this.parts.lock?.stop();
  }

  /**
   * Beats `afterMs` from now (or sooner): others' heartbeats were ended, and their partitions
   * are free to take then.
   */
  beatIn(afterMs: number): void {
    if (this.current === 'idle') return;
    const at = this.now() + afterMs;
    // One asked for sooner is kept: each look names only heartbeats it ended itself.
    if (this.takeTimer !== undefined && this.takeAt <= at) return;
    clearTimeout(this.takeTimer);
    this.takeAt = at;
    this.takeTimer = setTimeout(() => {
      this.takeTimer = undefined;
      this.beatSoon();
    }, afterMs);
    this.takeTimer.unref();
  }

  /** The owner lock stopped counting: what is held under it is dropped now. */
  lockLost(): void {
    this.valid();
  }

  /**
   * Beats now instead of at the next beat, where none is under way: the share changed (the
   * log's reader took the log, or lost it).
   */
  beatSoon(): void {
    if (this.current === 'idle') return;
    // One under way may have read the table before the change: another follows it at once.
    if (this.ticking !== undefined) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.timer = undefined;
    this.ticking = this.tick().finally(() => {
      this.ticking = undefined;
      this.schedule();
    });
  }

  private valid(): boolean {
    if (this.current !== 'owning') return false;
    if (this.now() >= this.validUntil) {
      this.lapse('its heartbeat did not land in time');
      return false;
    }
    if (this.beatKey !== null && this.parts.lock?.holds(this.beatKey) !== true) {
      this.lapse('the owner lock its heartbeat named was lost');
      return false;
    }
    return true;
  }

  private schedule(): void {
    if (this.current === 'idle') return;
    const again = this.again;
    this.again = false;
    this.timer = setTimeout(
      () => {
        this.ticking = this.tick().finally(() => {
          this.ticking = undefined;
          this.schedule();
        });
      },
      again
        ? 0
        : this.checksMet > 0
          ? // Apart, so that two owners that met do not meet again.
            5 + Math.floor(Math.random() * 45)
          : this.handingOff || this.now() < this.startingUntil
            ? this.handOverBeatMs
            : this.beatMs,
    );
  }

  private async tick(): Promise<void> {
    const { store, timeoutMs, log, lock } = this.parts;
    try {
      await lock?.ensure();
      const lockKey = lock?.key() ?? null;
      const sent = this.now();
      // Delivering goes on only through an unbroken run of beats: after a lapse, the `'leases'`
      // mode may have started meanwhile, so the check is made again.
      const beat = await store.beat({ ...this.member, lockKey }, this.working && this.valid());
      if (this.current === 'idle') return;
      if (this.failing !== undefined) {
        log.log(`Delivery partitions: heartbeats land again (after: ${this.failing})`);
        this.failing = undefined;
      }
      this.sayIfLabelShared(beat);
      if (!beat.working) return await this.waitForLeasesMode(beat);
      this.checksMet = 0;
      if (!this.working) {
        if (this.current === 'waiting') {
          log.log(
            "Delivery partitions: no dispatcher of the 'leases' mode works this table any more; delivering",
          );
        }
        this.working = true;
      }
      // Landed: no one can take these partitions until timeoutMs after it was written, which
      // was after it was sent, nor before the lock it names is found free.
      this.beatKey = lockKey;
      this.current = 'owning';
      this.validUntil = sent + timeoutMs - this.marginMs;
      // A beat that hangs (a locked table, a frozen connection) must still end the holding on
      // time: nothing else may be reading the clock while one long publish call runs.
      clearTimeout(this.expiry);
      this.expiry = setTimeout(() => this.valid(), Math.max(0, this.validUntil - this.now()) + 1);
      this.expiry.unref();
      this.checkHeld(beat.owned);
      if (this.current === 'owning') await this.rebalance(beat);
      if (this.joining) {
        this.joining = false;
        await this.announce();
      }
    } catch (error) {
      const text = describeError(error);
      if (this.failing === undefined) log.warn(`Delivery partitions: a heartbeat failed: ${text}`);
      this.failing = text;
      this.valid();
    }
  }

  /** Drops what the table says another process holds now (it took it after a lapse). */
  private checkHeld(owned: PartitionFence): void {
    const gone = [...this.held].filter(([p, generation]) => owned.get(p) !== generation);
    if (gone.length > 0) this.lapse(`${gone.length} of its partition(s) were taken over`);
  }

  private async rebalance(beat: PartitionBeat): Promise<void> {
    const { store, busy, gained, log, share = partitionsFor } = this.parts;
    const wanted = new Set(share(this.id, [this.id, ...beat.live]));
    // Named for this process in the table but not held here: left by a lapse. Taken back if
    // still this process's share (nobody else held them: same generation), else handed over.
    for (const [p, generation] of beat.owned) {
      if (this.held.has(p)) continue;
      this.held.set(p, generation);
      if (!wanted.has(p)) this.handingOver.add(p);
    }
    // Handed over once idle: the next owner must not publish a key's message while this one's
    // earlier message may still be in flight.
    for (const p of this.held.keys()) if (!wanted.has(p)) this.handingOver.add(p);
    const idle = [...this.handingOver].filter((p) => this.held.has(p) && !busy(p));
    if (idle.length > 0) {
      await store.release(this.id, idle);
      for (const p of idle) {
        this.held.delete(p);
        this.handingOver.delete(p);
      }
      log.log(
        `Delivery partitions: handed ${idle.length} over (${beat.live.length + 1} dispatcher(s) share them now), holding ${this.held.size}`,
      );
      // Their new owner takes them at once rather than at its next beat.
      await this.announce();
    }
    this.handingOver = new Set([...this.handingOver].filter((p) => this.held.has(p)));
    const missing = [...wanted].filter((p) => !this.held.has(p));
    if (missing.length > 0) {
      const taken = await store.take(this.id, missing);
      if (this.current !== 'owning') return;
      const from = new Map<string, number>();
      for (const [p, { generation, previous }] of taken) {
        this.held.set(p, generation);
        this.handingOver.delete(p);
        if (previous !== null && previous !== this.id) {
          from.set(previous, (from.get(previous) ?? 0) + 1);
        }
      }
      if (taken.size > 0) {
        const over = [...from].map(([owner, n]) => `${n} from ${owner}, whose heartbeat ended`);
        log.log(
          `Delivery partitions: took ${taken.size}${over.length > 0 ? ` (${over.join('; ')})` : ''}, holding ${this.held.size}`,
        );
      }
    }
    this.handingOff = this.handingOver.size > 0 || [...wanted].some((p) => !this.held.has(p));
    // Partitions gained (taken, or taken back after a lapse): their rows may lie below the floor.
    if ([...this.held.keys()].some((p) => !this.handingOver.has(p) && !this.readBefore.has(p))) {
      gained();
    }
    this.readBefore = new Set(this.held.keys());
  }

  /**
   * A dispatcher of the `'leases'` mode works the table: this one drops what it holds, gives
   * the table's partitions back once nothing of them is in flight, and beats until they leave.
   */
  private async waitForLeasesMode(beat: PartitionBeat): Promise<void> {
    const { store, busy, log } = this.parts;
    this.handingOff = false;
    if (this.current !== 'waiting') {
      const holders = await store.leasesModeHolders().catch(() => undefined);
      // Nobody holds the lock shared: the beat's exclusive try met another owner's, checking at
      // the same moment (both starting, or both after a lapse), not a `'leases'` dispatcher.
      // Beat again shortly rather than give the partitions up.
      if (holders?.length === 0 && this.checksMet < CHECKS_MET_MAX) {
        this.checksMet++;
        return;
      }
      this.checksMet = 0;
      if (this.held.size > 0) this.lapse("a dispatcher of the 'leases' mode works the table");
      this.current = 'waiting';
      this.working = false;
      clearTimeout(this.expiry);
      log.log(
        `Delivery partitions: waiting, delivering nothing, while dispatchers of the 'leases' mode work this table (${holders !== undefined && holders.length > 0 ? holders.join(', ') : 'they hold its leases mode lock'}): a rolling deploy switching the mode; delivery starts here once they are gone`,
      );
    }
    const idle = [...beat.owned.keys()].filter((p) => !busy(p));
    if (idle.length > 0) await store.release(this.id, idle);
    this.readBefore.clear();
  }

  /**
   * Tells the others the shares changed (see `joining`). Only a wake-up: when it fails they learn
   * of it at their next beat.
   */
  private async announce(): Promise<void> {
    await this.parts.store.announce?.().catch(() => undefined);
  }

  private sayIfLabelShared(beat: PartitionBeat): void {
    if (!beat.labelShared || this.sharedLabelSaid) return;
    this.sharedLabelSaid = true;
    this.parts.log.warn(
      `Another live dispatcher process was given this one's instanceId (${this.parts.label}): the partitions are owned per process (this one is ${this.id}), so both deliver safely, but logs, metrics and the admin views cannot tell them apart by instanceId; give each replica its own (for example from the hostname)`,
    );
  }

  /** Everything held is dropped: the publishes under it stop, their settles would be refused. */
  private lapse(reason: string): void {
    if (this.current === 'owning' && this.held.size > 0) {
      this.parts.log.warn(
        `Delivery partitions: ${reason}; dropping the ${this.held.size} held and stopping their publishes until a heartbeat lands`,
      );
    }
    this.held.clear();
    this.handingOver.clear();
    this.handingOff = false;
    this.readBefore.clear();
    this.working = false;
    this.lost.abort(new Error(`the delivery partitions were lost: ${reason}`));
    this.lost = new AbortController();
    if (this.current === 'owning') this.current = 'lapsed';
  }
}
