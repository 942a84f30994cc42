import { refusingEndedTransaction } from '../../drivers/ended-transaction';
import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { PrismaClientLike, PrismaTransactionClient } from './prisma-client';
import { prismaSqlPort, prismaSqlRunner, type PrismaDatabase } from './prisma.sql-port';

const FIX_TX =
  'call it inside prisma.$transaction(async (tx) => { … }) with that tx ' +
  '(docs/prisma.md#enqueue-in-your-transaction).';

/**
 * The outbox on Prisma Client (PostgreSQL, MySQL/MariaDB or SQLite, read from the client's
 * provider), for `OutboxModule.forRoot({ connection: prismaOutbox(prisma) })`; then
 * `outbox.enqueue(event, tx)` with the `tx` of `prisma.$transaction(async (tx) => …)`. Every
 * statement goes through Prisma's raw queries (`$queryRawUnsafe`, `$executeRawUnsafe`) with the
 * values bound as parameters, on the client's own connections; on SQLite the dispatcher works
 * on a better-sqlite3 connection of its own to the same file. The client stays the app's: the
 * outbox never disconnects it.
 */
export function prismaOutbox(prisma: PrismaClientLike): OutboxConnection<PrismaTransactionClient> {
  const database = databaseOf(prisma);
  const origin = originalClient(prisma);
  return {
    sql: prismaSqlPort(prisma, database),
    join(tx) {
      if (typeof tx?.$queryRawUnsafe !== 'function') {
        throw required(tx === undefined ? 'nothing' : 'a value that is not a Prisma client');
      }
      // The client itself runs each statement in a transaction of its own. The tx of an
      // interactive transaction is the client without its client-level methods ($connect,
      // $disconnect, $on, $extends); Prisma 7 keeps $transaction on it for nesting.
      if (typeof (tx as { $connect?: unknown }).$connect === 'function') {
        throw required('the PrismaClient itself (each statement would commit on its own)');
      }
      const txOrigin = originalClient(tx);
      if (origin !== undefined && txOrigin !== undefined && txOrigin !== origin) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'Prisma transaction',
            'PrismaClient',
            'Enqueue with a tx of the client given to prismaOutbox(prisma).',
          ),
        );
      }
      // A tx kept after its $transaction ended: Prisma refuses its statements with P2028
      // ("Transaction already closed") before they reach the database.
      return refusingEndedTransaction(
        prismaSqlRunner(tx, database),
        (error) => (error as { code?: unknown } | null)?.code === 'P2028',
        () =>
          required(
            'a Prisma transaction that has ended (its $transaction callback returned or threw)',
          ),
      );
    },
  };
}

function required(handle: string): OutboxTransactionRequiredError {
  return new OutboxTransactionRequiredError(OutboxMessages.ormTransactionRequired(handle, FIX_TX));
}

/**
 * The database, from Prisma's name for its provider (`postgresql`, `mysql`, `sqlite`, …), where
 * the client shows it. Read structurally: it is not public API, so a client without it is taken
 * for PostgreSQL and its statements fail at once if it is not.
 */
function databaseOf(prisma: object): PrismaDatabase {
  const provider = (prisma as { _activeProvider?: unknown })._activeProvider;
  if (typeof provider !== 'string') return 'postgres';
  const database = PROVIDERS.get(provider);
  if (database === undefined) {
    throw new OutboxError(
      OutboxMessages.ormUnsupportedClient(
        `Prisma on ${provider}`,
        'prismaOutbox(prisma) runs on PostgreSQL (provider "postgresql"), MySQL/MariaDB ("mysql") and SQLite ("sqlite").',
      ),
    );
  }
  return database;
}

/** Prisma's providers the outbox has SQL for. CockroachDB and SQL Server it has not. */
const PROVIDERS: ReadonlyMap<string, PrismaDatabase> = new Map([
  ['postgresql', 'postgres'],
  ['postgres', 'postgres'],
  ['mysql', 'mysql'],
  ['sqlite', 'sqlite'],
]);

/** The client a transaction client (or an extended client) was made from, where it shows it. */
function originalClient(client: object): object | undefined {
  const original = (client as { _originalClient?: unknown })._originalClient;
  return typeof original === 'object' && original !== null ? original : undefined;
}
