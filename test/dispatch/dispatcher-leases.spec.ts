import { DataSource } from 'typeorm';
import { type OutboxMessage } from '../../lib';
import { ensureOutboxTable } from '../../lib/schema';
import type { ClaimOptions } from '../../lib/store/ports/outbox-store.port';
import {
  readOutbox,
  serverOptions,
  TEST_DATABASES,
  testDatabase,
  uniqueTable,
} from '../support/databases';
import { dropOutboxTable, instance, type Instance } from '../support/outbox-harness';
import { dispatchApps, msg as orderEvent } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// What a dispatcher does with its lease when its process stalls, its database calls wait behind
// the application's pool, or its broker comes back: it never publishes a batch whose lease it
// may have lost, records the outcome of a batch the broker accepted for as long as its lease
// lasts, and resumes as soon as the broker answers.

const msg = (key: string | null, n: number): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload: { n },
});

/** A DataSource with a small pool, so the test can hold every connection like a busy app. */
async function smallPool(name: 'postgres' | 'mariadb', table: string): Promise<DataSource> {
  const ds = new DataSource(serverOptions(name, { poolSize: 3 }));
  await ds.initialize();
  await ensureOutboxTable(ds, { tableName: table });
  return ds;
}

/** Holds every connection of the pool in app transactions that sleep for `ms`. */
function hogPool(ds: DataSource, ms: number): Promise<unknown[]> {
  const sleepSql =
    ds.options.type === 'postgres'
      ? `SELECT pg_sleep(${ms / 1_000})`
      : `SELECT SLEEP(${ms / 1_000})`;
  return Promise.all([0, 1, 2].map(() => ds.transaction((m) => m.query(sleepSql))));
}

describe.each(TEST_DATABASES)('dispatcher leases on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_lease', options: CLAIM_LOOP });
    let table: string;

    beforeEach(async () => {
      table = await scope.table();
    });

    it('a dispatcher paused past its lease after claiming publishes nothing of that batch', async () => {
      const frozen = await scope.instance(table, 'frozen', {
        dispatcher: { leaseMs: 2_000, batchSize: 10 },
      });
      const healthy = await scope.instance(table, 'healthy', {
        dispatcher: { leaseMs: 2_000, batchSize: 10 },
      });
      await scope.ds.transaction((m) =>
        frozen.outbox.enqueue(
          Array.from({ length: 6 }, (_, n) => msg(`k${n % 3}`, n)),
          m,
        ),
      );

      // The whole process stalls right after the claim committed, as under SIGSTOP or a long
      // GC pause: the event loop is blocked, so no timer fires until the lease is over.
      const realClaim = frozen.store.claim.bind(frozen.store);
      let claimedCount = 0;
      frozen.store.claim = async (options: ClaimOptions) => {
        const batch = await realClaim(options);
        claimedCount = batch.records.length;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_300);
        return batch;
      };
      const report = await frozen.dispatcher.runOnce();

      // Three keys' runs of two: the whole backlog (every store claims runs).
      const claimable = 6;
      expect(claimedCount).toBe(claimable);
      expect(report.claimed).toBe(claimable);
      expect(frozen.publisher.sentIds).toEqual([]);
      expect(report.released).toBe(claimable);
      // Nothing is lost: the released runs go out through the other one.
      await waitFor(
        'the healthy dispatcher to deliver everything',
        async () => {
          await healthy.dispatcher.drain();
          return (await readOutbox(scope.ds, table)).every((r) => r.status === 'delivered');
        },
        { timeoutMs: 20_000, intervalMs: 50 },
      );
      const rows = await readOutbox(scope.ds, table);
      expect(healthy.publisher.sentIds.sort()).toEqual(rows.map((r) => r.messageId).sort());
      // The release gave the attempt back.
      expect(rows.every((r) => r.attempts === 1)).toBe(true);
    });

    it('resumes once the broker answers again, before the pause ends, however long it grew', async () => {
      // A poll interval of 20 s makes the first outage pause 20 s long.
      const d = await scope.instance(table, 'prober', {
        autoStart: true,
        dispatcher: { pollIntervalMs: 20_000, maxOutagePauseMs: 60_000 },
      });
      d.publisher.goDown();
      const id = await scope.ds.transaction((m) => d.outbox.enqueue(msg('k', 1), m));
      await waitFor('the outage to be seen', () => d.dispatcher.status().pausedUntil !== null);
      const pausedUntil = d.dispatcher.status().pausedUntil?.getTime() ?? 0;
      expect(pausedUntil - Date.now()).toBeGreaterThan(10_000);

      d.publisher.comeBack();
      // The broker's return ends the pause (within about a second on a quiet machine); what is
      // checked is that it does not wait the pause out, so the wait is bounded by the pause's
      // end, not by a time a loaded machine may miss (a CI run once took over 5 s here).
      await d.publisher.until(
        (p) => p.sentIds.includes(String(id)),
        Math.max(1_000, pausedUntil - Date.now()),
        'delivery after return',
      );
      expect(Date.now()).toBeLessThan(pausedUntil);
    });
  });
});

