import { Logger } from '@nestjs/common';
import { DatabaseWatchdog } from '../../lib/dispatch/health/database-watchdog';
import { DispatcherLog } from '../../lib/dispatch/dispatcher-log';
import { randomUUID } from 'node:crypto';
import {
  LogTailer,
  type LogTailerParts,
  type TailerPipeline,
} from '../../lib/dispatch/log/log-tailer';
import type { DeliveryBatch } from '../../lib/dispatch/pipeline/delivery-batch';
import { LostClaims } from '../../lib/dispatch/leases/lost-claims';
import type { OutboxBatchReport } from '../../lib/observers/outbox-observer.interface';
import type {
  ClaimedIds,
  ClaimedRecord,
  ClaimIdsOptions,
} from '../../lib/store/ports/outbox-store.port';
import type { LoggedBatch, OutboxLogSource } from '../../lib/store/ports/outbox-log-source.port';
import { sleep, waitFor } from '../support/wait-for';
import { unusedHold } from '../support/unused-hold';

// The log tailer's own decisions, over a table kept in memory that leases by id as claimIds
// promises (pending, unleased, a prefix of each key): the order it asks for a key's messages
// in, what it leaves to the table, the ids the table does not show yet, and when it
// acknowledges. That the real statements keep those promises is proven on the databases
// (test/log-tailing/).

interface Row {
  readonly id: string;
  readonly key: string | null;
  status: 'pending' | 'delivered';
  leased: boolean;
  /** claimIds calls left before the row is visible. */
  hiddenFor: number;
}

class Table {
  readonly rows = new Map<string, Row>();
  readonly failing = new Set<string>();
  readonly published: string[] = [];

  add(id: string, key: string | null, hiddenFor = 0): { id: string; key: string | null } {
    this.rows.set(id, { id, key, status: 'pending', leased: false, hiddenFor });
    return { id, key };
  }

  claimIds({ ids, token }: ClaimIdsOptions): Promise<ClaimedIds> {
    const unseen: string[] = [];
    const locked = ids.flatMap((id) => {
      const row = this.rows.get(id);
      if (row === undefined || row.hiddenFor > 0) {
        if (row !== undefined) row.hiddenFor--;
        unseen.push(id);
        return [];
      }
      return row.status === 'pending' && !row.leased ? [row] : [];
    });
    const lockedIds = new Set(locked.map((r) => r.id));
    const kept = locked.filter(
      (r) =>
        r.key === null ||
        ![...this.rows.values()].some(
          (e) =>
            e.key === r.key &&
            Number(e.id) < Number(r.id) &&
            e.status === 'pending' &&
            !lockedIds.has(e.id),
        ),
    );
    for (const r of kept) r.leased = true;
    return Promise.resolve({ token: token ?? 't', records: kept.map(record), unseen });
  }

  /** Publishes in id order; a failing row stays pending (a retry in the table). */
  deliver(batch: DeliveryBatch): Promise<OutboxBatchReport> {
    let published = 0;
    const stopped = new Set<string>();
    for (const r of [...batch.records].sort((a, b) => Number(a.id) - Number(b.id))) {
      const row = this.rows.get(r.id) as Row;
      row.leased = false;
      if (this.failing.has(r.id) || (r.key !== null && stopped.has(r.key))) {
        if (r.key !== null) stopped.add(r.key);
        continue;
      }
      row.status = 'delivered';
      this.published.push(r.id);
      published++;
    }
    const report = { claimed: batch.records.length, published };
    return Promise.resolve({
      ...report,
      retried: report.claimed - published,
      deadLettered: 0,
      released: 0,
      fenced: 0,
      durationMs: 0,
    });
  }
}

function record(row: Row): ClaimedRecord {
  return {
    id: row.id,
    messageId: `m${row.id}`,
    topic: 't',
    key: row.key,
    type: 'e',
    payload: '{}',
    headers: {},
    attempts: 1,
    createdAt: new Date(0),
    ageMs: 0,
  };
}

/** A source that hands over the given batches, then waits to be stopped. */
class ListSource implements OutboxLogSource {
  readonly acknowledged: string[] = [];
  constructor(private readonly batches: LoggedBatch[]) {}
  check(): Promise<void> {
    return Promise.resolve();
  }
  async run(onBatch: (batch: LoggedBatch) => Promise<void>, signal: AbortSignal): Promise<void> {
    for (const batch of this.batches) {
      if (signal.aborted) return;
      await onBatch(batch);
    }
    this.done();
    if (signal.aborted) return;
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
  }
  acknowledge(position: string): Promise<void> {
    this.acknowledged.push(position);
    return Promise.resolve();
  }
  lag() {
    return Promise.resolve({ retainedBytes: 0, active: true });
  }
  done: () => void = () => undefined;
  readonly finished = new Promise<void>((resolve) => (this.done = resolve));
}

/** The pipeline's side, over the table: what each case overrides of it. */
interface PipelineFake {
  stopping?: () => boolean;
  deliver?: (batch: DeliveryBatch) => Promise<OutboxBatchReport>;
  pause?: () => void;
  lostLease?: (token: string, call: Promise<unknown> | undefined) => void;
}

