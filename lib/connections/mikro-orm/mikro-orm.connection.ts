import { OutboxError } from '../../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxConnection } from '../../store/ports/outbox-connection';
import { outboxDatabase } from '../../store/schema/outbox-table-ddl';
import type { MikroOrmEntityManager, MikroOrmInstance } from './mikro-orm-client';
import { mikroOrmSqlPort, mikroOrmSqlRunner, type MikroOrmDatabase } from './mikro-orm.sql-port';

const FIX_EM =
  'call it inside em.transactional(async (em) => { … }) with that em, or in a method decorated ' +
  'with @Transactional() (docs/mikro-orm.md#enqueue-in-your-transaction).';

/**
 * The outbox on MikroORM 6 (PostgreSQL, MySQL, MariaDB or SQLite), for
 * `OutboxModule.forRoot({ connection: mikroOrmOutbox(orm) })`; then `outbox.enqueue(event, em)`
 * with the EntityManager of `em.transactional(async (em) => …)`. The outbox's own work runs in
 * transactions of forks of `orm.em`, on the same connection pool; on SQLite the dispatcher,
 * unlocker and cleaner work on a better-sqlite3 connection of their own to the ORM's file
 * (`dbName`). The ORM stays the app's: the outbox never closes it.
 */
export function mikroOrmOutbox<Em extends MikroOrmEntityManager>(
  orm: MikroOrmInstance<Em>,
): OutboxConnection<Em> {
  const database = databaseOf(orm.em);
  const connection = orm.em.getConnection();
  const file = outboxDatabase(database).file ? orm.config.get('dbName') : undefined;
  return {
    sql: mikroOrmSqlPort(orm.em, database, typeof file === 'string' ? file : undefined),
    join(em) {
      if (typeof em?.getTransactionContext !== 'function') {
        throw required(em === undefined ? 'nothing' : 'a value that is not an EntityManager');
      }
      const ctx = em.getTransactionContext();
      if (ctx === undefined || ctx === null) {
        throw required(
          'an EntityManager outside a transaction (each statement would commit on its own)',
        );
      }
      // MikroORM 6's context is a knex transaction, which says when it has ended; a fork kept
      // after its transactional() callback still holds it.
      const completed = (ctx as { isCompleted?: () => boolean }).isCompleted?.();
      if (completed === true) {
        throw required('an EntityManager whose transaction has ended');
      }
      if (em.getConnection() !== connection) {
        throw new OutboxError(
          OutboxMessages.foreignTransaction(
            'EntityManager',
            'MikroORM instance',
            'Enqueue with an EntityManager forked from the orm given to mikroOrmOutbox(orm).',
          ),
        );
      }
      return mikroOrmSqlRunner(em, ctx, database);
    },
  };
}

function required(handle: string): OutboxTransactionRequiredError {
  return new OutboxTransactionRequiredError(OutboxMessages.ormTransactionRequired(handle, FIX_EM));
}

/** The database behind the ORM, from its platform's class (one per driver package). */
function databaseOf(em: MikroOrmEntityManager): MikroOrmDatabase {
  const platform = em.getPlatform().constructor.name;
  const known = PLATFORMS.find(([name]) => name.test(platform));
  if (known !== undefined) return known[1];
  throw new OutboxError(
    OutboxMessages.ormUnsupportedClient(
      `MikroORM's ${platform}`,
      'mikroOrmOutbox(orm) runs on @mikro-orm/postgresql, @mikro-orm/mysql, @mikro-orm/mariadb and @mikro-orm/better-sqlite (or @mikro-orm/sqlite).',
    ),
  );
}

/** MikroORM's platform classes by name, and the database each runs on. */
const PLATFORMS: readonly (readonly [RegExp, MikroOrmDatabase])[] = [
  [/^PostgreSql/, 'postgres'],
  [/^(MySql|MariaDb)/, 'mysql'],
  // @mikro-orm/better-sqlite, @mikro-orm/sqlite and @mikro-orm/libsql: one knex SQLite dialect.
  [/^(BetterSqlite|Sqlite|LibSql)Platform/, 'sqlite'],
];
