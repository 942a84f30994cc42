import { describeError } from '../../internal/describe-error';
import type { ResolvedOutboxOptions } from '../../options/resolve-outbox-options';
import type {
  OutboxDeliveryPort,
  OutboxDeliveryPartitionsPort,
} from '../../store/ports/outbox-store.port';
import type { DispatcherLog } from '../dispatcher-log';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import { within } from '../sleep';
import type { OwnedBacklog } from './owned-backlog';
import type { PartitionOwnership } from './partition-ownership';
import { ReadFloor } from './read-floor';
import { idAfter } from '../../store/rows/outbox-row.mapper';

/** Waiting rows promoted per look, as the unlocker does. */
const ORPHANS_PER_LOOK = 1_000;
/** Sweeps asked for closer together than this are one. */
const SWEEPS_APART_MS = 5;
/** The most sweeps kept asked for at once: the latest beyond it wait for the timer's sweep. */
const MAX_SWEEPS_ASKED = 1_000;
/**
 * How many rows parked since the table's statistics were last refreshed make the owner refresh
 * them (ANALYZE), and how often at most: autovacuum does the same once the park's updates pass
 * its threshold, a minute or more later, and until then a parked backlog counted pending made
 * every sweep a walk of the whole table (bench P9P: other keys' p99 13-26 x).
 */
const ANALYSE_AFTER_PARKED = 10_000;
const ANALYSE_EVERY_MS = 60_000;
/** The first read after partitions are gained asks for this part of a batch. */
const FIRST_READ_PART = 10;
/**
 * After the log names a commit, the owner reads from it again this long after: the log can hand
 * a commit over before a new snapshot shows it (the commit is in the log before the server marks
 * it ended; with synchronous replication, until the standby answers), and a read in that moment
 * finds nothing. The table's sweep is the last resort.
 */
const NAMED_LOOKS_MS = [25, 250, 2_500] as const;

/** What the reader needs of the pipeline: its database watchdog and its outage pause. */
export type ReaderPipeline = Pick<DeliveryPipeline, 'watchdog' | 'dbCallMs' | 'pause'>;

/** What an owned reader is made of. */
export interface OwnedReaderParts {
  readonly store: OutboxDeliveryPartitionsPort;
  /** Where held keys' rows are parked. */
  readonly park: OutboxDeliveryPort['park'];
  readonly backlog: OwnedBacklog;
  readonly ownership: PartitionOwnership;
  readonly pipeline: ReaderPipeline;
  readonly options: ResolvedOutboxOptions;
  readonly log: DispatcherLog;
  /** Wakes the owner loop (a sweep fell due). */
  readonly wake: () => void;
  /** How often the table is swept from its start (the poll's interval, or the log's sweep's). */
  readonly sweepIntervalMs: number;
}

/**
 * Reads the owned partitions into the backlog, each row once, without locking or writing it:
 * after the `ReadFloor`, or as a sweep from the start of the table, which finds what the floor
 * left behind (retries fallen due, keys that were held back, rows of partitions just taken). A
 * key found held back by a row not in memory is parked. Before a sweep, waiting rows that nothing
 * holds back any more are promoted (this mode starts no unlocker).
 */
export class OwnedReader {
  private readonly floor = new ReadFloor();
  /** When the next sweep on the timer is due (monotonic clock). */
  private periodicAt = 0;
  /**
   * The earlier sweeps asked for (retries and delayed messages falling due), in order: each is
   * kept until a sweep starts after it, so that one asked for later than another is not lost.
   */
  private dueAt: number[] = [];
  /** When the timer of the first of `dueAt` fires; undefined when none is set. */
  private timerAt: number | undefined;
  /** Where the sweep in progress reads next; undefined when none is. */
  private sweepFrom: string | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Whether a read after the floor may find more now: a wake-up came, or the last filled its limit. */
  private more = true;
  /** Wake-ups so far: one that comes while a read runs keeps `more` (the read may predate it). */
  private wakes = 0;
  /** The lowest id the log named as committed since the last read after the floor began. */
  private namedFrom: string | undefined;
  /** When the next look for orphaned waiting rows is due (monotonic clock). */
  private orphansAt = 0;
  /** Rows parked since the statistics were last refreshed, and when they may be again. */
  private parkedSinceAnalyse = 0;
  private analyseAt = 0;
  /** Whether the next read is the short first one after partitions were gained. */
  private shortNext = false;
  /** For each of `NAMED_LOOKS_MS`, the looks again still to come, in time order. */
  private readonly looks: { at: number; from: string }[][] = NAMED_LOOKS_MS.map(() => []);
  private lookTimer: NodeJS.Timeout | undefined;
  /** When the look timer fires; undefined when none is set. */
  private lookTimerAt: number | undefined;

  constructor(private readonly parts: OwnedReaderParts) {}

  /** Whether a sweep is under way (its next read continues it). */
  get sweeping(): boolean {
    return this.sweepFrom !== undefined;
  }

  /** Whether a read may find rows now: a sweep under way, or new rows may be after the floor. */
  get wantsRead(): boolean {
    return this.sweeping || this.more;
  }

