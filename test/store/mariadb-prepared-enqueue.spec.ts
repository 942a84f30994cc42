import type { Pool, PoolConnection } from 'mysql2/promise';
import { DataSource, QueryFailedError, type EntityManager } from 'typeorm';
import { OutboxError, OutboxService } from '../../lib';
import { createOutboxTable } from '../../lib/schema';
import { mysql2Outbox, mysql2SqlPort } from '../../lib/connections/mysql2';
import { outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import { mariadbPool } from '../connections/driver-targets';
import { serverOptions, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { OrderPlaced, enqueueModules } from '../support/prepared-enqueue';

// On MySQL/MariaDB the one-message enqueue (its key's lock and its row in one INSERT … SELECT)
// runs as a server-side prepared statement (`preparedStatements`, default true): parsed once per
// connection. What that must not change: the row written (its schedule and bytes included) and
// rolled back with the caller's transaction, on the TypeORM port and on the mysql2 port.
// Asserted on the server: the session's prepare and execute counters on the transaction's own
// connection, and the rows in the table.

interface Counters {
  readonly prepared: number;
  readonly executed: number;
}

const COUNTERS_SQL = `SHOW SESSION STATUS WHERE Variable_name IN ('Com_stmt_prepare', 'Com_stmt_execute')`;

function countersOf(rows: readonly { Variable_name: string; Value: string }[]): Counters {
  const value = (name: string): number =>
    Number(rows.find((r) => r.Variable_name === name)?.Value ?? Number.NaN);
  return { prepared: value('Com_stmt_prepare'), executed: value('Com_stmt_execute') };
}

describeWith(['mariadb'], 'MariaDB enqueue as a prepared statement', () => {
  const table = uniqueTable('outbox_prep');
  let admin: Pool;
  const modules = enqueueModules(table);

  beforeAll(async () => {
    admin = mariadbPool(2);
    await createOutboxTable(mysql2SqlPort(admin), { tableName: table });
  });

  afterEach(async () => {
    await modules.closeAll();
    await admin.query(`DELETE FROM ${table}`);
  });

  afterAll(async () => {
    for (const statement of outboxTableDropDdl('mysql', { tableName: table })) {
      await admin.query(statement);
    }
    await admin.end();
  });

  interface StoredRow {
    readonly message_key: string;
    readonly due_in_s: number;
    readonly bytes: string | null;
  }

  /** The rows of these keys, in id order, as the table holds them. */
  async function rowsOf(keys: readonly string[]): Promise<StoredRow[]> {
    const [rows] = await admin.query(
      `SELECT message_key, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), available_at) AS due_in_s,
         HEX(payload_bytes) AS bytes
       FROM ${table} WHERE message_key IN (${keys.map(() => '?').join(', ')}) ORDER BY id`,
      [...keys],
    );
    return (rows as StoredRow[]).map((r) => ({ ...r, due_in_s: Number(r.due_in_s) }));
  }

  const { moduleWith } = modules;

  describe('TypeORM port', () => {
    let dataSource: DataSource;

    beforeAll(async () => {
      dataSource = new DataSource(serverOptions('mariadb', { poolSize: 4 }));
      await dataSource.initialize();
    });

    afterAll(() => dataSource.destroy());

    /** Runs `work` in a transaction; the counters' growth on its connection while it ran. */
    async function counted<T>(
      work: (m: EntityManager) => Promise<T>,
    ): Promise<{ value: T; grew: Counters }> {
      return dataSource.transaction(async (m) => {
        const before = countersOf(await m.query(COUNTERS_SQL));
        const value = await work(m);
        const after = countersOf(await m.query(COUNTERS_SQL));
        return {
          value,
          grew: {
            prepared: after.prepared - before.prepared,
            executed: after.executed - before.executed,
          },
        };
      });
    }

    it('prepares the one-message INSERT once on the connection, executes it per message, and writes the rows', async () => {
      const moduleRef = await moduleWith({ dataSource });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const { value: ids, grew } = await counted(async (m) => [
        await outbox.enqueue(new OrderPlaced('o-1'), m),
        await outbox.enqueue(new OrderPlaced('o-2'), m),
        await outbox.enqueue(new OrderPlaced('o-3'), m),
      ]);
      expect(grew).toEqual({ prepared: 1, executed: 3 });
      expect(new Set(ids).size).toBe(3);
      expect((await rowsOf(['o-1', 'o-2', 'o-3'])).map((r) => r.message_key)).toEqual([
        'o-1',
        'o-2',
        'o-3',
      ]);
    });

    it('keeps a prepared message’s schedule and bytes', async () => {
      const moduleRef = await moduleWith({ dataSource });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const at = new Date(Date.now() + 3_600_000);
      const { value: ids, grew } = await counted(async (m) => [
        await outbox.enqueue(new OrderPlaced('s-delay'), m, { delayMs: 120_000 }),
        await outbox.enqueue(new OrderPlaced('s-at'), m, { availableAt: at }),
        await outbox.enqueue(
          {
            topic: 'files',
            key: 's-bytes',
            payload: Buffer.from([0, 1, 254, 255]),
            contentType: 'application/octet-stream',
          },
          m,
        ),
      ]);
      expect(grew.executed).toBe(3);
      expect(new Set(ids).size).toBe(3);
      const rows = await rowsOf(['s-delay', 's-at', 's-bytes']);
      expect(rows.map((r) => r.message_key)).toEqual(['s-delay', 's-at', 's-bytes']);
      expect(rows[0]?.due_in_s).toBeGreaterThanOrEqual(110);
      expect(rows[0]?.due_in_s).toBeLessThanOrEqual(120);
      expect(rows[1]?.due_in_s).toBeGreaterThanOrEqual(3_590);
      expect(rows[1]?.due_in_s).toBeLessThanOrEqual(3_600);
      expect(rows[2]?.bytes).toBe('0001FEFF');
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
      expect(await rowsOf(['o-rolled-back'])).toEqual([]);
    });

    it('sends plain statements with preparedStatements: false', async () => {
      const moduleRef = await moduleWith({ dataSource }, { preparedStatements: false });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const { value: ids, grew } = await counted(async (m) => [
        await outbox.enqueue(new OrderPlaced('o-x'), m),
        await outbox.enqueue(new OrderPlaced('o-y'), m),
      ]);
      expect(grew).toEqual({ prepared: 0, executed: 0 });
      expect(new Set(ids).size).toBe(2);
      expect((await rowsOf(['o-x', 'o-y'])).map((r) => r.message_key)).toEqual(['o-x', 'o-y']);
    });

    it('fails the enqueue, and so the transaction, saying how to fix it when the server cannot prepare it', async () => {
      // A connection of its own, which has prepared nothing yet, and a server that takes no
      // more prepared statements: what a full max_prepared_stmt_count does.
      const own = new DataSource(serverOptions('mariadb', { poolSize: 1 }));
      await own.initialize();
      modules.onClose(() => own.destroy());
      const moduleRef = await moduleWith({ dataSource: own });
      const outbox = moduleRef.get<OutboxService<EntityManager>>(OutboxService);
      const [[{ limit }]] = (await admin.query(
        'SELECT @@GLOBAL.max_prepared_stmt_count AS `limit`',
      )) as unknown as [[{ limit: number }]];
      let id = '';
      await admin.query('SET GLOBAL max_prepared_stmt_count = 0');
      try {
        const failure = own.transaction(async (m) => {
          id = await outbox.enqueue(new OrderPlaced('o-refused'), m);
        });
        await expect(failure).rejects.toThrow(OutboxError);
        await expect(failure).rejects.toThrow(/preparedStatements: false/);
        await expect(failure).rejects.toMatchObject({ cause: expect.any(QueryFailedError) });
      } finally {
        await admin.query('SET GLOBAL max_prepared_stmt_count = ?', [Number(limit)]);
      }
      expect(id).toBe('');
      const [left] = await admin.query(`SELECT COUNT(*) AS n FROM ${table}`);
      expect(Number((left as { n: number }[])[0]?.n)).toBe(0);
    });
  });

  describe('mysql2 port', () => {
    it('prepares the INSERT on the connection of the caller transaction', async () => {
      const pool = mariadbPool(2);
      modules.onClose(() => pool.end());
      const moduleRef = await moduleWith({ connection: mysql2Outbox(pool) });
      const outbox = moduleRef.get<OutboxService<PoolConnection>>(OutboxService);
      const connection = await pool.getConnection();
      let ids: string[];
      let grew: Counters;
      try {
        await connection.beginTransaction();
        const [beforeRows] = await connection.query(COUNTERS_SQL);
        const before = countersOf(beforeRows as { Variable_name: string; Value: string }[]);
        ids = [
          await outbox.enqueue(new OrderPlaced('p-1'), connection),
          await outbox.enqueue(new OrderPlaced('p-2'), connection),
        ];
        const [afterRows] = await connection.query(COUNTERS_SQL);
        const after = countersOf(afterRows as { Variable_name: string; Value: string }[]);
        grew = {
          prepared: after.prepared - before.prepared,
          executed: after.executed - before.executed,
        };
        await connection.commit();
      } finally {
        connection.release();
      }
      expect(grew).toEqual({ prepared: 1, executed: 2 });
      expect(new Set(ids).size).toBe(2);
      expect((await rowsOf(['p-1', 'p-2'])).map((r) => r.message_key)).toEqual(['p-1', 'p-2']);
    });
  });
});
