import { DataSource } from 'typeorm';
import { OutboxError } from '../../lib';
import { createOutboxTable } from '../../lib/schema';
import { pgSqlPort } from '../../lib/connections/pg';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { pgPool, type PgPoolForTests } from '../connections/driver-targets';
import { serverOptions, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// On PostgreSQL the statements of the dispatcher's own transactions (claim, settle, park,
// promotion) run as named prepared statements with `preparedStatements` (default true), parsed
// once per connection. What that must not change: which rows a claim leases and a settle
// delivers; and behind a pooler that loses prepared statements, a claim must fail saying how to
// fix it, changing nothing. Each port gets one connection, so the statements it prepared are
// the ones pg_prepared_statements shows to the port's next query.

interface Prepared {
  readonly statement: string;
}

const PREPARED_SQL = `SELECT statement FROM pg_prepared_statements WHERE name LIKE 'nestjs_outbox_%'`;

describeWith(['postgres'], 'PostgreSQL dispatcher statements as prepared statements', () => {
  const table = uniqueTable('outbox_prep_dispatch');
  let admin: PgPoolForTests;
  const closers: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    admin = pgPool(2);
    await createOutboxTable(pgSqlPort(admin), { tableName: table });
  });

  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
    await admin.query(`DELETE FROM ${table}`);
  });

  afterAll(async () => {
    for (const statement of outboxTableDropDdl('postgres', { tableName: table })) {
      await admin.query(statement);
    }
    await admin.end();
  });

  const ports: Record<string, () => Promise<SqlPort>> = {
    pg: () => {
      const pool = pgPool(1);
      closers.push(() => pool.end());
      return Promise.resolve(pgSqlPort(pool));
    },
    typeorm: async () => {
      const dataSource = new DataSource(serverOptions('postgres', { poolSize: 1 }));
      await dataSource.initialize();
      closers.push(() => dataSource.destroy());
      return typeormSqlPort(dataSource);
    },
  };

  function storeOn(sql: SqlPort, preparedStatements = true): Promise<OutboxStore> {
    return createOutboxStore(
      sql,
      {
        tableName: table,
        schema: null,
        ordering: { enabled: true, onDeadLetter: 'block' },
        preparedStatements,
      },
      { enabled: true, notify: false },
    );
  }

  /** Messages `from`..`to` of key `key`, in that order. */
  async function seed(key: string, from: number, to: number): Promise<void> {
    await admin.query(
      `INSERT INTO ${table} (message_id, topic, message_key, event_type, payload)
       SELECT gen_random_uuid(), 't', $1, 'e', json_build_object('seq', g)
       FROM generate_series($2::int, $3::int) AS g ORDER BY g`,
      [key, from, to],
    );
  }

  async function statuses(): Promise<{ seq: number; status: string; leased: boolean }[]> {
    const { rows } = await admin.query(
      `SELECT (payload->>'seq')::int AS seq, status, lock_token IS NOT NULL AS leased FROM ${table} ORDER BY id`,
    );
    return rows as { seq: number; status: string; leased: boolean }[];
  }

  async function drainOnce(store: OutboxStore): Promise<number> {
    const batch = await store.claim({ limit: 10, owner: 'test', leaseMs: 30_000 });
    const ids = batch.records.map((r) => r.id);
    const keys = [...new Set(batch.records.flatMap((r) => (r.key === null ? [] : [r.key])))];
    return store.settle(
      batch.token,
      { delivered: ids, retry: [], dead: [], release: [], advancedKeys: keys },
      false,
    );
  }

  for (const [port, open] of Object.entries(ports)) {
    describe(`${port} port`, () => {
      it('claims and settles through statements prepared on the connection, and delivers in order', async () => {
        const sql = await open();
        const store = await storeOn(sql);
        await seed('a', 1, 2);
        await seed('b', 3, 3);

        // The run of key a and the head of key b, then nothing left.
        expect(await drainOnce(store)).toBe(3);
        expect(await statuses()).toEqual([
          { seq: 1, status: 'delivered', leased: false },
          { seq: 2, status: 'delivered', leased: false },
          { seq: 3, status: 'delivered', leased: false },
        ]);
        const { rows } = await sql.query<Prepared>(PREPARED_SQL);
        const texts = rows.map((r) => r.statement);
        expect(texts.some((t) => t.startsWith('WITH w AS MATERIALIZED'))).toBe(true);
        expect(texts.some((t) => t.startsWith(`WITH d AS (UPDATE "${table}"`))).toBe(true);
      });

      it('fails the claim that meets a lost statement saying how to fix it, leasing nothing, then runs unprepared', async () => {
        const sql = await open();
        const store = await storeOn(sql);
        await seed('a', 1, 1);
        expect(await drainOnce(store)).toBe(1);
        await seed('a', 2, 3);
        // What a pooler that cannot keep prepared statements does between two transactions.
        await sql.query('DEALLOCATE ALL');

        const claim = store.claim({ limit: 10, owner: 'test', leaseMs: 30_000 });
        await expect(claim).rejects.toThrow(OutboxError);
        await expect(claim).rejects.toThrow(/preparedStatements: false/);
        expect(await statuses()).toEqual([
          { seq: 1, status: 'delivered', leased: false },
          { seq: 2, status: 'pending', leased: false },
          { seq: 3, status: 'pending', leased: false },
        ]);

        // The next try (the dispatcher's next claim, a settle's retry) goes as plain text.
        expect(await drainOnce(store)).toBe(2);
        expect((await statuses()).map((r) => r.status)).toEqual([
          'delivered',
          'delivered',
          'delivered',
        ]);
        expect((await sql.query<Prepared>(PREPARED_SQL)).rows).toEqual([]);
      });

      it('sends plain statements with preparedStatements: false', async () => {
        const sql = await open();
        const store = await storeOn(sql, false);
        await seed('a', 1, 2);
        expect(await drainOnce(store)).toBe(2);
        expect(await statuses()).toEqual([
          { seq: 1, status: 'delivered', leased: false },
          { seq: 2, status: 'delivered', leased: false },
        ]);
        expect((await sql.query<Prepared>(PREPARED_SQL)).rows).toEqual([]);
      });
    });
  }
});
