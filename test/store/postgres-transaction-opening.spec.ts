import { randomUUID } from 'node:crypto';
import { Pool, type PoolClient } from 'pg';
import { DataSource, type Logger } from 'typeorm';
import { createOutboxTable } from '../../lib/schema';
import { pgSqlPort } from '../../lib/drivers/pg/pg.sql-port';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { serverConnection, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// The dispatcher's PostgreSQL transactions open with their settings and dispatch locks sent in
// the same simple query as BEGIN (SqlPort.transactionOpening): a claim is three round trips.
// What must not change with it: the statement timeout bounds a wait on a key's dispatch lock,
// and the lock is held until the transaction ends. Asserted on the pg port and the TypeORM port,
// through the statements that reached the server and the rows the store changed.

const TIMEOUT_MS = 400;

type Sent = string[];

function pgConfig(): {
  host: string;
  port: number;
  user: string;
  password?: string;
  database: string;
} {
  const c = serverConnection('postgres');
  return {
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
  };
}

/** A pg Pool whose clients record each statement text they send, as text or as a named statement. */
function recordingPool(sent: Sent): Pool {
  const pool = new Pool({ ...pgConfig(), max: 4 });
  pool.on('connect', (client: PoolClient) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    Object.assign(client, {
      query: (...args: unknown[]) => {
        const [first] = args;
        const text = typeof first === 'string' ? first : (first as { text?: unknown } | null)?.text;
        if (typeof text === 'string') sent.push(text);
        return query(...args);
      },
    });
  });
  return pool;
}

interface Target {
  readonly name: string;
  open(sent: Sent): Promise<{ sql: SqlPort; close(): Promise<void> }>;
}

const targets: Target[] = [
  {
    name: 'pg port',
    open(sent) {
      const pool = recordingPool(sent);
      return Promise.resolve({ sql: pgSqlPort(pool), close: () => pool.end() });
    },
  },
  {
    name: 'TypeORM port',
    async open(sent) {
      // TypeORM's logger sees every statement its query runners send.
      const logger: Logger = {
        logQuery: (query) => void sent.push(query),
        logQueryError: () => undefined,
        logQuerySlow: () => undefined,
        logSchemaBuild: () => undefined,
        logMigration: () => undefined,
        log: () => undefined,
      };
      const ds = new DataSource({
        ...serverConnection('postgres'),
        poolSize: 4,
        logging: ['query'],
        logger,
      });
      await ds.initialize();
      return { sql: typeormSqlPort(ds), close: () => ds.destroy() };
    },
  },
];

