import {
  PartitionOwnership,
  type OwnershipParts,
} from '../../lib/dispatch/partitions/partition-ownership';
import { partitionsFor } from '../../lib/dispatch/partitions/partition-assignment';
import type { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import type { PartitionBeat, TakenPartition } from '../../lib/store/ports/outbox-store.port';
import { ALL_PARTITIONS } from '../../lib/store/shared-sql/delivery-partitions';

/**
 * An owners table in memory, shared by the owners of one test: who holds each partition at which
 * generation, and who beat when (the test's clock).
 */
class OwnersTable {
  readonly owner = new Map<number, { id: string; generation: number }>();
  readonly members = new Set<string>();
  readonly beats: { id: string; at: number }[] = [];
  /** The lock key each beat named. */
  readonly lockKeys: (number | null)[] = [];
  /** Who hears the members notice (each process's LISTEN), and how many were sent. */
  readonly listeners: (() => void)[] = [];
  announced = 0;
  clock = 0;
  /** How many beats to come find the `'leases'` mode lock taken (unless delivering already). */
  modeLockTaken = 0;
  /** Who holds that lock shared: `'leases'` dispatchers (none: another owner's try took it). */
  leasesHolders: string[] = [];

  store(): OwnershipParts['store'] {
    return {
      beat: (
        member: { id: string; lockKey?: number | null },
        stayWorking: boolean,
      ): Promise<PartitionBeat> => {
        const working = stayWorking || this.modeLockTaken-- <= 0;
        this.members.add(member.id);
        this.lockKeys.push(member.lockKey ?? null);
        this.beats.push({ id: member.id, at: this.clock });
        const owned = new Map<number, string>();
        for (const [p, o] of this.owner) if (o.id === member.id) owned.set(p, String(o.generation));
        return Promise.resolve({
          working,
          live: [...this.members].filter((m) => m !== member.id),
          labelShared: false,
          owned,
        });
      },
      take: (id: string, partitions: readonly number[]) => {
        const taken = new Map<number, TakenPartition>();
        for (const p of partitions) {
          if (this.owner.has(p)) continue;
          const generation = (this.generations.get(p) ?? 0) + 1;
          this.generations.set(p, generation);
          this.owner.set(p, { id, generation });
          taken.set(p, { generation: String(generation), previous: null });
        }
        return Promise.resolve(taken);
      },
      release: (id: string, partitions: readonly number[]) => {
        for (const p of partitions) if (this.owner.get(p)?.id === id) this.owner.delete(p);
        return Promise.resolve();
      },
      leave: (id: string) => {
        this.members.delete(id);
        for (const [p, o] of this.owner) if (o.id === id) this.owner.delete(p);
        return Promise.resolve();
      },
      leasesModeHolders: () => Promise.resolve(this.leasesHolders),
      announce: () => {
        this.announced++;
        for (const listener of this.listeners) listener();
        return Promise.resolve();
      },
    } as unknown as OwnershipParts['store'];
  }

  /** An owner's parts on this table and its clock, 5 s timeout; `busy` none unless given. */
  parts(label: string, busy: (partition: number) => boolean = () => false): OwnershipParts {
    return {
      store: this.store(),
      label,
      timeoutMs: 5_000,
      log,
      busy,
      gained: () => undefined,
      now: () => this.clock,
    };
  }

  held(id: string): number {
    return [...this.owner.values()].filter((o) => o.id === id).length;
  }

  private readonly generations = new Map<number, number>();
}

const log = { log: () => undefined, warn: () => undefined } as unknown as DispatcherLog;

describe('PartitionOwnership', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  /** Advances the fake clock by `ms`, letting each beat's statements answer. */
  async function advance(table: OwnersTable, ms: number): Promise<void> {
    for (let t = 0; t < ms; t += 10) {
      table.clock += 10;
      await jest.advanceTimersByTimeAsync(10);
    }
  }

  it('hands a busy partition over within a fifth of a beat of its going idle, and the joiner takes its share as soon', async () => {
    const table = new OwnersTable();
    const busy = new Set<number>();
    const parts = (label: string): OwnershipParts => table.parts(label, (p) => busy.has(p));
    const a = new PartitionOwnership(parts('a'));
    await a.start();
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    const b = new PartitionOwnership(parts('b'));
    await b.start();
    const share = partitionsFor(b.id, [a.id, b.id]);
    expect(table.held(b.id)).toBe(0);
    // Some of b's share has messages in flight at a when a next beats (1 000 ms).
    for (const p of share.slice(0, 10)) busy.add(p);
    await advance(table, 1_000);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length - share.length + 10);
    // They go idle: a releases them at its next beat, a fifth of a normal one later, and b,
    // short of its share, beats as often and takes them.
    busy.clear();
    await advance(table, 500);
    expect(table.held(b.id)).toBe(share.length);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length - share.length);
    // Once the hand-over is done, both beat at the normal pace again (a fifth of timeoutMs).
    const settled = table.beats.length;
    await advance(table, 2_000);
    expect(table.beats.length - settled).toBeLessThanOrEqual(5);
    await a.stop();
    await b.stop();
  });

  it('started together, two owners share the partitions within a few tenths of a second: each beats five times as often for its first beat period', async () => {
    const table = new OwnersTable();
    const parts = (label: string): OwnershipParts => table.parts(label);
    const a = new PartitionOwnership(parts('a'));
    await a.start();
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    await advance(table, 50);
    const b = new PartitionOwnership(parts('b'));
    await b.start();
    const share = partitionsFor(b.id, [a.id, b.id]);
    // a sees b at its next beat, 200 ms after its start rather than 1 000 ms, and hands b's
    // share over; b, short of it, beats as often and takes it.
    await advance(table, 400);
    expect(table.held(b.id)).toBe(share.length);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length - share.length);
    // Past its first second, a beats at the normal pace again.
    await advance(table, 1_000);
    const settled = table.beats.filter((beat) => beat.id === a.id).length;
    await advance(table, 2_000);
    expect(table.beats.filter((beat) => beat.id === a.id).length - settled).toBeLessThanOrEqual(3);
    await a.stop();
    await b.stop();
  });

  it("a beat whose try of the 'leases' mode lock met another owner's (nobody holds it shared) beats again a moment later rather than wait; a 'leases' dispatcher's hold is waited for", async () => {
    const table = new OwnersTable();
    const lines: string[] = [];
    const heard = {
      log: (line: string) => lines.push(line),
      warn: (line: string) => lines.push(line),
    } as unknown as DispatcherLog;
    table.modeLockTaken = 2;
    const a = new PartitionOwnership({ ...table.parts('a'), log: heard });
    await a.start();
    expect(table.held(a.id)).toBe(0);
    await advance(table, 150);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    expect(table.beats).toHaveLength(3);
    expect(lines.filter((l) => l.includes('waiting, delivering nothing'))).toEqual([]);
    await a.stop();

    table.modeLockTaken = 1_000;
    table.leasesHolders = ['session 4242'];
    const b = new PartitionOwnership({ ...table.parts('b'), log: heard });
    await b.start();
    await advance(table, 2_000);
    expect(table.held(b.id)).toBe(0);
    expect(lines.filter((l) => l.includes('waiting, delivering nothing'))).toEqual([
      expect.stringContaining('(session 4242)') as string,
    ]);
    await b.stop();
  });

  it('told by the members notice, owners hand over and take at once when one joins or leaves, not at their next beat', async () => {
    const table = new OwnersTable();
    const parts = (label: string): OwnershipParts => table.parts(label);
    const a = new PartitionOwnership(parts('a'));
    table.listeners.push(() => a.beatSoon());
    await a.start();
    // Past its first beat period a beats every second.
    await advance(table, 1_500);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    const lines: string[] = [];
    const b = new PartitionOwnership({
      ...parts('b'),
      log: {
        log: (line: string) => lines.push(line),
        warn: () => undefined,
      } as unknown as DispatcherLog,
    });
    table.listeners.push(() => b.beatSoon());
    const beatsBefore = table.beats.length;
    const announcedBefore = table.announced;
    await b.start();
    const share = partitionsFor(b.id, [a.id, b.id]);
    // b's first beat announces it: a beats, hands b's share over and announces that; b beats
    // and takes it. A few statements' turns, not a's next beat (up to a second away).
    await advance(table, 20);
    expect(table.held(b.id)).toBe(share.length);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length - share.length);
    // No storm: the join, the hand-over and their beats, each process's a few times at most.
    expect(table.announced - announcedBefore).toBe(2);
    expect(table.beats.length - beatsBefore).toBeLessThanOrEqual(6);
    // b leaves: its stop says so and announces it, and a takes every partition back at once.
    table.listeners.pop();
    await b.stop();
    expect(lines).toContain(
      `Delivery partitions: stopping, handed the ${share.length} held back for the others to take`,
    );
    await advance(table, 20);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    await a.stop();
  });

  it("with a share of every partition or none (the log's reader), the new reader takes them all as soon as the old one lets them go, told of the change rather than at its next beat", async () => {
    const table = new OwnersTable();
    const busy = new Set<number>();
    const readingNow = new Set<string>();
    const parts = (label: string): OwnershipParts => ({
      ...table.parts(label, (p) => busy.has(p)),
      share: (self) => (readingNow.has(self) ? ALL_PARTITIONS : []),
    });
    const a = new PartitionOwnership(parts('a'));
    const b = new PartitionOwnership(parts('b'));
    await a.start();
    await b.start();
    // Neither reads the log yet: neither holds anything, whoever beats.
    expect(table.owner.size).toBe(0);
    readingNow.add(a.id);
    a.beatSoon();
    await advance(table, 10);
    expect(table.held(a.id)).toBe(ALL_PARTITIONS.length);
    // The log changes hands with messages of a partition still in flight at a: a keeps that
    // one until it is idle, and b takes every other at once, the last one as soon as it is free.
    busy.add(7);
    readingNow.delete(a.id);
    readingNow.add(b.id);
    a.beatSoon();
    await advance(table, 10);
    b.beatSoon();
    await advance(table, 10);
    expect(table.held(a.id)).toBe(1);
    expect(table.held(b.id)).toBe(ALL_PARTITIONS.length - 1);
    busy.clear();
    await advance(table, 500);
    expect(table.held(a.id)).toBe(0);
    expect(table.held(b.id)).toBe(ALL_PARTITIONS.length);
    await a.stop();
    await b.stop();
  });

  it('counts what it holds only while the owner lock its heartbeat named does: lost, everything held is dropped and its publishes stopped, and the next beat names a new lock', async () => {
    const table = new OwnersTable();
    let key: number | null = null;
    let next = 41;
    const lock: OwnershipParts['lock'] = {
      ensure: () => {
        key ??= ++next;
        return Promise.resolve();
      },
      key: () => key,
      holds: (k) => k === key,
      start: () => undefined,
      stop: () => Promise.resolve(),
    };
    const owner = new PartitionOwnership({ ...table.parts('a'), lock });
    await owner.start();
    expect(table.lockKeys).toEqual([42]);
    expect(owner.readable()).toHaveLength(ALL_PARTITIONS.length);
    const fence = owner.fence;
    expect(owner.holds(fence)).toBe(true);
    // The lock's session ends; the heartbeat (valid for seconds more) does not save the holding.
    key = null;
    owner.lockLost();
    expect(fence.aborted).toBe(true);
    expect(owner.holds(fence)).toBe(false);
    expect(owner.readable()).toEqual([]);
    await advance(table, 1_000);
    expect(table.lockKeys.at(-1)).toBe(43);
    expect(owner.readable()).toHaveLength(ALL_PARTITIONS.length);
    expect(owner.holds(owner.fence)).toBe(true);
    await owner.stop();
  });

  it('started again after a stop, holds under a new fence: the stop aborted the old one for good', async () => {
    const table = new OwnersTable();
    const owner = new PartitionOwnership(table.parts('a'));
    await owner.start();
    const first = owner.fence;
    expect(owner.holds(first)).toBe(true);
    await owner.stop();
    expect(first.aborted).toBe(true);
    await owner.start();
    expect(owner.holds(first)).toBe(false);
    expect(owner.readable()).toHaveLength(ALL_PARTITIONS.length);
    expect(owner.holds(owner.fence)).toBe(true);
    await owner.stop();
  });
});
