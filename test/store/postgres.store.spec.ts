import { createOutboxTable, tableNamesFor } from '../../lib/store/outbox-dialect';
import {
  POSTGRES_FILLFACTOR,
  postgresDropWaitingIndex,
} from '../../lib/store/postgres/postgres.sql';
import type { DataSource } from 'typeorm';
import { typeormSqlPort } from '../../lib/orm/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { OutboxStore } from '../../lib/store/outbox-store.port';
import { TEST_DATABASES, uniqueTable, type TestDatabase } from '../support/databases';
import { describeWith } from '../support/services';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

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

/** A store on a table of its own for the describe block, made before its tests, dropped after. */
function storeOnFreshTable(database: TestDatabase, prefix: string): FreshStore {
  const fresh = { table: uniqueTable(prefix) } as FreshStore;
  beforeAll(async () => {
    fresh.ds = await database.open(fresh.table);
    fresh.store = await createOutboxStore(
      typeormSqlPort(fresh.ds),
      { tableName: fresh.table, schema: null },
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
      await new Promise((resolve) => setTimeout(resolve, 100));
      counts = await tableUpdates(ds, table);
    }
    expect({
      updated: counts.updated - updatesBefore.updated,
      heapOnly: counts.heapOnly - updatesBefore.heapOnly,
    }).toEqual({ updated: 20, heapOnly: 20 });
  });
});

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
