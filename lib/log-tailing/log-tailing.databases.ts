import type { OutboxLogSourceContext } from '../store/ports/outbox-log-source.port';
import type { OutboxDialect } from '../store/schema/outbox-table-ddl';
import type { LogTailingDatabase, NoLogTailing } from './log-tailing.database';
import { mysqlLogTailing } from './mysql/mysql-log-tailing';
import { postgresLogTailing } from './postgres/postgres-log-tailing';

/**
 * Log tailing by dialect. Adding a database's log is a folder of its own under
 * `lib/log-tailing/` (a source behind `OutboxLogSource`) and its line here; a dialect added to
 * `lib/store/outbox-databases.ts` without one fails to compile here.
 */
export const LOG_TAILING_DATABASES: Readonly<
  Record<OutboxDialect, LogTailingDatabase | NoLogTailing>
> = {
  postgres: postgresLogTailing,
  mysql: mysqlLogTailing,
  sqlite: { unsupported: 'SQLite has no replication log' },
};

// The port spells the dialects out (it sits below the store's registry): this fails to compile
// until a dialect added there is added to the port too.
type SameUnion<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const PORT_NAMES_EVERY_DIALECT: SameUnion<OutboxLogSourceContext['database'], OutboxDialect> = true;
void PORT_NAMES_EVERY_DIALECT;

/** The databases log tailing reads, as messages list them (`PostgreSQL or MySQL/MariaDB`). */
export function logTailingTitles(conjunction: 'or' | 'and'): string {
  const titles = Object.values(LOG_TAILING_DATABASES).flatMap((d) =>
    'title' in d ? [d.title] : [],
  );
  return titles.length <= 1
    ? titles.join('')
    : `${titles.slice(0, -1).join(', ')} ${conjunction} ${titles.at(-1) ?? ''}`;
}

/** Log tailing on a dialect, or undefined where it has none. */
export function logTailingOf(dialect: string): LogTailingDatabase | undefined {
  if (!Object.prototype.hasOwnProperty.call(LOG_TAILING_DATABASES, dialect)) return undefined;
  const database = LOG_TAILING_DATABASES[dialect as OutboxDialect];
  return 'unsupported' in database ? undefined : database;
}