describe.each(TEST_DATABASES.filter((db) => db.name !== 'sqlite'))(
  'dispatcher database calls behind a busy pool on $name',
  (db) => {
    describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
      let ds: DataSource;
      let table: string;
      const instances: Instance[] = [];

      beforeEach(async () => {
        table = uniqueTable('outbox_pool');
        ds = await smallPool(db.name as 'postgres' | 'mariadb', table);
      });

      afterEach(async () => {
        for (const i of instances.splice(0)) await i.moduleRef.close();
        await dropOutboxTable(ds, table);
        await ds.destroy();
      });

      it('records the outcome of batches the broker accepted while the app holds the pool: each message published once, none reported taken over', async () => {
        const d = await instance(ds, table, 'busy-pool', {
          dispatcher: {
            claims: 'leases',
            leaseMs: 6_000,
            publishTimeoutMs: 3_000,
            dbTimeoutMs: 500,
            batchSize: 5,
            batchesInFlight: 2,
          },
        });
        instances.push(d);
        await ds.transaction((m) =>
          d.outbox.enqueue(
            Array.from({ length: 10 }, (_, n) => msg(`k${n}`, n)),
            m,
          ),
        );
        // While both batches are being published, the app takes every pool connection for
        // longer than a database call may last (dbTimeoutMs + the watchdog's margin): the first
        // batch's settle waits behind it and is given up on, and the second batch's settle
        // starts while that abandoned call is still outstanding.
        let hog: Promise<unknown[]> | undefined;
        let calls = 0;
        let bothInFlight!: () => void;
        const second = new Promise<void>((resolve) => (bothInFlight = resolve));
        const realPublish = d.publisher.publish.bind(d.publisher);
        d.publisher.publish = async (messages, signal) => {
          calls += 1;
          const call = calls;
          if (call === 2) {
            hog = hogPool(ds, 3_500);
            bothInFlight();
          }
          await Promise.race([second, sleep(3_000)]);
          await sleep(call === 2 ? 2_000 : 100);
          return realPublish(messages, signal);
        };
        await d.dispatcher.drain();
        await hog;
        // Past every lease: anything not recorded would now be claimed and published again.
        await sleep(6_500);
        await d.dispatcher.drain();

        const rows = await readOutbox(ds, table);
        expect(rows.every((r) => r.status === 'delivered')).toBe(true);
        expect(d.publisher.sentIds.sort()).toEqual(rows.map((r) => r.messageId).sort());
        expect(d.reports.reduce((n, r) => n + r.fenced, 0)).toBe(0);
      });

      it('hands back the rows of a claim that answered after it was given up on, with their attempt', async () => {
        const d = await instance(ds, table, 'late-claim', {
          dispatcher: {
            claims: 'leases',
            leaseMs: 30_000,
            publishTimeoutMs: 2_000,
            dbTimeoutMs: 500,
          },
        });
        instances.push(d);
        await ds.transaction((m) =>
          d.outbox.enqueue(
            Array.from({ length: 3 }, (_, n) => msg(`k${n}`, n)),
            m,
          ),
        );
        const hog = hogPool(ds, 2_000);
        // Let the app's transactions take the pool's connections first.
        await sleep(500);
        const report = await d.dispatcher.runOnce();
        expect(report.claimed).toBe(0);
        await hog;
        await waitFor(
          'the late claim to be handed back',
          async () =>
            (await readOutbox(ds, table)).every((r) => r.lockedBy === null && r.attempts === 0),
          { timeoutMs: 10_000 },
        );
        expect(d.publisher.sentIds).toEqual([]);
      });
    });
  },
);

