import { randomUUID } from 'node:crypto';
import { Pool, type PoolClient } from 'pg';
import { DataSource, type Logger } from 'typeorm';
import { createOutboxTable } from '../../lib/schema';
import { pgOutbox } from '../../lib/connections/pg';
import { pgSqlPort } from '../../lib/drivers/pg/pg.sql-port';
import { typeormConnection } from '../../lib/typeorm/typeorm.connection';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { NewOutboxRow, OutboxStore } from '../../lib/store/ports/outbox-store.port';
import type { SqlRunner } from '../../lib/store/ports/sql-port';
import { serverConnection, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// An enqueue that is its transaction's first write was three round trips on PostgreSQL: the
// insert, refused by its own check (no transaction id yet), `txid_current()`, the insert again.
// Where node-postgres knows, as it sends the insert, that the connection is in the caller's open
// transaction with nothing ahead of it, the insert goes unchecked, in one. The refusals (an
// enqueue not awaited before ROLLBACK, a handle outside a transaction) are the connection
// conformance suite's (test/connections/).

function row(): NewOutboxRow {
  return {
    messageId: randomUUID(),
    topic: 'orders',
    key: 'k',
    type: 'OrderCreated',
    payload: '{}',
    headers: '{}',
    availableAt: null,
    delayMs: null,
  };
}

interface Target {
  readonly name: string;
  /** Runs `work` in a transaction of the app's, recording the statements sent within it. */
  inTransaction(
    sent: string[],
    work: (runner: SqlRunner) => Promise<void>,
    rollback: boolean,
  ): Promise<void>;
  readonly store: OutboxStore;
  close(): Promise<void>;
}

const c = serverConnection('postgres');
const config = {
  host: c.host,
  port: c.port,
  user: c.username,
  password: c.password,
  database: c.database,
};

async function pgTarget(table: string): Promise<Target> {
  const recorder: { sent?: string[] } = {};
  const pool = new Pool({ ...config, max: 2 });
  // Every statement a client of the pool sends, as text or as a named statement.
  pool.on('connect', (client: PoolClient) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    Object.assign(client, {
      query: (...args: unknown[]) => {
        const [first] = args;
        const text = typeof first === 'string' ? first : (first as { text?: string }).text;
        recorder.sent?.push(text ?? '');
        return query(...args);
      },
    });
  });
  const connection = pgOutbox(pool);
  const store = await createOutboxStore(
    connection.sql,
    { tableName: table, schema: null },
    { enabled: false, notify: false },
  );
  return {
    name: 'pg',
    store,
    async inTransaction(sent, work, rollback) {
      const client: PoolClient = await pool.connect();
      try {
        await client.query('BEGIN');
        recorder.sent = sent;
        await work(connection.join(client));
        recorder.sent = undefined;
        await client.query(rollback ? 'ROLLBACK' : 'COMMIT');
      } finally {
        recorder.sent = undefined;
        client.release();
      }
    },
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}

async function typeormTarget(table: string): Promise<Target> {
  const recorder: { sent?: string[] } = {};
  const logger: Logger = {
    logQuery: (query) => void recorder.sent?.push(query),
    logQueryError: () => undefined,
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
  const ds = new DataSource({ ...c, poolSize: 2, logging: ['query'], logger });
  await ds.initialize();
  const connection = typeormConnection(ds);
  const store = await createOutboxStore(
    connection.sql,
    { tableName: table, schema: null },
    { enabled: false, notify: false },
  );
  return {
    name: 'TypeORM',
    store,
    async inTransaction(sent, work, rollback) {
      const runner = ds.createQueryRunner();
      await runner.connect();
      try {
        await runner.startTransaction();
        recorder.sent = sent;
        await work(connection.join(runner.manager));
        recorder.sent = undefined;
        await (rollback ? runner.rollbackTransaction() : runner.commitTransaction());
      } finally {
        recorder.sent = undefined;
        await runner.release();
      }
    },
    close: async () => {
      await store.close();
      await ds.destroy();
    },
  };
}

describeWith(['postgres'], 'PostgreSQL enqueue as the first write of its transaction', () => {
  const admin = new Pool({ ...config, max: 1 });
  afterAll(() => admin.end());

  for (const [name, open] of [
    ['pg', pgTarget],
    ['TypeORM', typeormTarget],
  ] as const) {
    describe(name, () => {
      let table: string;
      let target: Target;
      beforeEach(async () => {
        table = uniqueTable('outbox_trips');
        await createOutboxTable(pgSqlPort(admin), { tableName: table });
        target = await open(table);
      });
      afterEach(async () => {
        await target.close();
        await admin.query(`DROP TABLE IF EXISTS "${table}", "${table}_attempts"`);
      });

      const ids = async (): Promise<string[]> =>
        (
          await admin.query<{ id: string }>(`SELECT message_id::text AS id FROM "${table}"`)
        ).rows.map((r) => r.id);

      it('writes in one statement, and commits or rolls back with the transaction', async () => {
        for (const rollback of [true, false]) {
          const sent: string[] = [];
          const written = row();
          await target.inTransaction(
            sent,
            async (runner) => {
              await target.store.insert(runner, [written], true);
            },
            rollback,
          );
          expect(sent).toHaveLength(1);
          expect(sent[0]).toMatch(/^INSERT INTO/);
          expect(sent[0]).not.toContain('txid_current_if_assigned');
          expect(await ids()).toEqual(rollback ? [] : [written.messageId]);
        }
      });
    });
  }
});
