import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { PgPool, PgPoolClient } from '../../drivers/pg/pg-client';
import { pgSqlPort, pgSqlRunner } from '../../drivers/pg/pg.sql-port';
import { poolClients } from '../../drivers/pg/pg-pool-clients';

/**
 * The outbox on a node-postgres pool, for `OutboxModule.forRoot({ connection: pgOutbox(pool) })`:
 * the dispatcher, unlocker, cleaner and admin borrow clients of `pool` for their short
 * transactions and hold one for LISTEN; `enqueue(message, client)` writes with the client the
 * app ran `BEGIN` on. The pool stays the app's: the outbox never ends it.
 *
 * node-postgres has no commit event: the local dispatcher wakes on the NOTIFY the enqueue sends
 * (delivered at commit, `dispatcher.listen`, on by default) or at its next poll.
 */
export function pgOutbox(pool: PgPool): OutboxConnection<PgPoolClient> {
  const clients = poolClients(pool);
  return {
    sql: pgSqlPort(pool),
    join(client) {
      // A pool runs each statement on whichever connection is free, in a transaction of its
      // own: a message written through it would outlive the caller's rollback.
      if (isPool(client)) {
        throw new OutboxTransactionRequiredError(OutboxMessages.pgPoolGiven());
      }
      // 'T': inside BEGIN; 'I': idle (each statement would commit on its own); 'E': a failed
      // transaction, which can only roll back. pg before 8.21 lacks the method and the native
      // client answers null: then it cannot be told (docs/without-typeorm.md says so).
      const status = client.getTransactionStatus?.() ?? null;
      if (status !== null && status !== 'T') {
        throw new OutboxTransactionRequiredError(
          OutboxMessages.pgTransactionRequired(status === 'E' ? "'E', failed" : `'${status}'`),
        );
      }
      if (clients !== undefined && !clients.has(client)) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'client',
            'pool',
            'Enqueue with a client of the pool given to pgOutbox(pool).',
          ),
        );
      }
      return pgSqlRunner(client, true);
    },
  };
}

function isPool(handle: unknown): boolean {
  // pg.Pool counts its clients and hands them out; a PoolClient is released, not connected.
  return (
    typeof handle === 'object' &&
    handle !== null &&
    typeof (handle as { totalCount?: unknown }).totalCount === 'number' &&
    typeof (handle as { release?: unknown }).release !== 'function'
  );
}
