import { OutboxError, OutboxTransactionRequiredError } from '../../lib';
import { prismaOutbox, type PrismaTransactionClient } from '../../lib/orm/prisma';
import { describeWith } from '../support/services';
import { ormModuleCases } from './orm-module.cases';
import { openPrisma, PRISMA_ORDERS, type PrismaTestClient } from './prisma-targets';

// An app on Prisma 7 (generated client on @prisma/adapter-pg): OutboxModule on
// prismaOutbox(prisma), the business row created through the model and the message enqueued with
// the tx of prisma.$transaction(async (tx) => …).

/** Rolls back by throwing out of the callback, the way a Prisma app does. */
class Rollback extends Error {}

ormModuleCases<PrismaTransactionClient>({
  name: 'Prisma on PostgreSQL (nestjs-outbox/prisma)',
  services: ['postgres'],
  ordersTable: PRISMA_ORDERS,
  ordersDdl: (orders) => `CREATE TABLE IF NOT EXISTS ${orders} (id text PRIMARY KEY)`,
  open() {
    const prisma = openPrisma();
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
      close: () => prisma.$disconnect(),
    });
  },
});

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

  it('a tx kept after its transaction fails at its first statement (Prisma refuses it)', async () => {
    const connection = prismaOutbox(prisma);
    const kept = await prisma.$transaction((tx) => Promise.resolve(tx));
    await expect(connection.join(kept).query('SELECT 1')).rejects.toThrow(/closed|committed/i);
  });
});
