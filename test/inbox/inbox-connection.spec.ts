import { randomUUID } from 'node:crypto';
import { Test } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { OutboxError, OutboxOptionsError, OutboxTransactionRequiredError } from '../../lib';
import {
  createInboxTable,
  Inbox,
  InboxModule,
  InboxService,
  inboxTableDropDdl,
} from '../../lib/inbox';
import { pgOutbox } from '../../lib/connections/pg';
import { prismaOutbox, type PrismaTransactionClient } from '../../lib/connections/prisma';
import type { OutboxDialect } from '../../lib/schema';
import { uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { pgPool, sqliteFile } from '../connections/driver-targets';
import { openPrisma, type PrismaTestDatabase } from '../connections/prisma-targets';
import { sleep } from '../support/wait-for';

// The inbox without TypeORM: built on a library's outbox connection, it records ids with
// recordOnce(tx, entry) in the app's own transaction. Prisma on each database, and node-postgres
// for two deliveries of one id at once.

class Rollback extends Error {}

const DIALECT: Record<PrismaTestDatabase, OutboxDialect> = {
  postgres: 'postgres',
  mariadb: 'mysql',
  sqlite: 'sqlite',
};

for (const database of ['postgres', 'mariadb', 'sqlite'] as const) {
  describeWith(
    database === 'sqlite' ? [] : [database],
    `inbox on a Prisma connection (${database})`,
    () => {
      const cleanups: (() => Promise<unknown>)[] = [];
      afterEach(async () => {
        for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
      });

      async function open() {
        const sqlite = database === 'sqlite' ? sqliteFile() : undefined;
        const prisma = openPrisma(database, sqlite?.file);
        const connection = prismaOutbox(prisma);
        const tableName = uniqueTable('inbox_conn');
        await createInboxTable(connection.sql, { tableName });
        cleanups.push(async () => {
          for (const sql of inboxTableDropDdl(DIALECT[database], { tableName }))
            await connection.sql.query(sql);
          await prisma.$disconnect();
          sqlite?.remove();
        });
        const inbox = new Inbox<PrismaTransactionClient>(connection, { tableName });
        const count = async () =>
          Number(
            (
              await connection.sql.query(
                `SELECT COUNT(*) AS n FROM ${database === 'mariadb' ? `\`${tableName}\`` : `"${tableName}"`}`,
              )
            ).rows[0]?.n,
          );
        return { prisma, connection, inbox, count, tableName };
      }

      it('records an id once per consumer in the caller’s transaction; a duplicate resolves to false', async () => {
        const { prisma, inbox, count } = await open();
        const entry = { consumer: 'billing', messageId: randomUUID() };
        expect(await prisma.$transaction((tx) => inbox.recordOnce(tx, entry))).toBe(true);
        expect(await prisma.$transaction((tx) => inbox.recordOnce(tx, entry))).toBe(false);
        expect(
          await prisma.$transaction((tx) => inbox.recordOnce(tx, { ...entry, consumer: 'audit' })),
        ).toBe(true);
        expect(await count()).toBe(2);
      });

      it('forgets the id when the caller’s transaction rolls back, so the redelivery is handled', async () => {
        const { prisma, inbox, count } = await open();
        const entry = { consumer: 'billing', messageId: randomUUID() };
        await expect(
          prisma.$transaction(async (tx) => {
            expect(await inbox.recordOnce(tx, entry)).toBe(true);
            throw new Rollback('handler failed');
          }),
        ).rejects.toBeInstanceOf(Rollback);
        expect(await count()).toBe(0);
        expect(await prisma.$transaction((tx) => inbox.recordOnce(tx, entry))).toBe(true);
        expect(await count()).toBe(1);
      });

      it('refuses the client outside a transaction, handleOnce and dataSource, with what to do instead', async () => {
        const { prisma, inbox, count } = await open();
        const entry = { consumer: 'billing', messageId: randomUUID() };
        await expect(
          inbox.recordOnce(prisma as unknown as PrismaTransactionClient, entry),
        ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
        expect(() => inbox.dataSource).toThrow(/recordOnce\(tx, \{ consumer, messageId \}\)/);
        await expect(
          inbox.handleOnce({} as DataSource, entry, () => Promise.resolve(1)),
        ).rejects.toBeInstanceOf(OutboxError);
        await expect(
          prisma.$transaction((tx) => inbox.recordOnce(tx, { consumer: '', messageId: 'x' })),
        ).rejects.toThrow(/Invalid inbox consumer/);
        expect(await count()).toBe(0);
      });

      it('purges old ids through the connection', async () => {
        const { prisma, inbox, count } = await open();
        await prisma.$transaction((tx) =>
          inbox.recordOnce(tx, { consumer: 'billing', messageId: randomUUID() }),
        );
        expect(await inbox.purge(60_000)).toBe(0);
        // Older than 0 ms means recorded before this millisecond (SQLite keeps milliseconds).
        await sleep(5);
        expect(await inbox.purge(0)).toBe(1);
        expect(await count()).toBe(0);
      });

      it('InboxModule.forRoot({ connection }) provides InboxService on it', async () => {
        const { prisma, connection, tableName, count } = await open();
        const moduleRef = await Test.createTestingModule({
          imports: [InboxModule.forRoot({ connection, tableName })],
        }).compile();
        cleanups.push(() => moduleRef.close());
        const inbox = moduleRef.get<InboxService<PrismaTransactionClient>>(InboxService);
        const entry = { consumer: 'billing', messageId: randomUUID() };
        expect(await prisma.$transaction((tx) => inbox.recordOnce(tx, entry))).toBe(true);
        expect(await prisma.$transaction((tx) => inbox.recordOnce(tx, entry))).toBe(false);
        expect(await count()).toBe(1);
        expect(() => InboxModule.forRoot({ connection, dataSource: 'default', tableName })).toThrow(
          OutboxOptionsError,
        );
      });
    },
  );
}

describeWith(['postgres'], 'inbox on node-postgres: two deliveries of one id at once', () => {
  it('the second waits for the first transaction: false after its commit, true after its rollback', async () => {
    const pool = pgPool();
    const connection = pgOutbox(pool);
    const tableName = uniqueTable('inbox_pg');
    await createInboxTable(connection.sql, { tableName });
    const inbox = new Inbox(connection, { tableName });
    const [a, b] = [await pool.connect(), await pool.connect()];
    try {
      for (const [ending, expected] of [
        ['ROLLBACK', true],
        ['COMMIT', false],
      ] as const) {
        const entry = { consumer: 'billing', messageId: randomUUID() };
        await a.query('BEGIN');
        await b.query('BEGIN');
        expect(await inbox.recordOnce(a, entry)).toBe(true);
        let settled = false;
        const second = inbox.recordOnce(b, entry).finally(() => {
          settled = true;
        });
        await sleep(200);
        expect(settled).toBe(false);
        await a.query(ending);
        expect(await second).toBe(expected);
        await b.query('COMMIT');
      }
    } finally {
      a.release();
      b.release();
      for (const sql of inboxTableDropDdl('postgres', { tableName })) await pool.query(sql);
      await pool.end();
    }
  });
});