  /** Reads start from the start of the table again, with a sweep at once (a start). */
  reset(): void {
    this.floor.reset();
    this.periodicAt = 0;
    this.dueAt = [];
  }

  /** When the next sweep from the start of the table is due (monotonic clock). */
  private get sweepAt(): number {
    return Math.min(this.periodicAt, this.dueAt[0] ?? Infinity);
  }

  /** Something was written, or a drain begins: the next read looks after the floor. */
  woke(): void {
    this.more = true;
    this.wakes++;
  }

  /**
   * The log named `id` as committed: the next read after the floor starts at it if the floor has
   * passed it. A row can commit below the floor: its id was taken before its transaction had a
   * transaction id, so no snapshot counted it as running, and the floor moved past it (see
   * `ReadFloor`). The log names every commit, so on the log nothing waits for the sweep.
   */
  named(id: string): void {
    this.keepNamed(id);
    this.woke();
    const now = performance.now();
    NAMED_LOOKS_MS.forEach((delayMs, i) => {
      const queue = this.looks[i] ?? [];
      const at = now + delayMs;
      const last = queue[queue.length - 1];
      // Names within one delay of each other share a look: at most one per delay, as many
      // reads as the log's single look again 25 ms after a handover made before.
      if (last !== undefined && at - last.at < delayMs) {
        if (idAfter(last.from, id)) last.from = id;
      } else {
        queue.push({ at, from: id });
      }
    });
    this.armLook();
  }

  /** Sets the timer of the first look again to come. */
  private armLook(): void {
    let first: number | undefined;
    for (const queue of this.looks) {
      const at = queue[0]?.at;
      if (at !== undefined && (first === undefined || at < first)) first = at;
    }
    if (first === this.lookTimerAt) return;
    clearTimeout(this.lookTimer);
    this.lookTimer = undefined;
    this.lookTimerAt = first;
    if (first === undefined) return;
    this.lookTimer = setTimeout(() => this.lookAgain(), Math.max(0, first - performance.now()));
    this.lookTimer.unref();
  }

  /** The looks fallen due: the next read after the floor starts at the lowest of them. */
  private lookAgain(): void {
    this.lookTimer = undefined;
    this.lookTimerAt = undefined;
    const now = performance.now();
    let due = false;
    for (const queue of this.looks) {
      while (queue[0] !== undefined && queue[0].at <= now) {
        this.keepNamed(queue[0].from);
        queue.shift();
        due = true;
      }
    }
    this.armLook();
    if (!due) return;
    this.woke();
    this.parts.wake();
  }

  private keepNamed(id: string): void {
    if (this.namedFrom === undefined || idAfter(this.namedFrom, id)) this.namedFrom = id;
  }

  stop(): void {
    clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    this.timerAt = undefined;
    clearTimeout(this.lookTimer);
    this.lookTimer = undefined;
    this.lookTimerAt = undefined;
    for (const queue of this.looks) queue.length = 0;
  }

  /** Starts a sweep when one is due, after promoting orphaned waiting rows. */
  async sweepIfDue(): Promise<void> {
    if (this.sweeping || performance.now() < this.sweepAt) return;
    await this.promoteOrphans();
    this.startSweep();
  }

  /**
   * A sweep walks the table from its start, in reads of a batch, skipping what is held in
   * memory. Keys held back are looked at again.
   */
  startSweep(): void {
    const now = performance.now();
    this.sweepFrom = '0';
    this.periodicAt = now + this.parts.sweepIntervalMs;
    // What falls due later than this sweep's start may lie behind where it reads by then.
    this.dueAt = this.dueAt.filter((at) => at > now && at < this.periodicAt);
    this.arm();
    this.parts.backlog.forgetHeld();
  }

  /**
   * Partitions were gained (taken at the start, or from an owner whose heartbeat ended): their
   * rows may lie anywhere below the floor, so a sweep starts at once. Its first read asks for a
   * tenth of a batch, so that the oldest rows, those that waited longest (a dead owner's), go to
   * the broker while the rest is read: a whole batch took 100-170 ms to read after a takeover,
   * and its first message reached the consumer 170-300 ms after the publish began (bench T1).
   */
  gained(): void {
    this.shortNext = true;
    this.sweepSoon(0);
  }

  /**
   * Sweeps from the start of the table `delayMs` from now (a retry or a delayed message falls
   * due then), besides any sweep asked for before it.
   */
  sweepSoon(delayMs: number): void {
    const at = performance.now() + Math.max(0, delayMs);
    if (at >= this.periodicAt) return;
    // Asks a few milliseconds apart are one sweep.
    if (this.dueAt.some((d) => Math.abs(d - at) < SWEEPS_APART_MS)) return;
    // Past so many, a later ask waits for the sweep on the timer.
    if (this.dueAt.length >= MAX_SWEEPS_ASKED && at > (this.dueAt.at(-1) ?? 0)) return;
    if (this.dueAt.length >= MAX_SWEEPS_ASKED) this.dueAt.pop();
    const i = this.dueAt.findIndex((d) => d > at);
    if (i === -1) this.dueAt.push(at);
    else this.dueAt.splice(i, 0, at);
    this.arm();
  }

