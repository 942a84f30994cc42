import { randomUUID } from 'node:crypto';
import { createInboxTable, Inbox, inboxTableDropDdl } from '../../lib/inbox';
import { pgOutbox } from '../../lib/connections/pg';
import { mysql2Outbox } from '../../lib/connections/mysql2';
import type { OutboxConnection } from '../../lib/testing';
import type { OutboxDialect } from '../../lib/schema';
import { uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { mariadbPool, pgPool } from '../connections/driver-targets';

// recordOnce not awaited before the app's ROLLBACK, or made while a ROLLBACK is on its way: the
// id must go with the rolled-back transaction, never commit on its own (the redelivery would be
// skipped as a duplicate, and the message never handled).

interface RawClient {
  query(sql: string): Promise<unknown>;
}

interface Target {
  readonly name: string;
  readonly service: 'postgres' | 'mariadb';
  readonly dialect: OutboxDialect;
  open(): Promise<{
    connection: OutboxConnection<unknown>;
    client(): Promise<{ raw: RawClient; tx: unknown; release(): void }>;
    close(): Promise<void>;
  }>;
}

const TARGETS: Target[] = [
  {
    name: 'node-postgres',
    service: 'postgres',
    dialect: 'postgres',
    open() {
      const pool = pgPool(4);
      return Promise.resolve({
        connection: pgOutbox(pool),
        async client() {
          const c = await pool.connect();
          return { raw: c, tx: c, release: () => c.release() };
        },
        close: () => pool.end(),
      });
    },
  },
  {
    name: 'mysql2',
    service: 'mariadb',
    dialect: 'mysql',
    open() {
      const pool = mariadbPool(4);
      return Promise.resolve({
        connection: mysql2Outbox(pool),
        async client() {
          const c = await pool.getConnection();
          return { raw: c, tx: c, release: () => c.release() };
        },
        close: () => pool.end(),
      });
    },
  },
];

for (const target of TARGETS) {
  describeWith([target.service], `inbox recordOnce racing a ROLLBACK (${target.name})`, () => {
    let opened: Awaited<ReturnType<Target['open']>>;
    let inbox: Inbox<unknown>;
    let tableName: string;
    const count = async (): Promise<number> => {
      const q = target.dialect === 'mysql' ? `\`${tableName}\`` : `"${tableName}"`;
      return Number(
        (await opened.connection.sql.query(`SELECT COUNT(*) AS n FROM ${q}`)).rows[0]?.n,
      );
    };

    beforeEach(async () => {
      opened = await target.open();
      tableName = uniqueTable('inbox_race');
      await createInboxTable(opened.connection.sql, { tableName });
      inbox = new Inbox(opened.connection, { tableName });
    });
    afterEach(async () => {
      for (const sql of inboxTableDropDdl(target.dialect, { tableName }))
        await opened.connection.sql.query(sql);
      await opened.close();
    });

    const cases: [string, (raw: RawClient, record: () => Promise<boolean>) => Promise<unknown>][] =
      [
        [
          'not awaited, ROLLBACK in the same tick',
          async (raw, record) => {
            const p = record();
            await Promise.allSettled([p, raw.query('ROLLBACK')]);
            return p;
          },
        ],
        [
          'not awaited, ROLLBACK after setImmediate',
          async (raw, record) => {
            const p = record();
            await new Promise((r) => setImmediate(r));
            await Promise.allSettled([p, raw.query('ROLLBACK')]);
            return p;
          },
        ],
        [
          'made while the ROLLBACK is on its way',
          async (raw, record) => {
            const rollback = raw.query('ROLLBACK');
            const p = record();
            await Promise.allSettled([p, rollback]);
            return p;
          },
        ],
      ];
    for (const [name, race] of cases) {
      it(`${name}: the id does not stay`, async () => {
        for (let i = 0; i < 10; i++) {
          const { raw, tx, release } = await opened.client();
          try {
            await raw.query('BEGIN');
            const entry = { consumer: 'billing', messageId: randomUUID() };
            await race(raw, () => inbox.recordOnce(tx, entry)).catch(() => undefined);
          } finally {
            release();
          }
        }
        expect(await count()).toBe(0);
      });
    }
  });
}
