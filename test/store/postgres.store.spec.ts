import { createOutboxTable, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { randomUUID } from 'node:crypto';
import {
  POSTGRES_FILLFACTOR,
  postgresClaim,
  postgresDropWaitingIndex,
  postgresOpening,
} from '../../lib/store/postgres/postgres.sql';
import type { DataSource } from 'typeorm';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { TEST_DATABASES, uniqueTable, type TestDatabase } from '../support/databases';
import { describeWith } from '../support/services';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';
import { sleep } from '../support/wait-for';

const db = TEST_DATABASES.find((d) => d.name === 'postgres');
if (db === undefined) throw new Error('no postgres test database');

outboxStoreConformance(typeormOn(db), ['postgres']);

// A table made before schema step 5 has no index of waiting messages: the store then promotes
// by probing every advanced key, as before the index, and must keep every promise on it.
outboxStoreConformance(
  {
    ...typeormOn(db),
    name: 'typeorm-postgres, a table without the waiting index (before schema step 5)',
    async createTable(sql, tableName) {
      await createOutboxTable(sql, { tableName });
      await sql.query(postgresDropWaitingIndex(tableNamesFor('postgres', { tableName })));
    },
  },
  ['postgres'],
);

interface FreshStore {
  ds: DataSource;
  store: OutboxStore;
  table: string;
}

/**
 * A store on a table of its own for the describe block, made before its tests, dropped after;
 * with `ordered: false`, a store with ordering off.
 */
function storeOnFreshTable(database: TestDatabase, prefix: string, ordered = true): FreshStore {
  const fresh = { table: uniqueTable(prefix) } as FreshStore;
  beforeAll(async () => {
    fresh.ds = await database.open(fresh.table);
    fresh.store = await createOutboxStore(
      typeormSqlPort(fresh.ds),
      {
        tableName: fresh.table,
        schema: null,
        ...(ordered ? {} : { ordering: { enabled: false, onDeadLetter: 'block' as const } }),
      },
      { enabled: true, notify: false },
    );
  });
  afterAll(async () => {
    await database.close(fresh.ds, fresh.table);
  });
  return fresh;
}

// The claim reads `created_at` as milliseconds in a double (date_part), not as a timestamp: the
// record's createdAt must still be the row's time cut to the millisecond, including a time on a
// whole millisecond, which the double holds a fraction of a microsecond below.
describeWith(['postgres'], 'PostgreSQL claim: createdAt from the row', () => {
  const fresh = storeOnFreshTable(db, 'outbox_created');

  it('is the created_at of the row, to the millisecond below it', async () => {
    const { ds, store, table } = fresh;
    const times: [string, string][] = [
      ['2026-11-23 17:48:24.123+00', '2026-11-23T17:48:24.123Z'],
      ['2026-11-23 17:48:24.999999+00', '2026-11-23T17:48:24.999Z'],
      ['2026-11-23 17:48:24.000001+00', '2026-11-23T17:48:24.000Z'],
      ['2026-11-23 19:18:24.5+01:30', '2026-11-23T17:48:24.500Z'],
      ['1999-12-31 23:59:59.9995+00', '1999-12-31T23:59:59.999Z'],
      ['2099-06-30 12:00:00.001+00', '2099-06-30T12:00:00.001Z'],
    ];
    for (const [at] of times) {
      await ds.query(
        `INSERT INTO "${table}" (message_id, topic, event_type, payload, created_at) VALUES (gen_random_uuid(), 't', $1, '{}', $2::timestamptz)`,
        [at, at],
      );
    }
    const batch = await store.claim({ limit: 10, owner: 'created-at', leaseMs: 60_000 });
    const byType = new Map(batch.records.map((r) => [r.type, r] as const));
    expect(times.map(([at]) => byType.get(at)?.createdAt.toISOString())).toEqual(
      times.map(([, iso]) => iso),
    );
    // The ages are counted from those times (the server's clock): years for the oldest.
    expect(batch.records.every((r) => Number.isFinite(r.ageMs) && r.ageMs >= 0)).toBe(true);
    expect(byType.get('1999-12-31 23:59:59.9995+00')?.ageMs).toBeGreaterThan(20 * 365 * 86_400_000);
  });
});

// The lease writes no indexed column, and the table keeps room in its pages: a claim is then a
// heap-only update, adding no index entries (docs/performance.md, "Room for the lease").
describeWith(['postgres'], 'PostgreSQL claim: the lease as a heap-only update', () => {
  const fresh = storeOnFreshTable(db, 'outbox_hot');

  it('makes the table with room per page, and a lease leaves available_at and every index alone', async () => {
    const { ds, store, table } = fresh;
    const options = await ds.query<{ reloptions: string[] | null }[]>(
      `SELECT reloptions FROM pg_class WHERE oid = $1::regclass`,
      [`"${table}"`],
    );
    expect(options[0]?.reloptions).toEqual([`fillfactor=${POSTGRES_FILLFACTOR}`]);
    await ds.query(
      `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload)
SELECT gen_random_uuid(), 't', 'k' || g, 'e', '{}' FROM generate_series(1, 20) AS g`,
    );
    const before = await ds.query<{ id: string; due: string }[]>(
      `SELECT id::text AS id, available_at::text AS due FROM "${table}" ORDER BY id`,
    );
    const updatesBefore = await tableUpdates(ds, table);
    const batch = await store.claim({ limit: 20, owner: 'hot', leaseMs: 60_000 });
    expect(batch.records).toHaveLength(20);
    const after = await ds.query<{ id: string; due: string; leased: boolean }[]>(
      `SELECT id::text AS id, available_at::text AS due, locked_until > now() AS leased FROM "${table}" ORDER BY id`,
    );
    expect(after.map(({ id, due }) => ({ id, due }))).toEqual(before);
    expect(after.every((r) => r.leased)).toBe(true);
    // Statistics reach pg_stat_user_tables when the claiming backend reports them.
    let counts = await tableUpdates(ds, table);
    for (let waited = 0; counts.updated - updatesBefore.updated < 20; waited += 100) {
      if (waited > 10_000) break;
      await sleep(100);
      counts = await tableUpdates(ds, table);
    }
    expect({
      updated: counts.updated - updatesBefore.updated,
      heapOnly: counts.heapOnly - updatesBefore.heapOnly,
    }).toEqual({ updated: 20, heapOnly: 20 });
  });
});

// Without ordering every due row is a candidate: the claim locks rows as the pending index
// reads them, and writes their lease by ctid (docs/performance.md, "The gap, step by step").
describeWith(['postgres'], 'PostgreSQL claim without ordering', () => {
  const fresh = storeOnFreshTable(db, 'outbox_unordered', false);

  beforeEach(async () => {
    await fresh.ds.query(`TRUNCATE "${fresh.table}"`);
  });

  /** Inserts rows due in the order of `dueInSeconds` (negative: past), returns their ids. */
  async function insert(dueInSeconds: readonly number[], key = 'k'): Promise<string[]> {
    const ids: string[] = [];
    for (const due of dueInSeconds) {
      const [row] = await fresh.ds.query<{ id: string }[]>(
        `INSERT INTO "${fresh.table}" (message_id, topic, message_key, event_type, payload, available_at)
VALUES (gen_random_uuid(), 't', $1, 'e', '{}', now() + $2 * interval '1 second') RETURNING id::text AS id`,
        [key, due],
      );
      ids.push(row?.id ?? '');
    }
    return ids;
  }

  const claim = (limit: number, window?: number) =>
    fresh.store.claim({ limit, owner: 'unordered', leaseMs: 60_000, window });

  it('leases due rows in due order, whatever their key, and counts an attempt on each', async () => {
    // One key, so ordering would take one row; due times out of id order.
    const ids = await insert([-3, -5, -1, -4, 60]);
    const batch = await claim(3);
    expect(batch.records.map((r) => r.id)).toEqual([ids[1], ids[3], ids[0]].sort(byId));
    expect(batch.records.every((r) => r.attempts === 1)).toBe(true);
    const rows = await fresh.ds.query<
      { id: string; lock_token: string | null; attempts: number }[]
    >(
      `SELECT id::text AS id, lock_token::text AS lock_token, attempts FROM "${fresh.table}" ORDER BY id`,
    );
    expect(rows.filter((r) => r.lock_token === batch.token).map((r) => r.id)).toEqual(
      [ids[0], ids[1], ids[3]].sort(byId),
    );
    expect(batch).toMatchObject({ blockedKeys: [], inFlightKeys: 0, contended: 0 });
    // The next claim reads past the leases: the last due row, not the one due in a minute.
    const next = await claim(3);
    expect(next.records.map((r) => r.id)).toEqual([ids[2]]);
    expect(next.contended).toBe(0);
  });

  it('takes a row again once its lease has expired', async () => {
    const [id] = await insert([-1]);
    const first = await claim(10);
    expect((await claim(10)).records).toEqual([]);
    await fresh.ds.query(
      `UPDATE "${fresh.table}" SET locked_until = now() - interval '1 second' WHERE id = $1`,
      [id],
    );
    const again = await claim(10);
    expect(again.records.map((r) => [r.id, r.attempts])).toEqual([[id, 2]]);
    expect(again.token).not.toBe(first.token);
    // Fenced: the first claim's settle changes nothing now.
    const changed = await fresh.store.settle(
      first.token,
      { delivered: [id ?? ''], retry: [], dead: [], release: [], advancedKeys: [] },
      false,
    );
    expect(changed).toBe(0);
  });

  it('skips rows another transaction holds and counts them as contended when it comes back short', async () => {
    const ids = await insert([-5, -4, -3, -2, -1]);
    const holder = fresh.ds.createQueryRunner();
    await holder.connect();
    try {
      await holder.startTransaction();
      await holder.query(`SELECT id FROM "${fresh.table}" WHERE id = ANY($1::int8[]) FOR UPDATE`, [
        ids.slice(0, 2),
      ]);
      // A full batch past the held rows: nothing held it back.
      const full = await claim(2);
      expect(full.records.map((r) => r.id)).toEqual(ids.slice(2, 4));
      expect(full.contended).toBe(0);
      // Short: of the first rows of its window, the two held ones.
      const short = await claim(5);
      expect(short.records.map((r) => r.id)).toEqual(ids.slice(4));
      expect(short.contended).toBe(2);
    } finally {
      await holder.rollbackTransaction();
      await holder.release();
    }
    // Nothing held, nothing due: an empty claim that is not contended.
    const rest = await claim(5);
    expect(rest.records.map((r) => r.id)).toEqual(ids.slice(0, 2));
    expect((await claim(5)).contended).toBe(0);
  });

  it('writes the lease by ctid behind a retained history, never walking the primary key', async () => {
    // A delivered history in front of the due rows in id order, as a table that keeps them has.
    await fresh.ds.query(
      `INSERT INTO "${fresh.table}" (message_id, topic, message_key, event_type, payload, status, delivered_at)
SELECT gen_random_uuid(), 't', 'k', 'e', '{}', 'delivered', now() FROM generate_series(1, 5000)`,
    );
    // And a backlog: estimated from a generic plan's unknown LIMIT, the claimed rows were once
    // joined to the table by a merge join over its primary key, from the first row of history.
    await fresh.ds.query(
      `INSERT INTO "${fresh.table}" (message_id, topic, message_key, event_type, payload)
SELECT gen_random_uuid(), 't', 'k' || g, 'e', '{}' FROM generate_series(1, 5000) AS g`,
    );
    await fresh.ds.query(`ANALYZE "${fresh.table}"`);
    const names = tableNamesFor('postgres', { tableName: fresh.table });
    const sql = postgresClaim(names, {
      ordered: false,
      deadBlocksKey: false,
      maxRun: 1,
      batchSize: 500,
    });
    const plan = await fresh.ds.transaction(async (m) => {
      for (const statement of postgresOpening(5_000, 1, [])) await m.query(statement);
      await m.query(`PREPARE unordered_claim(text, uuid, int, int, int) AS ${sql}`);
      const lines = await m.query<{ 'QUERY PLAN': string }[]>(
        `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE unordered_claim('plan', '${randomUUID()}', 60000, 500, 1050)`,
      );
      await m.query('DEALLOCATE unordered_claim');
      return lines.map((l) => l['QUERY PLAN']).join('\n');
    });
    expect(plan).toMatch(/Tid Scan/);
    expect(plan).not.toMatch(/_pkey/);
    expect(plan).toMatch(/Index Scan using \S+_pending_idx/);
    expect(plan).not.toMatch(/Seq Scan/);
  });
});

const byId = (a: string | undefined, b: string | undefined): number =>
  (a ?? '').length - (b ?? '').length || (a ?? '').localeCompare(b ?? '');

async function tableUpdates(
  ds: DataSource,
  table: string,
): Promise<{ updated: number; heapOnly: number }> {
  await ds.query('SELECT pg_stat_clear_snapshot()');
  const rows = await ds.query<{ updated: string; heap_only: string }[]>(
    `SELECT n_tup_upd::text AS updated, n_tup_hot_upd::text AS heap_only FROM pg_stat_user_tables WHERE relid = $1::regclass`,
    [`"${table}"`],
  );
  return { updated: Number(rows[0]?.updated ?? 0), heapOnly: Number(rows[0]?.heap_only ?? 0) };
}
