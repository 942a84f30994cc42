import { randomUUID } from 'node:crypto';
import { Test } from '@nestjs/testing';
import { OutboxModule, OutboxService } from '../../lib';
import { type OutboxConnection } from '../../lib/testing';
import { createOutboxTable } from '../../lib/schema';
import { mysql2Outbox } from '../../lib/connections/mysql2';
import { pgOutbox, type PgPoolClient } from '../../lib/connections/pg';
import { outboxDialectOf, outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { serverConnection, uniqueTable } from '../support/databases';
import { RecordingPublisher } from '../support/recording.publisher';
import { serverConnectionsSince } from '../support/server-connections';
import { describeWith, type ServiceName } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as { Pool: new (config: object) => PgPoolForTests };

import { mariadbPool, pgPool, type PgPoolForTests } from './driver-targets';

// The dispatcher on the plain-driver connections, set up as docs/without-typeorm.md shows, while
// the database ends every connection of the app's pool part-way through a drain (a failover,
// pg_terminate_backend, a proxy's idle timeout): the process stays up, the dispatcher pauses as
// for an outage, and every message is delivered, in order per key.

interface DriverApp<Tx> {
  readonly connection: OutboxConnection<Tx>;
  readonly admin: SqlPort;
  inTransaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  end(): Promise<void>;
}

function pgApp(): DriverApp<PgPoolClient> {
  // As docs/without-typeorm.md makes it: a bare pg.Pool, with no 'error' listener of the app's.
  const c = serverConnection('postgres');
  const pool = new pg.Pool({
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
  });
  const admin = pgPool(2);
  return {
    connection: pgOutbox(pool),
    admin: pgOutbox(admin).sql,
    async inTransaction(work) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const value = await work(client);
        await client.query('COMMIT');
        return value;
      } finally {
        client.release();
      }
    },
    async end() {
      await pool.end();
      await admin.end();
    },
  };
}

function mysql2App(): DriverApp<Parameters<ReturnType<typeof mysql2Outbox>['join']>[0]> {
  const pool = mariadbPool();
  const admin = mariadbPool(2);
  return {
    connection: mysql2Outbox(pool),
    admin: mysql2Outbox(admin).sql,
    async inTransaction(work) {
      const connection = await pool.getConnection();
      try {
        await connection.beginTransaction();
        const value = await work(connection);
        await connection.commit();
        return value;
      } finally {
        connection.release();
      }
    },
    async end() {
      await pool.end();
      await admin.end();
    },
  };
}

function describeKilled<Tx>(
  name: string,
  database: 'postgres' | 'mariadb',
  open: () => DriverApp<Tx>,
): void {
  describeWith([database] as ServiceName[], `The dispatcher on ${name}`, () => {
    it('delivers every message, in order per key, when the database ends its connections during a drain', async () => {
      const table = uniqueTable('outbox_killed');
      const uncaught: unknown[] = [];
      const record = (error: unknown): void => {
        uncaught.push(error);
      };
      process.on('uncaughtException', record);
      process.on('unhandledRejection', record);
      const app = open();
      const server = await serverConnectionsSince(database);
      await createOutboxTable(app.admin, { tableName: table });
      const publisher = new RecordingPublisher().slow(50);
      const moduleRef = await Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            connection: app.connection,
            publisher,
            tableName: table,
            // A settle lost with its connection leaves its rows leased until the lease ends.
            dispatcher: { pollIntervalMs: 100, batchSize: 50, leaseMs: 4_000 },
            unlocker: { intervalMs: 500 },
          }),
        ],
      }).compile();
      try {
        await moduleRef.init();
        const outbox = moduleRef.get<OutboxService<Tx>>(OutboxService);
        const keys = Array.from({ length: 20 }, (_, i) => `${name}-${i}-${randomUUID()}`);
        const expected = new Map<string, string[]>(keys.map((k) => [k, []]));
        for (let n = 0; n < 60; n += 1) {
          await app.inTransaction(async (tx) => {
            for (const key of keys) {
              const id = await outbox.enqueue({ topic: 'killed', key, payload: { n } }, tx);
              expected.get(key)?.push(id);
            }
          });
        }
        const total = keys.length * 60;
        await waitFor('a part of the drain', () => publisher.messageIds.length >= 60);
        // Every connection ended, again and again while the dispatcher reconnects: some land
        // between two statements of its transactions, where no query is there to hear them.
        let killed = 0;
        for (let round = 0; round < 8; round += 1) {
          killed += await server.killNew();
          await sleep(150);
        }
        expect(killed).toBeGreaterThan(0);

        await waitFor(
          'every message delivered',
          async () =>
            Number(
              (
                await app.admin.query<{ n: unknown }>(
                  `SELECT COUNT(*) AS n FROM ${table} WHERE status = 'delivered'`,
                )
              ).rows[0]?.n,
            ) === total,
          { timeoutMs: 30_000 },
        );
        expect(new Set(publisher.messageIds).size).toBe(total);
        for (const key of keys) {
          // Duplicates may come of a settle lost with its connection; the order may not change.
          const sent = publisher.sentForKey(key).filter((id, i, all) => all.indexOf(id) === i);
          expect(sent).toEqual(expected.get(key));
        }
        expect(uncaught).toEqual([]);
      } finally {
        process.removeListener('uncaughtException', record);
        process.removeListener('unhandledRejection', record);
        await moduleRef.close();
        for (const statement of outboxTableDropDdl(outboxDialectOf(app.admin.databaseType), {
          tableName: table,
        })) {
          await app.admin.query(statement);
        }
        await server.close();
        await app.end();
      }
    }, 90_000);
  });
}

describeKilled('node-postgres (pgOutbox)', 'postgres', pgApp);
describeKilled('mysql2 (mysql2Outbox)', 'mariadb', mysql2App);
