import { describeError } from '../../internal/describe-error';
import type { OutboxPartitionStore, PartitionFence } from '../../store/ports/outbox-store.port';
import type { DispatcherLog } from '../dispatcher-log';
import { partitionsFor } from './partition-assignment';

/** What ownership needs of its dispatcher. */
export interface OwnershipParts {
  readonly store: OutboxPartitionStore;
  readonly instance: string;
  /** A dispatcher whose heartbeat is older than this is gone: its partitions are taken over. */
  readonly timeoutMs: number;
  readonly log: DispatcherLog;
  /** Whether a partition has messages in flight: it is handed over only once it has none. */
  readonly busy: (partition: number) => boolean;
  /** Called when partitions were gained (read them now). */
  readonly gained: () => void;
  /** The monotonic clock. @default performance.now */
  readonly now?: () => number;
}

/**
 * - `idle`: not started, or stopped;
 * - `owning`: beating and holding partitions;
 * - `lapsed`: a heartbeat did not land within the timeout, so other dispatchers may hold this
 *   one's partitions by now: everything held is dropped (publishes fenced), taken again once a
 *   beat lands.
 */
export type OwnershipState = 'idle' | 'owning' | 'lapsed';

/**
 * This dispatcher's share of the partitions (docs/delivery.md, "Partitions"). Every
 * `timeoutMs / 5` it beats on the database clock, reads the live dispatchers, works out its
 * share (`partitionsFor`), hands over the partitions another should own once nothing of them is
 * in flight, and takes those it should own that are free or whose owner's heartbeat stopped.
 *
 * What it holds is good until `timeoutMs` after the last beat that landed was sent, less a
 * margin: before then no one can take its partitions (their owner's heartbeat is fresh), after
 * it this dispatcher must not publish them (`holds`, and `fence` aborts). A settle is fenced by
 * the generations it took them at, in the database, whatever this clock says.
 */
export class PartitionOwnership {
  private current: OwnershipState = 'idle';
  private readonly held = new Map<number, string>();
  private handingOver = new Set<number>();
  private validUntil = 0;
  private lost = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  /** Fires when what is held stops being valid, so that publishes under it stop then. */
  private expiry: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private readonly now: () => number;
  private readonly beatMs: number;
  private readonly marginMs: number;

  constructor(private readonly parts: OwnershipParts) {
    this.now = parts.now ?? (() => performance.now());
    this.beatMs = Math.max(50, Math.floor(parts.timeoutMs / 5));
    this.marginMs = Math.max(50, Math.floor(parts.timeoutMs / 10));
  }

  get state(): OwnershipState {
    return this.current;
  }

  /** The partitions to read: held, valid, and not being handed over. */
  readable(): number[] {
    if (!this.valid()) return [];
    return [...this.held.keys()].filter((p) => !this.handingOver.has(p)).sort((a, b) => a - b);
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
    this.current = 'owning';
    await this.tick();
    this.schedule();
  }

  /** Stops beating, hands every partition back and leaves; call once nothing is in flight. */
  async stop(): Promise<void> {
    if (this.current === 'idle') return;
    this.current = 'idle';
    clearTimeout(this.timer);
    clearTimeout(this.expiry);
    this.timer = undefined;
    await this.ticking;
    this.held.clear();
    this.lost.abort(new Error('the dispatcher stopped'));
    try {
      await this.parts.store.leave(this.parts.instance);
    } catch (error) {
      this.parts.log.warn(
        `Could not hand the delivery partitions back at stop (the next dispatchers take them over once this heartbeat is ${this.parts.timeoutMs} ms old): ${describeError(error)}`,
      );
    }
  }

  private valid(): boolean {
    if (this.current !== 'owning') return false;
    if (this.now() < this.validUntil) return true;
    if (this.held.size > 0) this.lapse('its heartbeat did not land in time');
    return false;
  }

  private schedule(): void {
    if (this.current === 'idle') return;
    this.timer = setTimeout(() => {
      this.ticking = this.tick().finally(() => {
        this.ticking = undefined;
        this.schedule();
      });
    }, this.beatMs);
  }

  private async tick(): Promise<void> {
    const { store, instance, timeoutMs, log } = this.parts;
    const sent = this.now();
    try {
      const live = await store.beat(instance, timeoutMs);
      if (this.current === 'idle') return;
      // Landed: no one can take these partitions until timeoutMs after it was written, which
      // was after it was sent.
      this.current = 'owning';
      this.validUntil = sent + timeoutMs - this.marginMs;
      // A beat that hangs (a locked table, a frozen connection) must still end the holding on
      // time: nothing else may be reading the clock while one long publish call runs.
      clearTimeout(this.expiry);
      this.expiry = setTimeout(() => this.valid(), Math.max(0, this.validUntil - this.now()) + 1);
      this.expiry.unref();
      await this.check();
      await this.rebalance(live);
    } catch (error) {
      log.warn(`Delivery partitions: a heartbeat failed: ${describeError(error)}`);
      this.valid();
    }
  }

  /** Drops what the database says another dispatcher holds now (it took it after a lapse). */
  private async check(): Promise<void> {
    if (this.held.size === 0) return;
    const owned = await this.parts.store.owned(this.parts.instance);
    const gone = [...this.held].filter(([p, generation]) => owned.get(p) !== generation);
    if (gone.length > 0) this.lapse(`${gone.length} partition(s) were taken over`);
  }

  private async rebalance(live: readonly string[]): Promise<void> {
    const { store, instance, timeoutMs, busy, gained, log } = this.parts;
    const wanted = new Set(partitionsFor(instance, live));
    // Handed over once idle: the next owner must not publish a key's message while this one's
    // earlier message may still be in flight.
    for (const p of this.held.keys()) if (!wanted.has(p)) this.handingOver.add(p);
    const idle = [...this.handingOver].filter((p) => this.held.has(p) && !busy(p));
    if (idle.length > 0) {
      await store.release(instance, idle);
      for (const p of idle) {
        this.held.delete(p);
        this.handingOver.delete(p);
      }
    }
    this.handingOver = new Set([...this.handingOver].filter((p) => this.held.has(p)));
    const missing = [...wanted].filter((p) => !this.held.has(p));
    if (missing.length === 0) return;
    const taken = await store.take(instance, missing, timeoutMs);
    if (this.current === 'idle') return;
    for (const [p, generation] of taken) {
      this.held.set(p, generation);
      this.handingOver.delete(p);
    }
    if (taken.size > 0) {
      log.debug(`Delivery partitions: took ${taken.size}, holding ${this.held.size}`);
      gained();
    }
  }

  /** Everything held is dropped: the publishes under it stop, their settles would be refused. */
  private lapse(reason: string): void {
    this.parts.log.warn(
      `Delivery partitions: ${reason}; giving up the ${this.held.size} held and stopping their publishes until a heartbeat lands`,
    );
    this.held.clear();
    this.handingOver.clear();
    this.lost.abort(new Error(`the delivery partitions were lost: ${reason}`));
    this.lost = new AbortController();
    if (this.current !== 'idle') this.current = 'lapsed';
  }
}