describeWith(['postgres'], "a frozen dispatcher's transaction on PostgreSQL", () => {
  const db = testDatabase('postgres');
  let ds: DataSource;
  let table: string;

  beforeEach(async () => {
    table = uniqueTable('outbox_idle');
    ds = await db.open(table);
  });

  afterEach(() => db.close(ds, table));

  it('is ended by the server once it sits idle longer than dbTimeoutMs, releasing its locks', async () => {
    const d = await instance(ds, table, 'frozen-tx', {
      dispatcher: { claims: 'leases', dbTimeoutMs: 500 },
    });
    try {
      // The store's own transaction helper, with the process "frozen" between two statements
      // while it holds a row lock (what SIGSTOP mid-claim does).
      type Run = (sql: string, params: unknown[]) => Promise<unknown>;
      const store = d.store as unknown as {
        transaction<T>(work: (run: Run) => Promise<T>): Promise<T>;
      };
      await ds.transaction((m) => d.outbox.enqueue(msg('k', 1), m));
      const frozen = store.transaction(async (run) => {
        await run(`SELECT id FROM "${table}" FOR UPDATE`, []);
        await sleep(1_500);
        return run('SELECT 1', []);
      });
      const outcome = await frozen.then(
        () => 'committed',
        (error: unknown) => String(error),
      );
      expect(outcome).toMatch(/idle-in-transaction timeout|terminat|Connection|already released/i);
      // Its row lock is gone: another transaction can lock the row at once.
      const locked = await ds.transaction((m) =>
        m.query(`SELECT id FROM "${table}" FOR UPDATE NOWAIT`),
      );
      expect(locked).toHaveLength(1);
    } finally {
      await d.moduleRef.close();
    }
  });
});

// A crashed dispatcher's leases run out and are cleared; a lease too short for its timeouts is
// refused before anything is claimed.
describe.each(TEST_DATABASES)('expired and impossible leases on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_lease', options: CLAIM_LOOP });
    const { boot } = dispatchApps(scope);

    it('the unlocker releases expired leases and leaves live ones alone', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher);
      const ids = await h.commit([orderEvent('a'), orderEvent('b'), orderEvent('c')]);
      // A dispatcher that crashed after claiming two messages, and a live one holding the third.
      const crashed = await h.store.claim({
        limit: 2,
        owner: 'crashed-dispatcher',
        leaseMs: 1_000,
      });
      expect(crashed.records.map((r) => r.messageId)).toEqual(ids.slice(0, 2));
      const alive = await h.store.claim({
        limit: 5,
        owner: 'live-dispatcher',
        leaseMs: 60_000,
      });
      expect(alive.records.map((r) => r.messageId)).toEqual(ids.slice(2));
      expect(await h.unlocker.runOnce()).toBe(0);
      expect((await h.rows()).map((r) => r.lockedBy)).toEqual([
        'crashed-dispatcher',
        'crashed-dispatcher',
        'live-dispatcher',
      ]);

      await waitFor(
        "the crashed dispatcher's leases to expire",
        async () => (await h.leaseLeftMs('crashed-dispatcher')) < 0,
        { intervalMs: 50 },
      );
      expect(await h.unlocker.runOnce()).toBe(2);
      const rows = await h.rows();
      // The crashed claims still count: a message that keeps crashing its dispatchers ends dead.
      expect(rows.map((r) => [r.lockedBy, r.status, r.attempts])).toEqual([
        [null, 'pending', 1],
        [null, 'pending', 1],
        ['live-dispatcher', 'pending', 1],
      ]);
      expect(await h.dispatcher.runOnce()).toMatchObject({ claimed: 2, published: 2 });
      expect([...publisher.sentIds].sort()).toEqual(ids.slice(0, 2).sort());
    });

    it('refuses to boot when publishTimeoutMs + dbTimeoutMs do not fit in leaseMs', async () => {
      await expect(
        boot(new RecordingPublisher(), {
          dispatcher: {
            leaseMs: 5_000,
            publishTimeoutMs: 4_000,
            dbTimeoutMs: 2_000,
            leaseRenewal: false,
          },
        }),
      ).rejects.toThrow(/dbTimeoutMs.*exceed dispatcher.leaseMs/);
    });
  });
});
