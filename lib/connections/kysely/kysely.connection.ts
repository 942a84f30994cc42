import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { refusingEndedTransaction } from '../../drivers/ended-transaction';
import { MysqlAdapter, PostgresAdapter, SqliteAdapter } from 'kysely';
import { OutboxError } from '../../errors/outbox.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import {
  kyselySqlPort,
  kyselySqlRunner,
  type KyselyDatabase,
  type KyselyExecutor,
  type KyselySqlPortOptions,
} from './kysely.sql-port';

/** Kysely's own adapters, and the database each speaks. */
const ADAPTERS: readonly {
  readonly adapter: abstract new (...args: never[]) => object;
  readonly database: NonNullable<KyselyOutboxOptions['databaseType']>;
}[] = [
  { adapter: PostgresAdapter, database: 'postgres' },
  { adapter: MysqlAdapter, database: 'mysql' },
  { adapter: SqliteAdapter, database: 'sqlite' },
];

/** What Kysely answers from `getExecutor()`: the adapter of the instance's dialect. */
interface KyselyQueryExecutor {
  readonly adapter: object;
}

/**
 * A Kysely `Transaction` (from `db.transaction().execute(trx => …)`) or `ControlledTransaction`
 * (from `db.startTransaction().execute()`), of any database interface.
 */
export interface KyselyTransaction extends KyselyExecutor {
  readonly isTransaction: boolean;
  getExecutor(): KyselyQueryExecutor;
  /** The same transaction without the app's plugins. */
  withoutPlugins(): KyselyExecutor;
  /** A ControlledTransaction's state; a callback Transaction has neither. */
  readonly isCommitted?: boolean;
  readonly isRolledBack?: boolean;
}

/** A `Kysely` instance, of any database interface. */
export interface KyselyInstance extends KyselyDatabase {
  getExecutor(): KyselyQueryExecutor;
  /** The same instance (pool, dialect, logging) without the app's plugins. */
  withoutPlugins(): KyselyDatabase;
}

/** What `kyselyOutbox` cannot read from the Kysely instance. */
export interface KyselyOutboxOptions {
  /**
   * The database, when the dialect's adapter is not Kysely's own PostgreSQL, MySQL or SQLite one
   * (which name it). `mysql` and `mariadb` are the same to the outbox.
   */
  readonly databaseType?: 'postgres' | 'mysql' | 'mariadb' | 'sqlite';
  /**
   * SQLite: the database file, where the dispatcher opens a connection of its own (Kysely does
   * not tell it). Needed when the dispatcher, unlocker or cleaner run.
   */
  readonly databaseFile?: string;
}

/**
 * The outbox on a Kysely instance, for `OutboxModule.forRoot({ connection: kyselyOutbox(db) })`:
 * the outbox's own statements and short transactions run through `db` (its pool and logging);
 * `enqueue(message, trx)` writes with the `Transaction` of
 * `db.transaction().execute(async (trx) => …)`. The database is read from the dialect's adapter
 * (PostgreSQL, MySQL/MariaDB, SQLite). The outbox never destroys `db`.
 *
 * Kysely has no commit event and holds no connection for LISTEN: the dispatcher finds the
 * message at its next poll.
 */
export function kyselyOutbox(
  db: KyselyInstance,
  options: KyselyOutboxOptions = {},
): OutboxConnection<KyselyTransaction> {
  refuseUnknownCallOptions('kyselyOutbox()', options, {
    '': { databaseType: true, databaseFile: true } satisfies Record<
      keyof KyselyOutboxOptions,
      true
    >,
  });
  const adapter = db.getExecutor().adapter;
  // The outbox's SQL is finished and reads its own column names: a plugin of the app's (one
  // that renames columns, such as CamelCasePlugin, or adds a schema) must not touch it.
  return {
    sql: kyselySqlPort(db.withoutPlugins(), portOptions(adapter, options)),
    join(trx) {
      if (trx.isTransaction !== true || trx.isCommitted === true || trx.isRolledBack === true) {
        throw new OutboxTransactionRequiredError(OutboxMessages.kyselyTransactionRequired());
      }
      // A Transaction's executor keeps the adapter of the instance it was started on, one per
      // instance: another adapter is another Kysely instance, whose transaction commits apart.
      if (trx.getExecutor().adapter !== adapter) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'Kysely Transaction',
            'Kysely instance',
            'Enqueue with a Transaction of the Kysely instance given to kyselyOutbox(db).',
          ),
        );
      }
      // Kysely's Transaction does not say that it has ended; its statements then fail with
      // this message, before reaching the database.
      return refusingEndedTransaction(
        kyselySqlRunner(trx.withoutPlugins()),
        (error) =>
          error instanceof Error &&
          /^Transaction is already (committed|rolled back)$/.test(error.message),
        () => new OutboxTransactionRequiredError(OutboxMessages.kyselyTransactionRequired()),
      );
    },
  };
}

function portOptions(adapter: object, options: KyselyOutboxOptions): KyselySqlPortOptions {
  const databaseType = options.databaseType ?? databaseOf(adapter);
  if (databaseType === undefined) {
    throw new OutboxOptionsError(
      OutboxMessages.optionInvalid(
        'connection',
        `kyselyOutbox(db) cannot tell the database of the dialect's adapter ${adapter.constructor.name}`,
        "Name it: kyselyOutbox(db, { databaseType: 'postgres' }) (or 'mysql', 'mariadb', 'sqlite').",
      ),
      'connection',
    );
  }
  if (databaseType !== 'sqlite') return { databaseType };
  // Without a file the SQLite store refuses to open the dispatcher's connection, with a message
  // that says why; an app without workers needs none.
  return { databaseType, databaseFile: options.databaseFile ?? '' };
}

function databaseOf(adapter: object): KyselyOutboxOptions['databaseType'] {
  // An adapter of a second copy of Kysely (another version installed beside the app's) fails
  // instanceof; Kysely's own adapters still carry their class names.
  return (
    ADAPTERS.find((a) => adapter instanceof a.adapter) ??
    ADAPTERS.find((a) => adapter.constructor.name === a.adapter.name)
  )?.database;
}