describeWith(['postgres'], 'PostgreSQL dispatcher transactions open in one round trip', () => {
  const admin = new Pool({ ...pgConfig(), max: 2 });
  afterAll(() => admin.end());

  for (const target of targets) {
    describe(target.name, () => {
      let table: string;
      let sent: Sent;
      let port: { sql: SqlPort; close(): Promise<void> };
      let store: OutboxStore;

      beforeEach(async () => {
        table = uniqueTable('outbox_open');
        sent = [];
        port = await target.open(sent);
        await createOutboxTable(port.sql, { tableName: table });
        store = await createOutboxStore(
          port.sql,
          {
            tableName: table,
            schema: null,
            ordering: { enabled: true, onDeadLetter: 'block', maxRun: 1 },
            dispatcher: { dbTimeoutMs: TIMEOUT_MS },
          },
          { enabled: true, notify: false },
        );
      });
      afterEach(async () => {
        await store.close();
        await admin.query(`DROP TABLE IF EXISTS "${table}", "${table}_attempts"`);
        await port.close();
      });

      async function enqueue(keys: string[]): Promise<void> {
        await port.sql.transaction((tx) =>
          store.insert(
            tx,
            keys.map((key, n) => ({
              messageId: randomUUID(),
              topic: 'orders',
              key,
              type: 'OrderCreated',
              payload: JSON.stringify({ n }),
              headers: '{}',
              availableAt: null,
              delayMs: null,
            })),
            true,
          ),
        );
      }

      /** A connection in a transaction holding this table's dispatch lock `id` (a key's hash, or -1: the claims' turn). */
      async function holdingDispatchLock(id: number): Promise<PoolClient> {
        const holder = await admin.connect();
        const channel = `public_${table}`.slice(0, 63);
        await holder.query('BEGIN');
        await holder.query('SELECT pg_advisory_xact_lock($1::int4, $2::int4)', [
          hashKey(`nestjs-outbox-dispatch:${channel}`),
          id,
        ]);
        return holder;
      }

      it('claims in three statements: BEGIN with its settings, the claim, COMMIT', async () => {
        await enqueue(['a', 'b']);
        sent.length = 0;
        const batch = await store.claim({ limit: 10, owner: 'me', leaseMs: 30_000 });
        expect(batch.records.map((r) => r.key).sort()).toEqual(['a', 'b']);
        expect(sent).toHaveLength(3);
        expect(sent[0]).toMatch(
          /^BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = 400; SET LOCAL jit = off/,
        );
        expect(sent[2]).toBe('COMMIT');
      });

      it('claims and settles in one query each on a connection that ran them before', async () => {
        await enqueue(['a', 'b', 'c', 'd']);
        const drain = async (limit: number): Promise<string[]> => {
          const batch = await store.claim({ limit, owner: 'me', leaseMs: 30_000 });
          const keys = batch.records.flatMap((r) => (r.key === null ? [] : [r.key]));
          const settlement = {
            delivered: batch.records.map((r) => r.id),
            retry: [],
            dead: [],
            release: [],
            advancedKeys: keys,
          };
          await expect(store.settle(batch.token, settlement, false)).resolves.toBe(limit);
          return keys;
        };
        // The first claim and settle on the (one, reused) connection prepare their statements.
        expect(await drain(2)).toEqual(['a', 'b']);
        sent.length = 0;
        expect(await drain(2)).toEqual(['c', 'd']);
        // Then each is one transaction in one query: BEGIN with its settings, the EXECUTE of
        // the named statement with its values as constants, COMMIT.
        expect(sent).toHaveLength(2);
        for (const text of sent) {
          expect(text).toMatch(
            /^BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = 400; SET LOCAL jit = off.*; EXECUTE nestjs_outbox_[0-9a-f]{32}\(.*\); COMMIT$/s,
          );
        }
        expect(sent[1]).toContain(`E'{"c","d"}'`);
        const { rows } = await admin.query<{ status: string }>(
          `SELECT status FROM "${table}" ORDER BY id`,
        );
        expect(rows.map((r) => r.status)).toEqual([
          'delivered',
          'delivered',
          'delivered',
          'delivered',
        ]);
      });

      it("a settle waits for its key's dispatch lock, and gives up after the statement timeout", async () => {
        await enqueue(['k', 'k']);
        const batch = await store.claim({ limit: 10, owner: 'me', leaseMs: 30_000 });
        expect(batch.records).toHaveLength(1);
        const [head] = batch.records;
        // The second message waits for the head in flight; parked (as a slow publish's
        // followers are), it waits for the settle's promotion.
        expect(batch.blockedKeys).toEqual([]);
        expect(batch.inFlightKeys).toBe(1);
        await expect(store.park(['k'])).resolves.toBe(1);
        const holder = await holdingDispatchLock(hashKey('k'));
        try {
          const settlement = {
            delivered: [head?.id ?? 'missing'],
            retry: [],
            dead: [],
            release: [],
            advancedKeys: ['k'],
          };
          await expect(store.settle(batch.token, settlement, false)).rejects.toThrow(
            /statement timeout/,
          );
          const { rows } = await admin.query<{ status: string }>(
            `SELECT status FROM "${table}" ORDER BY id`,
          );
          // Nothing of the timed-out settle stayed: the head is still leased, unsettled.
          expect(rows.map((r) => r.status)).toEqual(['pending', 'waiting']);
          await holder.query('COMMIT');
          // Once the lock is free the settle goes through and promotes the key's next message.
          await expect(store.settle(batch.token, settlement, false)).resolves.toBe(1);
          const after = await admin.query<{ status: string }>(
            `SELECT status FROM "${table}" ORDER BY id`,
          );
          expect(after.rows.map((r) => r.status)).toEqual(['delivered', 'pending']);
        } finally {
          await holder.query('ROLLBACK').catch(() => undefined);
          holder.release();
        }
      }, 20_000);

      it('claims made at once take turns: each leases a batch of its own, none comes back empty', async () => {
        await enqueue(Array.from({ length: 40 }, (_, n) => `key-${n}`));
        const owners = ['a', 'b', 'c', 'd'];
        const batches = await Promise.all(
          owners.map((owner) => store.claim({ limit: 10, owner, leaseMs: 30_000 })),
        );
        // Without turns, a claim running beside another reads the same head of the queue,
        // finds those rows locked, and leases nothing.
        expect(batches.map((b) => b.records.length)).toEqual([10, 10, 10, 10]);
        const ids = batches.flatMap((b) => b.records.map((r) => r.id));
        expect(new Set(ids).size).toBe(40);
        const { rows } = await admin.query<{ owners: number; leased: number }>(
          `SELECT count(DISTINCT locked_by)::int AS owners, count(*)::int AS leased FROM "${table}" WHERE locked_by IS NOT NULL`,
        );
        expect(rows[0]).toEqual({ owners: 4, leased: 40 });
      });

      it('a claim waits for the claim before it to commit, then takes what that one left', async () => {
        await enqueue(['x', 'y', 'z']);
        // Another claim in progress: it holds the turn (and has leased 'x' by now).
        const holder = await holdingDispatchLock(-1);
        try {
          await holder.query(
            `UPDATE "${table}" SET locked_by = 'other', available_at = now() + interval '30 seconds' WHERE message_key = 'x'`,
          );
          let settled = false;
          const claiming = store
            .claim({ limit: 10, owner: 'me', leaseMs: 30_000 })
            .finally(() => (settled = true));
          // Within the turn's wait (half the 400 ms dbTimeoutMs here).
          await sleep(100);
          expect(settled).toBe(false);
          await holder.query('COMMIT');
          const batch = await claiming;
          expect(batch.records.map((r) => r.key).sort()).toEqual(['y', 'z']);
          expect(batch.contended).toBe(0);
        } finally {
          await holder.query('ROLLBACK').catch(() => undefined);
          holder.release();
        }
      });

      const askedForTurn = (): boolean =>
        sent.some((text) => /pg_advisory_xact_lock\(-?\d+, -1\)/.test(text));

      it('a turn held past its wait (a claim stuck mid-transaction) is gone without', async () => {
        await enqueue(['x', 'y']);
        const holder = await holdingDispatchLock(-1);
        try {
          sent.length = 0;
          const batch = await store.claim({ limit: 10, owner: 'me', leaseMs: 30_000 });
          expect(askedForTurn()).toBe(true);
          expect(batch.records.map((r) => r.key).sort()).toEqual(['x', 'y']);
        } finally {
          await holder.query('ROLLBACK').catch(() => undefined);
          holder.release();
        }
      });

      it('a claim that looks again after being held back does not ask for the turn', async () => {
        await enqueue(['x', 'y']);
        sent.length = 0;
        const batch = await store.claim({
          limit: 10,
          owner: 'me',
          leaseMs: 30_000,
          likelyFew: true,
        });
        expect(askedForTurn()).toBe(false);
        expect(batch.records.map((r) => r.key).sort()).toEqual(['x', 'y']);
      });
    });
  }
});
