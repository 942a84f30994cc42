import type { SqlPort } from '../ports/sql-port';

/**
 * Whether the database answers a statement that reads no table. Asked after a schema probe
 * failed, so that a database that is down, refuses the credentials or sits behind an ended pool
 * is not reported as a table to create.
 */
export function databaseAnswers(sql: Pick<SqlPort, 'query'>): Promise<boolean> {
  return sql.query('SELECT 1').then(
    () => true,
    () => false,
  );
}