function tailer(
  table: Table,
  source: ListSource,
  overrides: Partial<LogTailerParts> = {},
  fake: PipelineFake = {},
): { tailer: LogTailer; handOffs: () => number; sweeps: number[] } {
  const log = new DispatcherLog(new Logger('test'), 'default', 'abcd0123');
  let handOffs = 0;
  const sweeps: number[] = [];
  const stopping = fake.stopping ?? (() => false);
  const pipeline: TailerPipeline = {
    get open() {
      return !stopping();
    },
    lifecycle: {
      get stopping() {
        return stopping();
      },
    } as TailerPipeline['lifecycle'],
    deliver: (batch) => (fake.deliver ?? ((b) => table.deliver(b)))(batch),
    dbCallMs: 1_000,
    pause: fake.pause ?? (() => undefined),
    watchdog: new DatabaseWatchdog(5_000, log),
  };
  const parts: LogTailerParts = {
    source,
    store: { claimIds: (o) => table.claimIds(o) },
    pipeline,
    leases: {
      // As RowLeases.take: a new token, and a lease that failed recorded as lost.
      take: async (lease) => {
        const token = randomUUID();
        let call: ReturnType<typeof lease> | undefined;
        try {
          return { token, taken: await (call = lease(token)) };
        } catch (error) {
          (fake.lostLease ?? (() => undefined))(token, call);
          throw error;
        }
      },
      holdOf: () => unusedHold,
    },
    log,
    owner: 'me',
    leaseMs: 10_000,
    batchSize: 10,
    batchesInFlight: 2,
    lingerMs: 0,
    ordered: true,
    maxRun: 2,
    handOff: () => handOffs++,
    sweepAfter: (delayMs) => sweeps.push(delayMs),
    ...overrides,
  };
  return { tailer: new LogTailer(parts), handOffs: () => handOffs, sweeps };
}

