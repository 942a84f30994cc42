import type { EntityManager, MikroORM } from '@mikro-orm/core';
import { OutboxError, OutboxTransactionRequiredError } from '../../lib';
import { mikroOrmOutbox } from '../../lib/connections/mikro-orm';
import { describeWith } from '../support/services';
import { ormModuleCases, type OrmModuleTarget } from './orm-module.cases';
import { openMikroOrm, orderSchema, type MikroOrmTestDatabase } from './mikro-orm-targets';
import { sleep } from '../support/wait-for';

// An app on MikroORM: OutboxModule on mikroOrmOutbox(orm), the business row persisted as an
// entity and the message enqueued with the EntityManager of em.transactional(async (em) => …).

/** Rolls back by throwing out of the callback, the way a MikroORM app does. */
class Rollback extends Error {}

const NAMES: Record<MikroOrmTestDatabase, string> = {
  postgres: 'PostgreSQL',
  mariadb: 'MariaDB',
  sqlite: 'SQLite, better-sqlite',
};

function mikroOrmApp(database: MikroOrmTestDatabase): OrmModuleTarget<EntityManager> {
  return {
    name: `MikroORM on ${NAMES[database]} (nestjs-outbox/mikro-orm)`,
    services: database === 'sqlite' ? [] : [database],
    ordersDdl: (orders) =>
      `CREATE TABLE ${orders} (id ${database === 'mariadb' ? 'varchar(64)' : 'text'} PRIMARY KEY)`,
    async open(orders) {
      const orm = await openMikroOrm(database, orders);
      const schema = orderSchema(orders);
      return {
        connection: mikroOrmOutbox(orm),
        async inTransaction(work, rollback = false) {
          let value: Awaited<ReturnType<typeof work>> | undefined;
          try {
            return await orm.em.transactional(async (em) => {
              value = await work(em);
              if (rollback) throw new Rollback();
              return value;
            });
          } catch (error) {
            if (error instanceof Rollback) return value as Awaited<ReturnType<typeof work>>;
            throw error;
          }
        },
        insertOrder: (em, id) => {
          // Flushed by transactional() at commit, after the enqueue: the order in one commit.
          em.persist(em.create(schema, { id }));
          return Promise.resolve();
        },
        notATransaction: orm.em.fork(),
        close: () => orm.close(true),
      };
    },
  };
}

ormModuleCases(mikroOrmApp('postgres'));
ormModuleCases(mikroOrmApp('mariadb'));
ormModuleCases(mikroOrmApp('sqlite'));

describeWith(['postgres'], 'mikroOrmOutbox: which EntityManagers it joins', () => {
  let orm: MikroORM;
  let other: MikroORM;
  beforeAll(async () => {
    orm = await openMikroOrm('postgres');
    other = await openMikroOrm('postgres');
  });
  afterAll(async () => {
    await orm?.close(true);
    await other?.close(true);
  });

  it('joins the EntityManager of a transaction of its ORM', async () => {
    const connection = mikroOrmOutbox(orm);
    const { rows } = await orm.em.transactional((em) =>
      connection.join(em).query<{ one: number }>('SELECT $1::int AS one', [1]),
    );
    expect(rows).toEqual([{ one: 1 }]);
  });

  it('joins the global EntityManager inside transactional() (what @Transactional() methods use)', async () => {
    const connection = mikroOrmOutbox(orm);
    const txid = 'SELECT txid_current()::text AS t';
    const [fork, global] = await orm.em.transactional(async (em) => [
      (await connection.join(em).query<{ t: string }>(txid)).rows[0]?.t,
      // orm.em resolves to the transaction's fork through MikroORM's transaction context.
      (await connection.join(orm.em).query<{ t: string }>(txid)).rows[0]?.t,
    ]);
    expect(fork).toBeDefined();
    expect(global).toBe(fork);
  });

  it('sends values as they are: arrays whole, a question mark in the text left alone', async () => {
    // MikroORM fills `?` in itself and would spread an array into a list.
    const connection = mikroOrmOutbox(orm);
    const awkward = ['a"b', 'c\\d', null, "e'f", 'g?h'];
    const { rows } = await orm.em.transactional((em) =>
      connection
        .join(em)
        .query<{ q: string; a: (string | null)[]; same: boolean }>(
          "SELECT '?' AS q, $1::text[] AS a, $2::text = $2::text AS same",
          [awkward, 'x?'],
        ),
    );
    expect(rows).toEqual([{ q: '?', a: awkward, same: true }]);
  });

  it('refuses an EntityManager outside a transaction, and one kept after its transaction', async () => {
    const connection = mikroOrmOutbox(orm);
    expect(() => connection.join(orm.em.fork())).toThrow(OutboxTransactionRequiredError);
    const kept = await orm.em.transactional((em) => Promise.resolve(em));
    expect(() => connection.join(kept)).toThrow(OutboxTransactionRequiredError);
  });

  it('refuses a transaction of another MikroORM instance as foreign', async () => {
    const connection = mikroOrmOutbox(orm);
    const error = await other.em.transactional((em) =>
      Promise.resolve().then(() => {
        try {
          connection.join(em);
          return undefined;
        } catch (e) {
          return e;
        }
      }),
    );
    expect(error).toBeInstanceOf(OutboxError);
    expect(error).not.toBeInstanceOf(OutboxTransactionRequiredError);
    expect((error as Error).message).toMatch(/another MikroORM instance/);
  });
});

describe('mikroOrmOutbox on SQLite: one connection for the app and the outbox', () => {
  it("runs the outbox's statements after the app's open transaction, never inside it", async () => {
    const orm = await openMikroOrm('sqlite');
    try {
      const connection = mikroOrmOutbox(orm);
      const { sql } = connection;
      await sql.query('CREATE TABLE log (n INTEGER NOT NULL)');
      let ours: Promise<unknown> | undefined;
      const outcome = await orm.em
        .transactional(async (em) => {
          await connection.join(em).query('INSERT INTO log (n) VALUES (1)');
          ours = sql.query('INSERT INTO log (n) VALUES (2)');
          await sleep(100);
          throw new Rollback();
        })
        .catch((e: unknown) => e);
      expect(outcome).toBeInstanceOf(Rollback);
      await ours;
      const { rows } = await sql.query<{ n: unknown }>('SELECT n FROM log');
      expect(rows.map((r) => Number(r.n))).toEqual([2]);
      expect(sql.databaseFile).toBe(orm.config.get('dbName'));
    } finally {
      await orm.close(true);
    }
  });
});
