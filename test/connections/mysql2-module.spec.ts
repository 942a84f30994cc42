import type { Pool, PoolConnection } from 'mysql2/promise';
import { OutboxTransactionRequiredError } from '../../lib';
import {
  mysql2Outbox,
  mysql2SqlPort,
  type Mysql2PoolConnection,
} from '../../lib/connections/mysql2';
import { describeWith } from '../support/services';
import { describeConnectionModule, type AppDatabase } from './connection-module.suite';
import { mariadbPool } from './driver-targets';

// An app with no ORM on MariaDB (the MySQL 8 statements are the same): OutboxModule on a
// mysql2 promise pool (`connection: mysql2Outbox(pool)`), enqueuing with the PoolConnection of
// the app's own beginTransaction() … commit().

function pool(connectionLimit = 4): Pool {
  return mariadbPool(connectionLimit);
}

async function inTransaction<T>(
  on: Pool,
  work: (connection: PoolConnection) => Promise<T>,
  rollback = false,
): Promise<T> {
  const connection = await on.getConnection();
  try {
    await connection.beginTransaction();
    const value = await work(connection);
    if (rollback) await connection.rollback();
    else await connection.commit();
    return value;
  } catch (error) {
    await connection.rollback();
    throw error;
  } finally {
    connection.release();
  }
}

async function withConnection<T>(on: Pool, work: (c: PoolConnection) => Promise<T>): Promise<T> {
  const connection = await on.getConnection();
  try {
    return await work(connection);
  } finally {
    connection.release();
  }
}

describeConnectionModule<Mysql2PoolConnection>({
  name: 'mysql2 (nestjs-outbox/mysql2)',
  services: ['mariadb'],
  dialect: 'mysql',
  placeholder: '?',
  setUp() {
    const admin = pool(2);
    return Promise.resolve({ admin: mysql2SqlPort(admin), tearDown: () => admin.end() });
  },
  openDatabase(): Promise<AppDatabase<Mysql2PoolConnection>> {
    const app = pool();
    return Promise.resolve({
      connection: mysql2Outbox(app),
      inTransaction: (work, rollback) => inTransaction(app, work, rollback),
      outsideTransaction: (work) => withConnection(app, work),
      insertOrder: async (tx, table, id) => {
        await tx.query(`INSERT INTO ${table} (id) VALUES (?)`, [id]);
      },
      ping: async () => {
        await app.query('SELECT 1');
      },
      end: () => app.end(),
    });
  },
  async inForeignTransaction(work) {
    const other = pool(1);
    try {
      return await inTransaction(other, work);
    } finally {
      await other.end();
    }
  },
  foreignMessage: /another pool/,
  async moreRefusals({ database, enqueue }) {
    // A transaction is over once committed: the connection is back to autocommit.
    await database.outsideTransaction(async (tx) => {
      await tx.query('START TRANSACTION');
      await tx.query('COMMIT');
      await expect(enqueue(tx)).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
    });
    // With autocommit off, every statement is in a transaction that COMMIT ends: accepted, and
    // rolled back here, so nothing is written.
    await database.outsideTransaction(async (tx) => {
      await tx.query('SET autocommit = 0');
      try {
        await enqueue(tx);
        await tx.query('ROLLBACK');
      } finally {
        await tx.query('SET autocommit = 1');
      }
    });
  },
});

describeWith(['mariadb'], 'mysql2Outbox on a pool already in use', () => {
  it('cannot know its earlier connections, so accepts them (no pool check) instead of refusing', async () => {
    const app = pool(1);
    try {
      // The pool's one connection opens before mysql2Outbox sees the pool.
      await app.query('SELECT 1');
      const connection = mysql2Outbox(app);
      const other = pool(1);
      try {
        await inTransaction(app, async (tx) => {
          await expect(connection.join(tx).query('SELECT 1 AS one')).resolves.toEqual({
            rows: [{ one: 1 }],
            affected: 0,
          });
        });
        // Unchecked: a connection of another pool gets through too (docs/without-typeorm.md).
        await inTransaction(other, (tx) => {
          expect(() => connection.join(tx)).not.toThrow();
          return Promise.resolve();
        });
      } finally {
        await other.end();
      }
    } finally {
      await app.end();
    }
  });
});