describe('LogTailer', () => {
  it("publishes each key in log order, a run at a time, and acknowledges the batch's position after", async () => {
    const table = new Table();
    const inserts = [
      table.add('1', 'a'),
      table.add('2', 'b'),
      table.add('3', 'a'),
      table.add('4', null),
      table.add('5', 'a'),
      table.add('6', 'b'),
    ];
    const source = new ListSource([{ inserts, position: '0/100' }]);
    const { tailer: t, handOffs } = tailer(table, source);
    t.start();
    await source.finished;
    await t.stop();
    const ofKey = (key: string) => table.published.filter((id) => table.rows.get(id)?.key === key);
    expect(ofKey('a')).toEqual(['1', '3', '5']);
    expect(ofKey('b')).toEqual(['2', '6']);
    expect([...table.published].sort()).toEqual(['1', '2', '3', '4', '5', '6']);
    expect(source.acknowledged).toEqual(['0/100']);
    expect(handOffs()).toBe(0);
  });

  it('leaves a key to the table once its head fails, and still acknowledges', async () => {
    const table = new Table();
    const inserts = [
      table.add('1', 'a'),
      table.add('2', 'b'),
      table.add('3', 'a'),
      table.add('4', 'a'),
    ];
    table.failing.add('1');
    const source = new ListSource([{ inserts, position: '0/200' }]);
    const { tailer: t, handOffs } = tailer(table, source, { maxRun: 1 });
    t.start();
    await source.finished;
    await t.stop();
    expect(table.published).toEqual(['2']);
    expect(table.rows.get('3')?.status).toBe('pending');
    expect(table.rows.get('4')?.status).toBe('pending');
    expect(handOffs()).toBe(1);
    expect(source.acknowledged).toEqual(['0/200']);
  });

  it('leaves ids the table does not show yet to the table, with their key behind them, and has it swept soon', async () => {
    const table = new Table();
    const inserts = [table.add('1', 'a', 3), table.add('2', 'a'), table.add('3', null, 2)];
    inserts.push(table.add('4', 'b'));
    const source = new ListSource([{ inserts, position: '0/300' }]);
    const { tailer: t, handOffs, sweeps } = tailer(table, source);
    t.start();
    await source.finished;
    await t.stop();
    // Key a's later message stays behind its head, in the table; key b goes out.
    expect(table.published).toEqual(['4']);
    expect(table.rows.get('2')?.leased).toBe(false);
    expect(handOffs()).toBe(1);
    expect(sweeps.length).toBeGreaterThan(0);
    expect(source.acknowledged).toEqual(['0/300']);
  });

  it('gives a lease by id whose answer was lost back with the lost claims, by its token', async () => {
    const table = new Table();
    const source = new ListSource([{ inserts: [table.add('1', 'a')], position: '0/500' }]);
    const lost = new LostClaims();
    const tokens: string[] = [];
    let paused = 0;
    const { tailer: t } = tailer(
      table,
      source,
      {
        store: {
          // The lease commits, and the connection fails before its answer comes back.
          claimIds: async (o) => {
            tokens.push(o.token ?? '');
            await table.claimIds(o);
            throw new Error('Connection terminated unexpectedly');
          },
        },
      },
      {
        pause: () => paused++,
        lostLease: (token, call) => lost.add(token, call, 10_000),
      },
    );
    t.start();
    await source.finished;
    await t.stop();
    expect(paused).toBe(1);
    expect(table.rows.get('1')?.leased).toBe(true);
    const released: string[] = [];
    const count = await lost.releaseEnded((token) => {
      released.push(token);
      const row = table.rows.get('1') as Row;
      row.leased = false;
      return Promise.resolve(1);
    });
    expect(count).toBe(1);
    expect(released).toEqual(tokens);
    expect(tokens).toHaveLength(1);
  });

  it('holds no later work behind an id the table never shows: leaves it to the table and goes on', async () => {
    const table = new Table();
    const source = new ListSource([
      // Inserted and deleted in one transaction (or an XA one, or replayed after a delete).
      { inserts: [{ id: '1', key: 'a' }], position: '0/600' },
      { inserts: [table.add('2', 'a'), table.add('3', null)], position: '0/700' },
    ]);
    const { tailer: t, handOffs, sweeps } = tailer(table, source);
    t.start();
    await waitFor('the later messages published', () => table.published.length === 2, {
      timeoutMs: 5_000,
    });
    await source.finished;
    await t.stop();
    // The keyless message need not wait for key a's batch; both go out.
    expect([...table.published].sort()).toEqual(['2', '3']);
    expect(source.acknowledged.at(-1)).toBe('0/700');
    expect(handOffs()).toBe(1);
    expect(sweeps.length).toBe(1);
  });

  it('acknowledges nothing it was stopped in the middle of', async () => {
    const table = new Table();
    const inserts = [table.add('1', 'a'), table.add('2', 'a')];
    const source = new ListSource([{ inserts, position: '0/400' }]);
    let stopping = false;
    const { tailer: t } = tailer(
      table,
      source,
      { maxRun: 1 },
      {
        stopping: () => stopping,
        deliver: async (batch) => {
          stopping = true;
          const report = await table.deliver(batch);
          void t.stop();
          return report;
        },
      },
    );
    t.start();
    await t.stop();
    expect(table.published).toEqual(['1']);
    expect(source.acknowledged).toEqual([]);
  });

  it('keeps batches in flight side by side, a key waiting for its previous run, and acknowledges in log order', async () => {
    const table = new Table();
    const handovers: LoggedBatch[] = [];
    for (let h = 0; h < 20; h++) {
      const inserts = [1, 2, 3].map((i) => table.add(String(h * 3 + i), `k${(h * 3 + i) % 4}`));
      handovers.push({ inserts, position: `0/${1000 + h}` });
    }
    const source = new ListSource(handovers);
    let inFlight = 0;
    let most = 0;
    const sent: string[][] = [];
    const { tailer: t } = tailer(
      table,
      source,
      { batchSize: 4, batchesInFlight: 3, maxRun: 1 },
      {
        deliver: async (batch) => {
          inFlight++;
          most = Math.max(most, inFlight);
          // The second batch of every three settles first: acknowledgements must still wait.
          await sleep(sent.length % 3 === 1 ? 1 : 8);
          sent.push(batch.records.map((r) => r.id));
          inFlight--;
          return table.deliver(batch);
        },
      },
    );
    t.start();
    await source.finished;
    await waitFor('everything published', () => table.published.length === 60, {
      timeoutMs: 5_000,
    });
    await t.stop();
    expect(most).toBeGreaterThan(1);
    for (const key of ['k0', 'k1', 'k2', 'k3']) {
      const ids = table.published.filter((id) => table.rows.get(id)?.key === key).map(Number);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
    }
    // Acknowledged positions only ever move forward, and end at the last handover.
    const positions = source.acknowledged.map((p) => Number(p.slice(2)));
    expect(positions).toEqual([...positions].sort((a, b) => a - b));
    expect(source.acknowledged.at(-1)).toBe('0/1019');
  });

  it('coalesces small handovers that arrive while a batch is in flight', async () => {
    const table = new Table();
    const handovers = Array.from({ length: 30 }, (_, h) => ({
      inserts: [table.add(String(h + 1), `k${h}`)],
      position: `0/${2000 + h}`,
    }));
    const source = new ListSource(handovers);
    const sizes: number[] = [];
    const { tailer: t } = tailer(
      table,
      source,
      { batchSize: 50, batchesInFlight: 2, lingerMs: 5 },
      {
        deliver: async (batch) => {
          sizes.push(batch.records.length);
          await sleep(3);
          return table.deliver(batch);
        },
      },
    );
    t.start();
    await source.finished;
    await waitFor('everything published', () => table.published.length === 30, {
      timeoutMs: 5_000,
    });
    await t.stop();
    // One lease and publish per handover would be 30 batches.
    expect(sizes.length).toBeLessThan(10);
    expect(source.acknowledged.at(-1)).toBe('0/2029');
  });
});
