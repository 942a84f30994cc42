import { realpathSync } from 'node:fs';
import { OutboxError, OutboxTransactionRequiredError } from '../../lib';
import { prismaOutbox, type PrismaTransactionClient } from '../../lib/connections/prisma';
import { describeWith } from '../support/services';
import { sqliteFile } from './driver-targets';
import { ormModuleCases, type OrmModuleTarget } from './orm-module.cases';
import {
  openPrisma,
  PRISMA_ORDERS,
  type PrismaTestClient,
  type PrismaTestDatabase,
} from './prisma-targets';
import { sleep } from '../support/wait-for';

// An app on Prisma 7 (generated client on the database's driver adapter): OutboxModule on
// prismaOutbox(prisma), the business row created through the model and the message enqueued with
// the tx of prisma.$transaction(async (tx) => …). On PostgreSQL, MariaDB and SQLite.

/** Rolls back by throwing out of the callback, the way a Prisma app does. */
class Rollback extends Error {}

const NAMES: Record<PrismaTestDatabase, string> = {
  postgres: 'PostgreSQL, adapter-pg',
  mariadb: 'MariaDB, adapter-mariadb',
  sqlite: 'SQLite, adapter-better-sqlite3',
};

function prismaApp(database: PrismaTestDatabase): OrmModuleTarget<PrismaTransactionClient> {
  return {
    name: `Prisma on ${NAMES[database]} (nestjs-outbox/prisma)`,
    services: database === 'sqlite' ? [] : [database],
    ordersTable: PRISMA_ORDERS,
    ordersDdl: (orders) =>
      `CREATE TABLE IF NOT EXISTS ${orders} (id ${database === 'mariadb' ? 'varchar(64)' : 'text'} PRIMARY KEY)`,
    open() {
      const sqlite = database === 'sqlite' ? sqliteFile() : undefined;
      const prisma = openPrisma(database, sqlite?.file);
      return Promise.resolve({
        connection: prismaOutbox(prisma),
        async inTransaction(work, rollback = false) {
          let value: Awaited<ReturnType<typeof work>> | undefined;
          try {
            return await prisma.$transaction(async (tx) => {
              value = await work(tx);
              if (rollback) throw new Rollback();
              return value;
            });
          } catch (error) {
            if (error instanceof Rollback) return value as Awaited<ReturnType<typeof work>>;
            throw error;
          }
        },
        insertOrder: async (tx, id) => {
          await (tx as unknown as PrismaTestClient).order.create({ data: { id } });
        },
        notATransaction: prisma,
        close: async () => {
          await prisma.$disconnect();
          sqlite?.remove();
        },
      });
    },
  };
}

ormModuleCases(prismaApp('postgres'));
ormModuleCases(prismaApp('mariadb'));
ormModuleCases(prismaApp('sqlite'));

describeWith(['postgres'], 'prismaOutbox: which transactions it joins', () => {
  let prisma: PrismaTestClient;
  let other: PrismaTestClient;
  beforeAll(() => {
    prisma = openPrisma();
    other = openPrisma();
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await other?.$disconnect();
  });

  it('joins the tx of an interactive transaction of its client, inside that transaction', async () => {
    const connection = prismaOutbox(prisma);
    const txid = 'SELECT txid_current()::text AS t';
    const [a, b] = await prisma.$transaction(async (tx) => [
      (await connection.join(tx).query<{ t: string }>(txid)).rows[0]?.t,
      (await connection.join(tx).query<{ t: string }>(txid)).rows[0]?.t,
    ]);
    expect(a).toBeDefined();
    expect(b).toBe(a);
  });

  it('refuses the client itself, and a tx of another client as foreign', async () => {
    const connection = prismaOutbox(prisma);
    expect(() => connection.join(prisma)).toThrow(OutboxTransactionRequiredError);
    const error = await other.$transaction((tx) =>
      Promise.resolve().then(() => {
        try {
          connection.join(tx);
          return undefined;
        } catch (e) {
          return e;
        }
      }),
    );
    expect(error).toBeInstanceOf(OutboxError);
    expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
    expect((error as Error).message).toMatch(/another PrismaClient/);
  });

  it('a tx kept after its transaction is refused at its first statement, as a transaction that has ended', async () => {
    const connection = prismaOutbox(prisma);
    const kept = await prisma.$transaction((tx) => Promise.resolve(tx));
    const refused = connection.join(kept).query('SELECT 1');
    await expect(refused).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
    await expect(refused).rejects.toThrow(/has ended/);
  });
});

describe('prismaOutbox on SQLite: the one connection, and which transactions it joins', () => {
  it("runs the outbox's statements after the app's open transaction, never inside it", async () => {
    const sqlite = sqliteFile();
    const prisma = openPrisma('sqlite', sqlite.file);
    try {
      const { sql } = prismaOutbox(prisma);
      await sql.query('CREATE TABLE log (n INTEGER NOT NULL)');
      let ours: Promise<unknown> | undefined;
      const outcome = await prisma
        .$transaction(async (tx) => {
          await tx.$executeRawUnsafe('INSERT INTO log (n) VALUES (1)');
          ours = sql.query('INSERT INTO log (n) VALUES (2)');
          await sleep(100);
          throw new Rollback();
        })
        .catch((e: unknown) => e);
      expect(outcome).toBeInstanceOf(Rollback);
      await ours;
      // Had the outbox's insert run on the adapter's connection inside the app's transaction,
      // it would have rolled back with it.
      const { rows } = await sql.query<{ n: unknown }>('SELECT n FROM log');
      expect(rows.map((r) => Number(r.n))).toEqual([2]);
      expect(realpathSync(String(sql.databaseFile))).toBe(realpathSync(sqlite.file));
    } finally {
      await prisma.$disconnect();
      sqlite.remove();
    }
  });

  it('refuses the client itself, and a tx of another client on the same file as foreign', async () => {
    const sqlite = sqliteFile();
    const prisma = openPrisma('sqlite', sqlite.file);
    const other = openPrisma('sqlite', sqlite.file);
    try {
      const connection = prismaOutbox(prisma);
      expect(() => connection.join(prisma)).toThrow(OutboxTransactionRequiredError);
      const error = await other.$transaction((tx) =>
        Promise.resolve().then(() => {
          try {
            connection.join(tx);
            return undefined;
          } catch (e) {
            return e;
          }
        }),
      );
      expect(error).toBeInstanceOf(OutboxError);
      expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
      expect((error as Error).message).toMatch(/another PrismaClient/);
    } finally {
      await prisma.$disconnect();
      await other.$disconnect();
      sqlite.remove();
    }
  });

  it('refuses a client of a provider it has no SQL for, naming the ones it runs on', () => {
    const client = { _activeProvider: 'sqlserver' } as unknown as PrismaTestClient;
    expect(() => prismaOutbox(client)).toThrow(/Prisma on sqlserver.*"mysql".*"sqlite"/);
  });
});
