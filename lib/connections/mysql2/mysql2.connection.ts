import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { SqlRunner } from '../../store/ports/sql-port';
import type { Mysql2Pool, Mysql2PoolConnection } from '../../drivers/mysql2/mysql2-client';
import { mysql2SqlPort, mysql2SqlRunner } from '../../drivers/mysql2/mysql2.sql-port';
import { mysqlInTransaction } from '../../drivers/mysql2/mysql2-transaction-status';

/**
 * The outbox on a mysql2 promise pool (MySQL 8 or MariaDB 10.6+), for
 * `OutboxModule.forRoot({ connection: mysql2Outbox(pool) })`: the dispatcher, unlocker, cleaner
 * and admin borrow connections of `pool` for their short transactions; `enqueue(message,
 * connection)` writes with the PoolConnection the app ran `beginTransaction()` on. The pool
 * stays the app's: the outbox never ends it.
 *
 * mysql2 has no commit event and MySQL no notifications: the dispatcher finds the message at its
 * next poll.
 */
export function mysql2Outbox(pool: Mysql2Pool): OutboxConnection<Mysql2PoolConnection> {
  const connections = poolConnections(pool);
  return {
    sql: mysql2SqlPort(pool),
    join(connection) {
      const core = connection.connection;
      if (connections !== undefined && core !== undefined && !connections.has(core)) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'connection',
            'pool',
            'Enqueue with a connection of the pool given to mysql2Outbox(pool).',
          ),
        );
      }
      return inTransactionRunner(connection);
    },
  };
}

/**
 * The statements of the caller's transaction, after the server has said the connection is in
 * one. mysql2 keeps no transaction state, but every OK packet carries the server's status: a
 * `DO 0` round trip reads it before the first statement, since a statement on a connection
 * outside a transaction would commit at once, alone.
 */
function inTransactionRunner(connection: Mysql2PoolConnection): SqlRunner {
  const runner = mysql2SqlRunner(connection);
  let checked: Promise<void> | undefined;
  return {
    async query(sql, params, options) {
      checked ??= requireTransaction(connection);
      await checked;
      return runner.query(sql, params, options);
    },
  };
}

async function requireTransaction(connection: Mysql2PoolConnection): Promise<void> {
  const inTransaction = await mysqlInTransaction((sql) => connection.query(sql));
  if (inTransaction === false)
    throw new OutboxTransactionRequiredError(OutboxMessages.mysql2TransactionRequired());
}

/**
 * The connections `pool` opens, when every one of them can be seen: the pool announces each new
 * connection with 'connection', so the set is complete only if the pool had none yet. Undefined
 * when it cannot be complete (a pool already in use, or one whose count cannot be read): the pool
 * is then not checked.
 */
function poolConnections(pool: Mysql2Pool): WeakSet<object> | undefined {
  // Read structurally: a mysql2 promise pool is an EventEmitter over the callback pool
  // (`pool.pool`), whose count of open connections has no public name.
  const { on, pool: core } = pool as { on?: unknown; pool?: { _allConnections?: unknown } };
  const open = core?._allConnections as { length?: unknown } | undefined;
  if (typeof on !== 'function' || open?.length !== 0) return undefined;
  const connections = new WeakSet<object>();
  (on as (event: string, listener: (connection: object) => void) => unknown).call(
    pool,
    'connection',
    (connection: object) => connections.add(connection),
  );
  return connections;
}
