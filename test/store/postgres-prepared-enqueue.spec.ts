import { DataSource, QueryFailedError, type EntityManager } from 'typeorm';
import { OutboxError, OutboxOptionsError, OutboxService } from '../../lib';
import { createOutboxTable } from '../../lib/schema';
import { pgOutbox, pgSqlPort, type PgPoolClient } from '../../lib/connections/pg';
import { outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import { pgPool, type PgPoolForTests } from '../connections/driver-targets';
import { serverOptions, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { OrderPlaced, enqueueModules } from '../support/prepared-enqueue';

// On PostgreSQL the enqueue INSERT runs as a named prepared statement (`preparedStatements`,
// default true): parsed and planned once per connection. What that must not change: the rows
// written and rolled back with the caller's transaction, on the TypeORM port and on the pg port,
// one message or many. Asserted on the server: the statements prepared on the transaction's own
// connection (pg_prepared_statements) and the rows in the table.

interface Prepared {
  readonly name: string;
  readonly statement: string;
}

const PREPARED_SQL = `SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'nestjs_outbox_%' ORDER BY name`;

describeWith(['postgres'], 'PostgreSQL enqueue as a prepared statement', () => {
  const table = uniqueTable('outbox_prep');
  let admin: PgPoolForTests;
  const modules = enqueueModules(table);

  beforeAll(async () => {
    admin = pgPool(2);
    await createOutboxTable(pgSqlPort(admin), { tableName: table });
  });

  afterEach(async () => {
    await modules.closeAll();
    await admin.query(`DELETE FROM ${table}`);
  });

  afterAll(async () => {
    for (const statement of outboxTableDropDdl('postgres', { tableName: table })) {
      await admin.query(statement);
    }
    await admin.end();
  });

  async function rowsOf(ids: readonly string[]): Promise<string[]> {
    const { rows } = await admin.query(
      `SELECT message_id::text FROM ${table} WHERE message_id = ANY($1::uuid[]) ORDER BY id`,
      [ids],
    );
    return (rows as { message_id: string }[]).map((r) => r.message_id);
  }

  const { moduleWith } = modules;

  describe('TypeORM port', () => {
    let dataSource: DataSource;

    beforeAll(async () => {
      dataSource = new DataSource(serverOptions('postgres', { poolSize: 4 }));
      await dataSource.initialize();
    });

    afterAll(() => dataSource.destroy());

    async function enqueueAndRead(
      outbox: OutboxService<EntityManager>,
      events: readonly OrderPlaced[],
    ): Promise<{ ids: string[]; prepared: Prepared[] }> {
      return dataSource.transaction(async (m) => {
        const ids = await outbox.enqueue(events, m);
        const prepared = await m.query<Prepared[]>(PREPARED_SQL);
        return { ids, prepared };
      });
    }

    it('prepares the one-message and the many-message INSERT on the connection, and writes the rows', async () => {
      const moduleRef = await moduleWith({ dataSource });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const one = await enqueueAndRead(outbox, [new OrderPlaced('o-1')]);
      const many = await enqueueAndRead(
        outbox,
        Array.from({ length: 3 }, (_, i) => new OrderPlaced(`o-${i + 2}`)),
      );

      expect(await rowsOf([...one.ids, ...many.ids])).toEqual([...one.ids, ...many.ids]);
      const statements = [...one.prepared, ...many.prepared].filter((p) =>
        p.statement.includes(`INSERT INTO "${table}"`),
      );
      // One name per statement text: the one-row form (plain parameters) and the array form.
      expect(
        new Set(statements.filter((p) => p.statement.includes('unnest')).map((p) => p.name)).size,
      ).toBe(1);
      expect(
        new Set(statements.filter((p) => !p.statement.includes('unnest')).map((p) => p.name)).size,
      ).toBe(1);
    });

    it('rolls the prepared INSERT back with the caller transaction', async () => {
      const moduleRef = await moduleWith({ dataSource });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      let id = '';
      await expect(
        dataSource.transaction(async (m) => {
          id = await outbox.enqueue(new OrderPlaced('o-rolled-back'), m);
          throw new Error('business rule failed');
        }),
      ).rejects.toThrow('business rule failed');
      expect(id).not.toBe('');
      expect(await rowsOf([id])).toEqual([]);
    });

    it('fails the enqueue, and so the transaction, saying how to fix it when the server lost the statement', async () => {
      // A connection of its own: the one this test resets is left knowing a statement the
      // server no longer has, as behind such a pooler.
      const own = new DataSource(serverOptions('postgres', { poolSize: 1 }));
      await own.initialize();
      modules.onClose(() => own.destroy());
      const moduleRef = await moduleWith({ dataSource: own });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const ids: string[] = [];
      const failure = own.transaction(async (m) => {
        ids.push(await outbox.enqueue(new OrderPlaced('o-a'), m));
        // What a pooler that cannot keep prepared statements does between two transactions.
        await m.query('DEALLOCATE ALL');
        ids.push(await outbox.enqueue(new OrderPlaced('o-b'), m));
      });
      await expect(failure).rejects.toThrow(OutboxError);
      await expect(failure).rejects.toThrow(/preparedStatements: false/);
      await expect(failure).rejects.toMatchObject({ cause: expect.any(QueryFailedError) });
      expect(ids).toHaveLength(1);
      expect(await rowsOf(ids)).toEqual([]);
    });

    it('sends plain statements with preparedStatements: false', async () => {
      const moduleRef = await moduleWith({ dataSource }, { preparedStatements: false });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const { ids, prepared } = await dataSource.transaction(async (m) => {
        await m.query('DEALLOCATE ALL');
        const written = await outbox.enqueue([new OrderPlaced('o-x'), new OrderPlaced('o-y')], m);
        const one = await outbox.enqueue(new OrderPlaced('o-z'), m);
        return {
          ids: [...written, one],
          prepared: await m.query<Prepared[]>(PREPARED_SQL),
        };
      });
      expect(prepared).toEqual([]);
      expect(await rowsOf(ids)).toEqual(ids);
    });
  });

  describe('pg port', () => {
    it('prepares the INSERT on the client of the caller BEGIN', async () => {
      const pool = pgPool(2);
      modules.onClose(() => pool.end());
      const moduleRef = await moduleWith({ connection: pgOutbox(pool) });
      const outbox = moduleRef.get<OutboxService<PgPoolClient>>(OutboxService);
      const client = await pool.connect();
      let ids: string[];
      let prepared: Prepared[];
      try {
        await client.query('BEGIN');
        ids = [
          await outbox.enqueue(new OrderPlaced('p-1'), client),
          ...(await outbox.enqueue([new OrderPlaced('p-2'), new OrderPlaced('p-3')], client)),
        ];
        prepared = (await client.query(PREPARED_SQL)).rows as Prepared[];
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      expect(await rowsOf(ids)).toEqual(ids);
      expect(prepared.filter((p) => p.statement.includes(`INSERT INTO "${table}"`))).toHaveLength(
        2,
      );
    });
  });

  it('refuses a preparedStatements that is not a boolean at bootstrap', async () => {
    const pool = pgPool(1);
    modules.onClose(() => pool.end());
    await expect(
      moduleWith(
        { connection: pgOutbox(pool) },
        { preparedStatements: 'yes' as unknown as boolean },
      ),
    ).rejects.toBeInstanceOf(OutboxOptionsError);
  });
});
