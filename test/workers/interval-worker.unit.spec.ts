import { Logger } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { DataSource } from 'typeorm';
import { type OutboxModuleOptions, type OutboxPublisher } from '../../lib';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';
import { IntervalWorker, type IntervalWorkerName } from '../../lib/workers/interval-worker';
import type { ResolvedOutboxOptions } from '../../lib/options/resolve-outbox-options';
import { sleep } from '../support/wait-for';

const publisher: OutboxPublisher = {
  publish: (messages) => Promise.resolve(messages.map(() => ({ ok: true as const }))),
};
const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const INTERVAL_MS = 100;

// Timers are faked: time passes only when a test advances it.
const elapse = async (ms: number): Promise<void> => {
  await jest.advanceTimersByTimeAsync(ms);
};

function optionsFor(
  extra: Partial<OutboxModuleOptions> = {},
  name?: string,
): ResolvedOutboxOptions {
  return resolveOutboxOptions(
    {
      dataSource,
      publisher,
      unlocker: { intervalMs: INTERVAL_MS },
      cleaner: { intervalMs: INTERVAL_MS },
      ...extra,
    },
    true,
    name,
  );
}

/** Counts its runs, each taking `workMs`, and fails when told to. */
class CountingWorker extends IntervalWorker<number> {
  runs = 0;
  active = 0;
  maxActive = 0;
  failNext = false;

  constructor(
    options: ResolvedOutboxOptions,
    registry: SchedulerRegistry | undefined,
    worker: IntervalWorkerName,
    logger: Logger,
    private readonly workMs = 0,
  ) {
    super(options, registry, worker, logger);
  }

  hook(fn: () => void): void {
    this.safely(fn);
  }

  protected async work(): Promise<number> {
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    try {
      await sleep(this.workMs);
      if (this.failNext) {
        this.failNext = false;
        throw new Error('store down');
      }
      return ++this.runs;
    } finally {
      this.active--;
    }
  }
}

describe('IntervalWorker', () => {
  let logger: Logger;
  let errors: string[];
  const workers: CountingWorker[] = [];

  const make = (
    worker: IntervalWorkerName,
    {
      registry,
      options = optionsFor(),
      workMs,
    }: { registry?: SchedulerRegistry; options?: ResolvedOutboxOptions; workMs?: number } = {},
  ): CountingWorker => {
    const made = new CountingWorker(options, registry, worker, logger, workMs);
    workers.push(made);
    return made;
  };

  beforeEach(() => {
    jest.useFakeTimers();
    errors = [];
    logger = new Logger('test');
    jest.spyOn(logger, 'error').mockImplementation((message: unknown) => {
      errors.push(String(message));
    });
  });

  afterEach(async () => {
    const stopped = Promise.all(workers.splice(0).map((w) => w.beforeApplicationShutdown()));
    await elapse(INTERVAL_MS * 10);
    await stopped;
    jest.useRealTimers();
  });

  it.each<{ worker: IntervalWorkerName; name: string; timer: string }>([
    { worker: 'unlocker', name: 'default', timer: 'nestjs-outbox:unlocker' },
    { worker: 'cleaner', name: 'default', timer: 'nestjs-outbox:cleaner' },
    { worker: 'cleaner', name: 'audit', timer: 'nestjs-outbox:audit:cleaner' },
  ])(
    'lists the $worker of instance $name as $timer while it runs',
    async ({ worker, name, timer }) => {
      const registry = new SchedulerRegistry();
      const w = make(worker, { registry, options: optionsFor({}, name) });
      expect(registry.getIntervals()).toEqual([]);
      w.onApplicationBootstrap();
      w.start(); // a second start adds no second timer
      expect(registry.getIntervals()).toEqual([timer]);
      await w.beforeApplicationShutdown();
      expect(registry.getIntervals()).toEqual([]);
    },
  );

  it('does not start at bootstrap with autoStart: false, but runs by hand', async () => {
    const registry = new SchedulerRegistry();
    const w = make('unlocker', { registry, options: optionsFor({ autoStart: false }) });
    w.onApplicationBootstrap();
    await elapse(INTERVAL_MS * 3);
    expect(registry.getIntervals()).toEqual([]);
    expect(w.runs).toBe(0);
    const once = w.runOnce();
    await elapse(1);
    await expect(once).resolves.toBe(1);
  });

  it('runs on its interval without a registry, never overlapping itself', async () => {
    const w = make('cleaner', { workMs: INTERVAL_MS * 3 });
    w.start();
    // Ticks at 100, 200, 300 … ms; a run takes 300 ms, so the ticks in between are skipped.
    await elapse(INTERVAL_MS * 9 + 50);
    expect(w.runs).toBe(2);
    expect(w.maxActive).toBe(1);
    // runOnce waits for the run in progress rather than overlapping it.
    const once = w.runOnce();
    await elapse(INTERVAL_MS * 6);
    await expect(once).resolves.toBeGreaterThan(2);
    expect(w.maxActive).toBe(1);
  });

  it('logs a failed run under its timer name and keeps going', async () => {
    const w = make('unlocker');
    w.failNext = true;
    w.start();
    await elapse(INTERVAL_MS * 2 + 50);
    expect(errors).toContain('nestjs-outbox:unlocker failed: Error: store down');
    expect(w.runs).toBeGreaterThanOrEqual(1);
  });

  it('waits at shutdown for the run in progress, then runs no more', async () => {
    const w = make('cleaner', { workMs: INTERVAL_MS * 2 });
    w.start();
    await elapse(INTERVAL_MS + 10);
    expect(w.active).toBe(1);
    let stopped = false;
    const stopping = w.beforeApplicationShutdown().then(() => {
      stopped = true;
    });
    await elapse(INTERVAL_MS);
    expect(stopped).toBe(false);
    await elapse(INTERVAL_MS);
    await stopping;
    expect(w.active).toBe(0);
    expect(w.runs).toBe(1);
    await elapse(INTERVAL_MS * 4);
    expect(w.runs).toBe(1);
  });

  it('logs an observer hook that throws instead of failing the run', () => {
    const w = make('cleaner');
    w.hook(() => {
      throw new Error('metrics down');
    });
    expect(errors).toEqual(['An outbox hook threw: Error: metrics down']);
  });
});
