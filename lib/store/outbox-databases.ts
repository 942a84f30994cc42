import { mysqlDatabase } from './mysql/mysql.database';
import type { OutboxDatabase } from './outbox-database';
import { postgresDatabase } from './postgres/postgres.database';
import { sqliteDatabase } from './sqlite/sqlite.database';

/**
 * The supported databases by TypeORM driver type. Adding a database is a folder of its own
 * under `lib/store/` and a line here; the store, admin, inbox and migrations all look it up.
 */
export const OUTBOX_DATABASES = {
  postgres: postgresDatabase,
  mysql: mysqlDatabase,
  mariadb: mysqlDatabase,
  sqlite: sqliteDatabase,
  'better-sqlite3': sqliteDatabase,
} as const satisfies Readonly<Record<string, OutboxDatabase>>;

/** The TypeORM driver types the outbox supports. */
export type OutboxDriverType = keyof typeof OUTBOX_DATABASES;

/** The database a DATABASE_URL scheme names, or undefined. */
export function outboxDatabaseOfScheme(scheme: string): OutboxDatabase | undefined {
  return Object.values(OUTBOX_DATABASES).find((d) => d.urlSchemes.includes(scheme));
}

/** The database of a TypeORM driver type, or undefined when the outbox does not support it. */
export function outboxDatabaseOf(type: string): OutboxDatabase | undefined {
  return Object.prototype.hasOwnProperty.call(OUTBOX_DATABASES, type)
    ? OUTBOX_DATABASES[type as OutboxDriverType]
    : undefined;
}