  /** Sets the timer that wakes the owner loop for the first sweep asked for. */
  private arm(): void {
    const first = this.dueAt[0];
    if (first === this.timerAt) return;
    clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    this.timerAt = first;
    if (first === undefined) return;
    this.sweepTimer = setTimeout(
      () => {
        this.sweepTimer = undefined;
        this.timerAt = undefined;
        this.parts.wake();
      },
      Math.max(0, first - performance.now()),
    );
    this.sweepTimer.unref();
  }

  /**
   * One read into the backlog: the sweep's next, or after the floor. Resolves to the rows it
   * found; never throws (a failure pauses delivery as an outage).
   */
  async read(): Promise<number> {
    const { store, backlog, ownership, pipeline, options } = this.parts;
    const partitions = ownership.readable();
    if (partitions.length === 0) return 0;
    const { batchSize } = options.dispatcher;
    const limit = this.shortNext ? Math.ceil(batchSize / FIRST_READ_PART) : batchSize;
    this.shortNext = false;
    const sweeping = this.sweepFrom !== undefined;
    const named = sweeping ? undefined : this.namedFrom;
    if (!sweeping) this.namedFrom = undefined;
    const floor = this.floor.after;
    const after =
      this.sweepFrom ?? (named !== undefined && !idAfter(named, floor) ? idBefore(named) : floor);
    const read = backlog.open();
    const wakes = this.wakes;
    try {
      const found = await pipeline.watchdog.run('read of owned partitions', () =>
        store.readOwned(partitions, limit, {
          after,
          ids: backlog.idsAfter(after),
          keys: backlog.held,
        }),
      );
      this.floor.saw(after, found);
      // A key held back by a row not in memory (backing off, dead under 'block', parked): its
      // rows are parked, out of every later read, until a settle moves the key on and gives
      // them back.
      const held = backlog.takeIn(read, found);
      if (held.length > 0) {
        const parked = await pipeline.watchdog.run('park of held keys', () =>
          this.parts.park(held),
        );
        await this.afterPark(parked);
      }
      const last = found.records[found.records.length - 1];
      if (sweeping) this.sweepFrom = found.records.length < limit ? undefined : last?.id;
      // A wake-up during the read (a commit after its snapshot, perhaps) still asks for one more.
      else this.more = found.records.length >= limit || this.wakes !== wakes;
      return found.records.length;
    } catch (error) {
      if (named !== undefined) this.keepNamed(named);
      pipeline.pause(error, 'reading the owned partitions failed');
      return 0;
    } finally {
      backlog.close(read);
    }
  }

  /**
   * Every `unlocker.intervalMs`, before a sweep: promotes waiting rows that nothing holds back
   * any more, so that the sweep reads them.
   */
  private async promoteOrphans(): Promise<void> {
    const now = performance.now();
    if (now < this.orphansAt) return;
    const { options, log, pipeline, store } = this.parts;
    this.orphansAt = now + options.unlocker.intervalMs;
    try {
      const promoted = await pipeline.watchdog.run('promotion of orphaned messages', () =>
        store.promoteOrphans(ORPHANS_PER_LOOK),
      );
      if (promoted > 0) {
        log.warn(`Promoted ${promoted} waiting message(s) that nothing was holding back`);
      }
    } catch (error) {
      // Only a safety net: the next look tries again.
      log.warn(
        `Promoting waiting messages that nothing holds back failed: ${describeError(error)}`,
      );
    }
  }

  /**
   * After a park: refreshes the table's statistics once many rows were parked (see
   * ANALYSE_AFTER_PARKED). Only a plan's matter, so not through the watchdog: an ANALYZE that
   * runs long on a big table must not read as a stuck database and pause delivery. The read
   * waits for it at most one database call's time; a failure is one WARN and delivery goes on.
   */
  private async afterPark(parked: number): Promise<void> {
    this.parkedSinceAnalyse += parked;
    const now = performance.now();
    if (this.parkedSinceAnalyse < ANALYSE_AFTER_PARKED || now < this.analyseAt) return;
    const { log, store, pipeline } = this.parts;
    const rows = this.parkedSinceAnalyse;
    this.parkedSinceAnalyse = 0;
    this.analyseAt = now + ANALYSE_EVERY_MS;
    const refresh = store.refreshStatistics().then(
      () => true,
      (error: unknown) => {
        log.warn(
          `Refreshing the table's statistics after parking ${rows} message(s) failed (reads may be slow until autovacuum analyses it): ${describeError(error)}`,
        );
        return false;
      },
    );
    const done = await within(refresh, pipeline.dbCallMs);
    if (done?.value === true) {
      log.log(
        `Parked ${rows} message(s) held back behind their keys' heads; refreshed the table's statistics so that reads pass them over`,
      );
    }
  }
}

/** The id just before `id` (decimal text): a read after it starts at `id`. */
function idBefore(id: string): string {
  const n = BigInt(id);
  return n > 0n ? (n - 1n).toString() : '0';
}
